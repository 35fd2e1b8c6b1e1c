"""GRU language model: embedding -> stacked GRUs -> softmax.

The latent-free counterpart of SentenceMIM's decoder (``latent/sentence_gru.py``: a 1-layer GRU over
the input embeddings, 50% embedding dropout drawn per token): with ``task: sentence-lm`` it is the
sentence LM whose cell matches the latent arms' (Livne et al. Sec. 3 use a GRU, after Bowman et al.).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from infolm.errors import InfolmError
from infolm.models.base import LanguageModel, LMOutput, State, register_model
from infolm.models.dropout import sequence_dropout, uniform_init_


@dataclasses.dataclass
class GRUConfig:
    emb: int = 300  # embedding size (SentenceMIM, PTB: 300)
    hidden: int = 512  # hidden size of every layer (SentenceMIM, PTB: 512)
    layers: int = 1  # stacked GRU layers (SentenceMIM: 1)
    tie_weights: bool = False  # share the embedding and softmax matrices (needs emb == hidden)
    dropout: float = 0.0  # dropout on the last layer's output (SentenceMIM: none)
    dropout_input: float = 0.5  # dropout on the input embeddings (SentenceMIM Sec. 4.2: "50% embedding dropout")
    dropout_hidden: float = 0.0  # dropout between stacked layers
    locked_dropout: bool = False  # a new mask per token, as SentenceMIM's nn.Dropout; True: one per sequence (AWD)
    init_range: float = 0.0  # uniform init range of all weights; 0 keeps PyTorch's (as SentenceMIM's decoder)

    def __post_init__(self) -> None:
        for key in ("emb", "hidden", "layers"):
            if getattr(self, key) < 1:
                raise InfolmError(f"model.{key} must be positive, got {getattr(self, key)}")
        for key in ("dropout", "dropout_input", "dropout_hidden"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise InfolmError(f"model.{key} must be in [0, 1), got {getattr(self, key)}")
        if self.tie_weights and self.emb != self.hidden:
            raise InfolmError(f"model.tie_weights needs model.emb == model.hidden, got {self.emb} and {self.hidden}")


@register_model("gru", config=GRUConfig)
class GRULM(LanguageModel):
    """GRU LM: embedding -> stacked GRUs (one nn.GRU per layer) -> softmax. State: h of every layer."""

    def __init__(self, config: GRUConfig, vocab_size: int) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, config.emb)
        sizes = [config.emb] + [config.hidden] * (config.layers - 1)
        self.rnns = nn.ModuleList(nn.GRU(size, config.hidden, batch_first=True) for size in sizes)
        self.decoder = nn.Linear(config.hidden, vocab_size)
        if config.init_range > 0:
            uniform_init_(self, config.init_range)
        if config.tie_weights:
            self.decoder.weight = self.embedding.weight

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> State:
        return [torch.zeros(1, batch_size, self.config.hidden, device=device) for _ in self.rnns]  # (1, B, H) each

    def forward(self, tokens: Tensor, state: State = None) -> LMOutput:
        config, locked = self.config, self.config.locked_dropout
        if state is None:
            state = self.init_state(tokens.size(0), tokens.device)
        x = sequence_dropout(self.embedding(tokens), config.dropout_input, self.training, locked)  # (B, T, E)
        raw_hiddens, hiddens, new_state = [], [], []
        for layer, rnn in enumerate(self.rnns):
            x, layer_state = rnn(x, state[layer])  # (B, T, H), (1, B, H)
            raw_hiddens.append(x)
            new_state.append(layer_state)
            last = layer == len(self.rnns) - 1
            x = sequence_dropout(x, config.dropout if last else config.dropout_hidden, self.training, locked)
            hiddens.append(x)
        logits = self.decoder(x)  # (B, T, V)
        return LMOutput(logits=logits, hiddens=hiddens, state=new_state, raw_hiddens=raw_hiddens)
