"""Masked language modelling (Devlin et al.): cross-entropy of the original subword at each masked
position under a softmax over the whole vocabulary (Kong et al. Eq. 2, InfoNCE with B = V).

The loss is the mean over the masked subwords of the batch; under ``torchrun`` over every rank's
(``across_ranks.mean_over_ranks``), so that each masked subword weighs the same whichever rank holds it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from infolm.data.masking import IGNORE_INDEX, MLM_INPUTS
from infolm.objectives.across_ranks import mean_over_ranks, world
from infolm.objectives.base import Batch, Objective, Terms, register_objective


def masked_states(model: Any, batch: Batch, output: Any) -> Tensor:
    """The encoder states that MLM terms read: the shared pass when the batch's inputs are the masked
    sequence (pretraining), else a pass over ``extras[MLM_INPUTS]`` (MLM beside a task loss)."""
    if MLM_INPUTS in batch.extras:
        return model(batch.extras[MLM_INPUTS], padding_mask=batch.padding_mask).states
    return output.states


@dataclasses.dataclass
class MLMConfig:
    weight: float = 1.0  # λ_MLM (Kong et al. App. B: 1.0)


@register_objective("mlm", config=MLMConfig)
class MaskedLM(Objective):
    """BERT's MLM loss: full-softmax cross-entropy at the masked positions."""

    needs = frozenset({"masked-positions"})
    protocols = frozenset({"encoder"})

    def __init__(self, config: MLMConfig) -> None:
        super().__init__()
        self.config = config

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        masked = batch.targets != IGNORE_INDEX  # (B, T)
        states = masked_states(model, batch, output)[masked]  # (N, D)
        logits = model.mlm_logits(model.mlm_features(states))  # type: ignore[operator]  # (N, V)
        if world()[1] == 1:
            loss = F.cross_entropy(logits.float(), batch.targets[masked])
        else:  # the mean over every rank's masked subwords, not each rank's mean averaged
            loss = mean_over_ranks(F.cross_entropy(logits.float(), batch.targets[masked], reduction="none"))
        return Terms(losses={"mlm": loss}, tokens=int(masked.sum()))
