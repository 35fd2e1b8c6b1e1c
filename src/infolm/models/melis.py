"""The Melis language model (thesis ch. 2 and Sec. 4.2): LSTM, Mogrifier or Rewired LSTM cells, residual stacking.

With time steps t and layers l = 1..L (Sec. 4.2):

    x^0_t = E^in[w_t] * M^in_t                     input dropout (a new mask each step by default)
    x^l_t = h^l_t * M^cell,l_t                     cell-output dropout, before the residual sum
    h_prev of layer l is read as h^l_{t-1} * M^state,l   (variational: one mask per sequence)
    layer 1 reads x^0_t; layer l > 1 reads sum_{i=1}^{l-1} x^i_t
    p(. | w_<t) = softmax((sum_{l=1}^L x^l_t) * M^out E^out + b^out)

So with two layers residual stacking equals the skip connections of the thesis's baseline (Sec. 4.7). When the
embedding size differs from the hidden size, a linear projection maps the output to the embedding space
(App. 2.A, ``input_embedding_ratio``).
"""

from __future__ import annotations

import dataclasses
from typing import cast

import torch
from torch import Tensor, nn

from infolm.errors import InfolmError
from infolm.models.base import LanguageModel, LMOutput, State, register_model
from infolm.models.cells import LSTMCell, MogrifierLSTMCell, RecurrentCell, RLSTMCell

CELL_NAMES = ("lstm", "mogrifier", "rlstm", "mogrifier_rlstm")


@dataclasses.dataclass
class MelisConfig:
    cell: str = "mogrifier"  # lstm | mogrifier | rlstm | mogrifier_rlstm (the thesis's best, Table 4.1; eager only)
    layers: int = 2  # recurrent layers (thesis: 2 on PTB / Wikitext-2, 6 on Enwik8 / Text8, Sec. 4.6)
    hidden: int = 200  # cell state size n of every layer
    emb: int | None = None  # embedding size m; None: = hidden (Sec. 4.2 assumes m = n, no projection)
    # m = round(ratio x hidden) instead of emb; >= 1: m = n and no projection (App. 2.A, tuned in [0, 2], Table 2.4)
    input_embedding_ratio: float | None = None
    rounds: int = 5  # Mogrifier rounds r (Eq. 2.2); tuned in 0..6, best r in {5, 6} (Sec. 2.3.1)
    rank: int = 64  # rank k of Q^i, R^i; <= 0: full rank (App. 2.A); best k in [40..90] (Sec. 2.3.1)
    capped_input_gate: bool = True  # LSTM/Mogrifier: c = f c + min(i, 1 - f) j, as the thesis's LSTM (Sec. 4.6)
    residual: bool = True  # residual stacking of Sec. 4.2; False: layer l reads only layer l-1's dropped output
    tie_weights: bool = True  # E^out = E^in transposed (Sec. 4.2, word-level tasks)
    dropout_input: float = 0.0  # M^in on embeddings; thesis tunes it in [0, 0.9] (Table 2.4)
    dropout_state: float = 0.0  # variational M^state on h_prev (and on c in the RLSTM's o); [0, 0.8] (Table 2.4)
    dropout_cell: float = 0.0  # M^cell,l on each cell output before the residual sum; replaces inter-layer dropout
    dropout_output: float = 0.0  # M^out before the softmax; [0, 0.95] (Table 2.4)
    locked_masks: bool = False  # False: new M^in, M^cell, M^out each step (M_t, Sec. 4.2); True: one per sequence
    chrono_t_max: float = 0.0  # > 0: forget biases b^f ~ ln U(1, T_max - 1) (Sec. 4.4); tuned in [e^2, e^5]
    init_range: float = 0.1  # embedding ~ U(-init_range, init_range); cells use U(-1/sqrt(n), 1/sqrt(n))
    backend: str = "fused"  # cell implementation: fused (hand-written BPTT, fast) | eager (autograd reference)

    def __post_init__(self) -> None:
        if self.cell not in CELL_NAMES:
            raise InfolmError(f"model.cell must be one of {', '.join(CELL_NAMES)}; got {self.cell!r}")
        if self.backend not in ("fused", "eager"):
            raise InfolmError(f"model.backend must be fused or eager; got {self.backend!r}")
        for key in ("layers", "hidden"):
            if getattr(self, key) < 1:
                raise InfolmError(f"model.{key} must be positive, got {getattr(self, key)}")
        if self.emb is not None and self.emb < 1:
            raise InfolmError(f"model.emb must be positive, got {self.emb}")
        if self.rounds < 0:
            raise InfolmError(f"model.rounds must be >= 0, got {self.rounds}")
        if self.input_embedding_ratio is not None and self.input_embedding_ratio < 0:
            raise InfolmError(f"model.input_embedding_ratio must be >= 0, got {self.input_embedding_ratio}")
        for key in ("dropout_input", "dropout_state", "dropout_cell", "dropout_output"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise InfolmError(f"model.{key} must be in [0, 1), got {getattr(self, key)}")
        if self.chrono_t_max != 0.0 and self.chrono_t_max <= 2.0:
            raise InfolmError(f"model.chrono_t_max must be 0 (off) or > 2, got {self.chrono_t_max}")


def embedding_size(config: MelisConfig) -> int:
    """m: ``input_embedding_ratio`` x hidden when set (at least 1; a ratio >= 1 gives m = n), else ``emb``."""
    ratio = config.input_embedding_ratio
    if ratio is None:
        return config.emb or config.hidden
    return config.hidden if ratio >= 1.0 else max(1, round(ratio * config.hidden))


def dropout_mask(like: Tensor, p: float, locked: bool) -> Tensor | None:
    """Inverted-dropout mask for ``like (B, T, H)``: ``(B, 1, H)`` if locked over time else ``(B, T, H)``."""
    if p == 0.0:
        return None
    shape = (like.size(0), 1, like.size(2)) if locked else like.shape
    return like.new_empty(shape).bernoulli_(1.0 - p).div_(1.0 - p)


def _apply(x: Tensor, mask: Tensor | None) -> Tensor:
    return x if mask is None else x * mask


def make_cell(config: MelisConfig, input_size: int) -> nn.Module:
    """One recurrent cell of ``config.cell`` reading ``input_size`` features (hidden size ``config.hidden``)."""
    if config.cell == "lstm":
        return LSTMCell(input_size, config.hidden, config.capped_input_gate, config.backend)
    if config.cell == "mogrifier":
        return MogrifierLSTMCell(
            input_size, config.hidden, config.rounds, config.rank, config.capped_input_gate, config.backend
        )
    rounds = config.rounds if config.cell == "mogrifier_rlstm" else 0
    return RLSTMCell(input_size, config.hidden, config.backend, rounds, config.rank)


def make_cells(config: MelisConfig, emb: int) -> nn.ModuleList:
    """``config.layers`` cells, the first reading embeddings of size ``emb`` (chrono init when set, Sec. 4.4)."""
    cells = nn.ModuleList(make_cell(config, emb if layer == 0 else config.hidden) for layer in range(config.layers))
    if config.chrono_t_max > 0.0:
        for cell in cells:
            cast(RecurrentCell, cell).chrono_init_(config.chrono_t_max)
    return cells


def run_cells(
    cells: nn.ModuleList, x: Tensor, state: State, config: MelisConfig, training: bool
) -> tuple[Tensor, list[Tensor], list[Tensor], list[tuple[Tensor, Tensor]]]:
    """The stack of Sec. 4.2 over embeddings ``x (B, T, E)`` from ``state`` (per layer ``(h, c)``), with its
    dropouts when ``training``: returns the softmax input (after M^out), ``hiddens`` (the input of each next
    layer; the last entry is the softmax input), ``raw_hiddens`` (each cell's output ``h^l``) and the state after
    the last step."""
    locked = config.locked_masks
    if training:
        x = _apply(x, dropout_mask(x, config.dropout_input, locked))  # M^in
    raw_hiddens: list[Tensor] = []
    hiddens: list[Tensor] = []
    new_state = []
    stream: Tensor | None = None  # sum of the dropped cell outputs so far
    for cell, layer_state in zip(cells, state):
        state_mask = None
        if training and config.dropout_state > 0.0:
            state_mask = x.new_empty(x.size(0), config.hidden).bernoulli_(1.0 - config.dropout_state)
            state_mask.div_(1.0 - config.dropout_state)  # M^state,l: (B, H), fixed over time
        h, layer_state = cell(x, tuple(layer_state), state_mask)  # (B, T, H)
        raw_hiddens.append(h)
        new_state.append(layer_state)
        if training:
            h = _apply(h, dropout_mask(h, config.dropout_cell, locked))  # x^l = h^l * M^cell,l
        if config.residual:
            stream = h if stream is None else stream + h
            x = stream
        else:
            x = h
        hiddens.append(x)
    if training:
        x = _apply(x, dropout_mask(x, config.dropout_output, locked))  # M^out
        hiddens[-1] = x
    return x, hiddens, raw_hiddens, new_state


@register_model("melis", config=MelisConfig)
class MelisLM(LanguageModel):
    """Melis LM: embedding -> [R]LSTM / Mogrifier layers with residual sums and four dropouts -> tied softmax."""

    def __init__(self, config: MelisConfig, vocab_size: int) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        emb = embedding_size(config)
        self.embedding = nn.Embedding(vocab_size, emb)
        nn.init.uniform_(self.embedding.weight, -config.init_range, config.init_range)
        self.cells = make_cells(config, emb)
        out_size = emb if config.tie_weights else config.hidden
        self.projection = nn.Linear(config.hidden, out_size) if out_size != config.hidden else None
        self.decoder = nn.Linear(out_size, vocab_size)
        nn.init.zeros_(self.decoder.bias)
        if config.tie_weights:
            self.decoder.weight = self.embedding.weight

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> State:
        """Per layer ``(h, c)``, each ``(B, H)`` zeros (Sec. 4.2: c_0, h_0 = 0, 0)."""
        zeros = torch.zeros(batch_size, self.config.hidden, device=device)
        return [(zeros, zeros) for _ in self.cells]

    def forward(self, tokens: Tensor, state: State = None) -> LMOutput:
        """``tokens (B, T)`` -> logits ``(B, T, V)``; ``hiddens[l]`` is the input of layer l + 1 (the residual sum),
        the last entry the softmax input after output dropout; ``raw_hiddens[l]`` is cell l's output ``h^l``."""
        config = self.config
        if state is None:
            state = self.init_state(tokens.size(0), tokens.device)
        if len(state) != len(self.cells):
            raise InfolmError(f"state has {len(state)} layers, the model has {len(self.cells)}")
        x = self.embedding(tokens)  # (B, T, E)
        x, hiddens, raw_hiddens, new_state = run_cells(self.cells, x, state, config, self.training)
        if self.projection is not None:
            x = self.projection(x)  # (B, T, E): into the output-embedding space
        logits = self.decoder(x)  # (B, T, V)
        return LMOutput(logits=logits, hiddens=hiddens, state=new_state, raw_hiddens=raw_hiddens)

    def extra_repr(self) -> str:
        config = self.config
        return f"cell={config.cell}, layers={config.layers}, hidden={config.hidden}, residual={config.residual}"
