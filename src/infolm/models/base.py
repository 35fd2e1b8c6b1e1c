"""The language-model contract: a registry and a typed output.

Every model maps token ids ``(B, T)`` and an optional recurrent state to an :class:`LMOutput`.
Objectives and evaluation only rely on this contract.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._pytree import tree_map

from infolm.registry import Registry

MODELS: Registry[LanguageModel] = Registry("model")
register_model = MODELS.register

State = Any  # a pytree of tensors (tuple/list/dict), or None for stateless models


@dataclasses.dataclass
class LMOutput:
    logits: Tensor  # (B, T, V) scores whose log_softmax is the next-token log-distribution
    hiddens: list[Tensor]  # per layer, (B, T, H_l): outputs over time (last entry feeds the softmax)
    state: State = None  # recurrent state after the last step (None for stateless models)
    extras: dict[str, Tensor] = dataclasses.field(default_factory=dict)  # model-specific fields
    raw_hiddens: list[Tensor] | None = None  # per layer before output dropout (AR/TAR use these)


class LanguageModel(nn.Module):
    """Base class: ``forward(tokens (B, T), state) -> LMOutput``."""

    vocab_size: int
    # The model protocol (names in ``infolm.tasks.PROTOCOLS``); a task serves some protocols only.
    protocol: str = "causal-lm"

    @classmethod
    def max_input_length(cls, config: Any) -> int | None:
        """The longest input row a model built from ``config`` reads (None: no limit)."""
        return None

    def forward(self, tokens: Tensor, state: State = None) -> LMOutput:  # pragma: no cover - abstract
        raise NotImplementedError

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> State:
        """The state before the first token of a stream (None for stateless models)."""
        return None

    def state_after(self, tokens: Tensor, state: State = None) -> State:
        """The recurrent state after reading ``tokens`` (B, T), differentiable; no logits needed.

        Equal to ``self(tokens, state).state`` in evaluation mode; recurrent models override it to skip the softmax
        layer (IMM replays extended contexts and reads a prediction only after the last token).
        """
        return self(tokens, state).state

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def detach_state(state: State) -> State:
    """Cut the graph through a recurrent state (truncated BPTT)."""
    return tree_map(lambda t: t.detach() if isinstance(t, Tensor) else t, state)


def select_state(state: State, index: Tensor) -> State:
    """Rows ``index`` of every tensor in ``state`` (states are batch-first in dim 0 or dim 1)."""
    return tree_map(lambda t: t.index_select(_batch_dim(t), index) if isinstance(t, Tensor) else t, state)


def _batch_dim(t: Tensor) -> int:
    return 1 if t.dim() == 3 else 0


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Evaluation mode (dropout off) for extra passes inside training (IMM Sec. 6, induced-model
    evaluation); every submodule's own mode is restored afterwards.

    cuDNN's recurrent layers refuse a backward pass through a forward pass made in eval mode: a
    recurrent layer without dropout of its own keeps its mode (its output is the same in both), and
    the pass runs without cuDNN when a layer has dropout between its stacked layers."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    without_cudnn = False
    for module, training in modes:
        if isinstance(module, nn.RNNBase) and training:
            if module.dropout == 0 or module.num_layers == 1:
                module.training = True
            else:
                without_cudnn = True
    flags = torch.backends.cudnn.flags(enabled=False) if without_cudnn else contextlib.nullcontext()
    try:
        with flags:
            yield
    finally:
        for module, training in modes:
            module.training = training
