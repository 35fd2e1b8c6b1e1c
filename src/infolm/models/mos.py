"""AWD-LSTM with a mixture-of-softmaxes head (AWD-LSTM-MoS; Merity et al. 2017, Yang et al. 2017).

The baseline of the BMI paper (Cao & Xu, Sec. 5). A 3-layer LSTM with weight-dropped recurrent
matrices, embedding dropout and locked (variational) dropout, followed by a mixture of K softmaxes:

    p(x_t | c_t) = sum_k pi_k(c_t) softmax(W h_{t,k}),   h_{t,k} = tanh(P_k g_t),   pi(c_t) = softmax(U g_t)

computed in log space. ``LMOutput.logits`` holds the mixture's log-probabilities, so
``log_softmax(logits) == logits`` and every consumer of the contract sees the right distribution.
Defaults are small for CPU runs; the paper's PTB values are in the comments.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from infolm.errors import InfolmError
from infolm.models.base import LanguageModel, LMOutput, State, register_model
from infolm.models.dropout import embedding_dropout, locked_dropout, weight_drop


@dataclasses.dataclass
class MoSConfig:
    emb: int = 64  # embedding size = expert latent size (tied decoder); paper 280
    hidden: int = 128  # hidden size of the first layers; paper 960
    last_hidden: int = 64  # hidden size of the last layer; paper 620
    layers: int = 3  # LSTM layers; paper 3
    n_experts: int = 4  # mixture components K; paper 15
    dropout: float = 0.4  # locked dropout on the last layer's output; paper 0.4
    dropouth: float = 0.225  # locked dropout between LSTM layers; paper 0.225
    dropouti: float = 0.4  # locked dropout on the embedded input; paper 0.4
    dropoute: float = 0.1  # embedding (whole-word) dropout; paper 0.1
    dropoutl: float = 0.29  # locked dropout on the experts' latent vectors; paper 0.29
    wdrop: float = 0.5  # DropConnect on the hidden-to-hidden LSTM weights; paper 0.5
    init_range: float = 0.1  # uniform init of embedding and latent projection; paper 0.1
    # the expert projection's bias: the MoS code's nn.Linear has one (kept by Cao & Xu), Yang et al.'s
    # h_{t,k} = tanh(P_k g_t) has none. At the CPU configs' size (emb 32) the bias holds SGD at lr 20 near
    # the unigram (train loss ~7.0 after 1,200 steps, ~6.3 without it; docs/notebook/bmi.md)
    latent_bias: bool = True

    def __post_init__(self) -> None:
        for key in ("emb", "hidden", "last_hidden", "layers", "n_experts"):
            if getattr(self, key) < 1:
                raise InfolmError(f"model.{key} must be positive, got {getattr(self, key)}")
        for key in ("dropout", "dropouth", "dropouti", "dropoute", "dropoutl", "wdrop"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise InfolmError(f"model.{key} must be in [0, 1), got {getattr(self, key)}")


class WeightDropLSTM(nn.Module):
    """One LSTM layer whose hidden-to-hidden matrix gets DropConnect at every forward pass.

    The dropped matrix is passed to cuDNN/the fused kernel with ``functional_call``, so the raw
    parameter keeps its name (``lstm.weight_hh_l0``) and receives the gradient.
    """

    def __init__(self, input_size: int, hidden_size: int, wdrop: float) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, batch_first=True)
        self.wdrop = wdrop

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if self.training and self.wdrop > 0.0:
            weight: Tensor = self.lstm.weight_hh_l0  # type: ignore[assignment]
            dropped = weight_drop(weight, self.wdrop, training=True)  # (4H, H)
            out, new_state = functional_call(self.lstm, {"weight_hh_l0": dropped}, (x, state))
        else:
            out, new_state = self.lstm(x, state)
        return out, new_state  # (B, T, H), ((1, B, H), (1, B, H))


@register_model("awd-lstm-mos", config=MoSConfig)
class AWDLSTMMoS(LanguageModel):
    """AWD-LSTM (3 layers, weight drop, locked dropout, tied embeddings) with a mixture-of-softmaxes head."""

    def __init__(self, config: MoSConfig, vocab_size: int) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        c = config
        self.encoder = nn.Embedding(vocab_size, c.emb)
        sizes = [c.emb] + [c.hidden] * (c.layers - 1) + [c.last_hidden]
        self.hidden_sizes = sizes[1:]
        self.rnns = nn.ModuleList(WeightDropLSTM(sizes[i], sizes[i + 1], c.wdrop) for i in range(c.layers))
        self.prior = nn.Linear(c.last_hidden, c.n_experts, bias=False)  # mixture weights pi(c_t)
        self.latent = nn.Linear(c.last_hidden, c.n_experts * c.emb, bias=c.latent_bias)  # expert contexts, then tanh
        self.decoder = nn.Linear(c.emb, vocab_size)
        self.decoder.weight = self.encoder.weight  # tied input/output embeddings (Inan et al., Press & Wolf)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r = self.config.init_range
        nn.init.uniform_(self.encoder.weight, -r, r)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.latent.weight, -r, r)
        if self.latent.bias is not None:
            nn.init.zeros_(self.latent.bias)

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> State:
        return [
            (torch.zeros(1, batch_size, h, device=device), torch.zeros(1, batch_size, h, device=device))
            for h in self.hidden_sizes
        ]

    def forward(self, tokens: Tensor, state: State = None) -> LMOutput:
        output = self.hidden_states(tokens, state)
        output.logits = self.output_log_probs(output.hiddens[-1])  # (B, T, V) log-probabilities
        return output

    def hidden_states(self, tokens: Tensor, state: State = None) -> LMOutput:
        """The recurrent part only: hiddens, raw_hiddens and state; ``logits`` is empty (B, T, 0).

        Sentence features (BMI's phi) need no softmax; the mixture head costs K x V per token.
        """
        c = self.config
        if state is None:
            state = self.init_state(tokens.size(0), tokens.device)
        x = F.embedding(tokens, embedding_dropout(self.encoder.weight, c.dropoute, self.training))  # (B, T, E)
        x = locked_dropout(x, c.dropouti, self.training)
        hiddens, raw_hiddens, new_state = [], [], []
        for layer, rnn in enumerate(self.rnns):
            raw, layer_state = rnn(x, state[layer])  # (B, T, H_l)
            raw_hiddens.append(raw)
            new_state.append(layer_state)
            last = layer == len(self.rnns) - 1
            x = locked_dropout(raw, c.dropout if last else c.dropouth, self.training)
            hiddens.append(x)
        empty = x.new_zeros(*tokens.shape, 0)
        return LMOutput(logits=empty, hiddens=hiddens, state=new_state, raw_hiddens=raw_hiddens)

    def output_log_probs(self, g: Tensor) -> Tensor:
        """Log of the mixture of softmaxes (Yang et al. 2017, Eq. 5) from the last layer's output g: (B, T, H).

        The output layer alone: with ``hidden_states``, a caller scores only the positions it needs (BMI's
        IW-RAML: Y, not X). Locked dropout on the experts' latents shares one mask along T within a row."""
        c = self.config
        batch_size, steps, _ = g.shape
        log_prior = F.log_softmax(self.prior(g), dim=-1)  # (B, T, K)
        latent = torch.tanh(self.latent(g))  # (B, T, K*E)
        latent = locked_dropout(latent, c.dropoutl, self.training)
        latent = latent.view(batch_size, steps, c.n_experts, c.emb)  # (B, T, K, E)
        expert_logits = self.decoder(latent)  # (B, T, K, V)
        expert_log_probs = F.log_softmax(expert_logits, dim=-1)
        # log sum_k pi_k p_k(x): stable in log space (the MoS code sums probabilities then takes a log)
        return torch.logsumexp(expert_log_probs + log_prior.unsqueeze(-1), dim=2)  # (B, T, V)
