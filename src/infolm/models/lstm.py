"""LSTM language model with tied embeddings and the AWD-LSTM dropouts (Merity et al. 2017)."""

from __future__ import annotations

import dataclasses
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from infolm.errors import InfolmError
from infolm.models.base import LanguageModel, LMOutput, State, register_model
from infolm.models.dropout import embedding_dropout, sequence_dropout, uniform_init_, weight_drop


@dataclasses.dataclass
class LSTMConfig:
    emb: int = 200  # embedding size (the last layer's size when weights are tied)
    hidden: int = 200  # hidden size of every layer but the last (all layers when untied)
    layers: int = 2  # stacked LSTM layers
    tie_weights: bool = True  # share the embedding and softmax matrices (Press & Wolf 2017)
    dropout: float = 0.0  # dropout on the last layer's output (AWD: 0.4, locked)
    dropout_input: float = 0.0  # dropout on the embeddings (AWD dropouti: 0.65, locked)
    dropout_hidden: float = 0.0  # dropout between layers (AWD dropouth: 0.3, locked)
    dropout_embedding: float = 0.0  # word-type dropout on the embedding matrix (AWD dropoute: 0.1)
    weight_drop: float = 0.0  # DropConnect on hidden-to-hidden weights (AWD wdrop: 0.5)
    locked_dropout: bool = True  # one dropout mask per sequence (AWD); False: a new mask per time step (Xie et al.)
    init_range: float = 0.1  # uniform init range of all weights (Zaremba et al.: 0.1); 0 keeps PyTorch's
    initial_state: str = "zero"  # zero | learned: (h, c) of every layer before the first token, learned from
    # zeros (a sentence LM's decoder starts every sentence there; a stream LM only at each epoch start)

    def __post_init__(self) -> None:
        for key in ("emb", "hidden", "layers"):
            if getattr(self, key) < 1:
                raise InfolmError(f"model.{key} must be positive, got {getattr(self, key)}")
        if self.initial_state not in ("zero", "learned"):
            raise InfolmError(f"model.initial_state must be zero or learned, got {self.initial_state!r}")
        for key in ("dropout", "dropout_input", "dropout_hidden", "dropout_embedding", "weight_drop"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise InfolmError(f"model.{key} must be in [0, 1), got {getattr(self, key)}")


@register_model("lstm", config=LSTMConfig)
class LSTMLM(LanguageModel):
    """LSTM LM: embedding -> stacked LSTMs (one nn.LSTM per layer) -> tied softmax."""

    def __init__(self, config: LSTMConfig, vocab_size: int) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, config.emb)
        sizes = [config.emb] + [config.hidden] * (config.layers - 1)
        last = config.emb if config.tie_weights else config.hidden
        outs = [config.hidden] * (config.layers - 1) + [last]
        self.rnns = nn.ModuleList(nn.LSTM(i, o, batch_first=True) for i, o in zip(sizes, outs))
        self.decoder = nn.Linear(last, vocab_size)
        if config.init_range > 0:
            uniform_init_(self, config.init_range)
        if config.tie_weights:
            self.decoder.weight = self.embedding.weight
        self.initial_states = nn.ParameterList()  # per layer (2, H): learned h_0 and c_0
        if config.initial_state == "learned":
            self.initial_states.extend(nn.Parameter(torch.zeros(2, o)) for o in outs)

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> State:
        if len(self.initial_states):
            return [
                (p[0].expand(1, batch_size, -1).contiguous(), p[1].expand(1, batch_size, -1).contiguous())
                for p in self.initial_states
            ]
        sizes = [cast(nn.LSTM, rnn).hidden_size for rnn in self.rnns]
        return [
            (torch.zeros(1, batch_size, h, device=device), torch.zeros(1, batch_size, h, device=device)) for h in sizes
        ]

    def _run_layer(self, rnn: nn.LSTM, x: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if torch.is_autocast_enabled(x.device.type):
            # oneDNN has no bf16 LSTM primitive on CPU: the recurrence runs in fp32, the softmax GEMM in bf16.
            with torch.autocast(x.device.type, enabled=False):
                return self._run_layer(rnn, x.float(), (state[0].float(), state[1].float()))
        p = self.config.weight_drop
        if p > 0.0 and self.training:
            dropped = {"weight_hh_l0": weight_drop(cast(Tensor, rnn.weight_hh_l0), p, True)}
            out, new_state = functional_call(rnn, dropped, (x, state), strict=False)
            return out, new_state
        return rnn(x, state)

    def state_after(self, tokens: Tensor, state: State = None) -> State:
        """The state after ``tokens`` without the softmax layer (equals ``self(tokens, state).state``)."""
        if state is None:
            state = self.init_state(tokens.size(0), tokens.device)
        config, locked = self.config, self.config.locked_dropout
        weight = embedding_dropout(self.embedding.weight, config.dropout_embedding, self.training)
        x = sequence_dropout(F.embedding(tokens, weight), config.dropout_input, self.training, locked)  # (B, T, E)
        new_state = []
        for layer, rnn in enumerate(self.rnns):
            x, layer_state = self._run_layer(cast(nn.LSTM, rnn), x, state[layer])  # (B, T, H_l)
            new_state.append(layer_state)
            if layer < len(self.rnns) - 1:
                x = sequence_dropout(x, config.dropout_hidden, self.training, locked)
        return new_state

    def forward(self, tokens: Tensor, state: State = None) -> LMOutput:
        config, locked = self.config, self.config.locked_dropout
        if state is None:
            state = self.init_state(tokens.size(0), tokens.device)
        weight = embedding_dropout(self.embedding.weight, config.dropout_embedding, self.training)
        x = F.embedding(tokens, weight)  # (B, T, E)
        x = sequence_dropout(x, config.dropout_input, self.training, locked)
        raw_hiddens, hiddens, new_state = [], [], []
        for layer, rnn in enumerate(self.rnns):
            x, layer_state = self._run_layer(cast(nn.LSTM, rnn), x, state[layer])  # (B, T, H_l)
            raw_hiddens.append(x)
            new_state.append(layer_state)
            last = layer == len(self.rnns) - 1
            x = sequence_dropout(x, config.dropout if last else config.dropout_hidden, self.training, locked)
            hiddens.append(x)
        logits = self.decoder(x)  # (B, T, V)
        return LMOutput(logits=logits, hiddens=hiddens, state=new_state, raw_hiddens=raw_hiddens)
