"""Multi-dropout-sample objective (Melis thesis Sec. 4.3): the likelihood averaged over D dropout masks.

    -ln p(w_t | w_<t) = -ln( (1/D) sum_d p(w_t | w_<t, M^d_t) ) = -(logsumexp_d ln p_d - ln D)

per token, averaged over tokens. It replaces ``mle`` in a config (an IWAE-style bound tighter than the
single-sample one, Sec. 4.3). The shared forward pass is the first sample; the other D - 1 samples are
further forward passes from ``batch.state`` with fresh dropout masks.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from infolm.data.batching import IGNORE_INDEX
from infolm.errors import InfolmError
from infolm.models.base import select_state
from infolm.objectives.base import Batch, Objective, Terms, register_objective


@dataclasses.dataclass
class MultiSampleConfig:
    weight: float = 1.0  # multiplier in the Composite
    samples: int = 8  # D dropout samples (thesis: 8 on word-level PTB, 4 on Wikitext-2 and char PTB, Sec. 4.6)
    batched: bool = False  # run the D - 1 extra samples as one pass on the batch tiled D - 1 times (faster; only
    # valid when every dropout mask is drawn per sequence, as in the melis model, not per batch like weight drop)

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise InfolmError(f"objective.multisample.samples must be at least 1, got {self.samples}")


def token_log_probs(logits: Tensor, targets: Tensor) -> Tensor:
    """``ln p(target)`` per token: logits (B, T, V), targets (B, T) -> (B, T); 0 where the target is padding."""
    nll = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="none"
    )
    return -nll.view_as(targets)


def multisample_nll(sample_log_probs: Tensor, targets: Tensor) -> Tensor:
    """Mean over non-padding tokens of ``-(logsumexp_d lp_d - ln D)``; sample_log_probs (D, B, T)."""
    samples = sample_log_probs.size(0)
    per_token = -(torch.logsumexp(sample_log_probs, 0) - math.log(samples))  # (B, T), Sec. 4.3
    keep = targets != IGNORE_INDEX
    return per_token[keep].mean()


@register_objective("multisample", config=MultiSampleConfig)
class MultiSample(Objective):
    """-ln of the mean probability over D dropout samples (Melis thesis Sec. 4.3)."""

    def __init__(self, config: MultiSampleConfig) -> None:
        super().__init__()
        self.config = config

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        targets = batch.targets
        log_probs = [token_log_probs(output.logits, targets)]  # the shared pass is sample 1
        extra = self.config.samples - 1
        if extra > 0 and self.config.batched:
            batch_size = batch.inputs.size(0)
            rows = torch.arange(batch_size, device=batch.inputs.device).repeat(extra)  # (D-1) B
            state = select_state(batch.state, rows) if batch.state is not None else None
            logits = model(batch.inputs.repeat(extra, 1), state).logits  # ((D-1) B, T, V)
            log_probs.extend(token_log_probs(logits, targets.repeat(extra, 1)).split(batch_size))
        else:
            for _ in range(extra):
                log_probs.append(token_log_probs(model(batch.inputs, batch.state).logits, targets))
        stacked = torch.stack(log_probs)  # (D, B, T)
        loss = multisample_nll(stacked, targets)
        keep = targets != IGNORE_INDEX
        first_sample = float(-stacked[0][keep].mean().detach())
        return Terms(
            losses={"multisample": loss},
            metrics={"multisample_first_sample_nll": first_sample},
            tokens=int(keep.sum()),
        )
