"""Classification cross-entropy of an encoder's head on the [CLS] representation (BERT fine-tuning)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch.nn.functional as F
from torch import nn

from infolm.objectives.base import Batch, Objective, Terms, register_objective


@dataclasses.dataclass
class ClassificationLossConfig:
    weight: float = 1.0  # multiplier in the Composite (the task loss of IMM App. D.2, untouched)


@register_objective("classification", config=ClassificationLossConfig)
class ClassificationLoss(Objective):
    """Softmax cross-entropy of the labels from the classification head (Devlin et al.; Kong et al. Sec. 5.3)."""

    needs = frozenset({"labels"})
    protocols = frozenset({"encoder"})

    def __init__(self, config: ClassificationLossConfig) -> None:
        super().__init__()
        self.config = config
        self.num_labels = 2  # classes of the model's head (``setup``)

    def setup(self, corpus: Any, model: nn.Module) -> None:
        self.num_labels = int(getattr(getattr(model, "config", None), "num_labels", 0) or 2)

    def loss_scale(self, vocab_size: int) -> float | None:
        return math.log(max(self.num_labels, 2))  # the uniform guess over the classes

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        assert batch.labels is not None
        logits = model.classify(output.sentence)  # type: ignore[operator]  # (B, C)
        loss = F.cross_entropy(logits.float(), batch.labels)
        return Terms(losses={"classification": loss}, tokens=int(batch.labels.numel()))
