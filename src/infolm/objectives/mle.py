"""Maximum likelihood: per-token cross-entropy of the next token."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from infolm.data.batching import IGNORE_INDEX
from infolm.objectives.base import Batch, Objective, Terms, register_objective


def token_cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy over non-padding targets. logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=IGNORE_INDEX)


@dataclasses.dataclass
class MLEConfig:
    weight: float = 1.0  # multiplier in the Composite


@register_objective("mle", config=MLEConfig)
class MLE(Objective):
    """Cross-entropy of the shared forward pass (the usual LM loss); for an encoder-decoder, of the
    decoder's predictions (the task ignores the source half of the targets)."""

    protocols = frozenset({"causal-lm", "seq2seq"})

    def __init__(self, config: MLEConfig) -> None:
        super().__init__()
        self.config = config

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        loss = token_cross_entropy(output.logits, batch.targets)
        tokens = int((batch.targets != IGNORE_INDEX).sum())
        return Terms(losses={"mle": loss}, tokens=tokens)
