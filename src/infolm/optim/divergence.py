"""Divergence restarts (Melis thesis Sec. 4.4): when training diverges, reset the weights and the
optimization state to the best checkpoint and multiply the learning rate by 0.9.

The policy only decides; the trainer acts. Its contract:

1. after every optimizer step call ``policy.check(loss)`` with the step's training loss (per-token
   mean of the main term, a float; all ranks must pass the same value under DDP);
2. when it returns True: call ``policy.restart()`` (raises ``InfolmError`` after ``max_restarts``),
   then restore model, optimizers, averager, schedule and data position from the best checkpoint
   (the initial weights if none was written yet) -- but NOT this policy, whose state must survive;
3. the effective learning rate is always ``schedule lr x batch lr_scale x policy.lr_scale``, where
   ``policy.lr_scale = lr_factor ** restarts``, so restarts compound however often the same
   checkpoint is restored;
4. save ``policy.state_dict()`` in checkpoints and load it only when resuming a run.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from infolm.errors import InfolmError


@dataclasses.dataclass
class DivergenceConfig:
    enabled: bool = True  # restart from the best checkpoint when the training loss diverges (Sec. 4.4)
    lr_factor: float = 0.9  # learning-rate multiplier per restart (Sec. 4.4)
    max_ratio: float = 2.0  # a finite loss above max_ratio x the best loss seen so far also counts as divergence
    max_restarts: int = 10  # give up after this many restarts

    def __post_init__(self) -> None:
        if not 0.0 < self.lr_factor <= 1.0:
            raise InfolmError(f"divergence lr_factor must be in (0, 1], got {self.lr_factor}")
        if self.max_ratio <= 1.0:
            raise InfolmError(f"divergence max_ratio must be above 1, got {self.max_ratio}")
        if self.max_restarts < 0:
            raise InfolmError(f"divergence max_restarts must be non-negative, got {self.max_restarts}")


class DivergencePolicy:
    """Detects divergence of a stream of losses and counts restarts."""

    def __init__(self, config: DivergenceConfig) -> None:
        self.config = config
        self.best = math.inf  # lowest finite loss passed to check()
        self.restarts = 0

    @property
    def lr_scale(self) -> float:
        """Multiplier of the scheduled learning rate: ``lr_factor ** restarts``."""
        return self.config.lr_factor**self.restarts

    def is_divergent(self, loss: float) -> bool:
        """Non-finite, or above ``max_ratio`` x the best loss (losses are positive: NLL-like)."""
        if not math.isfinite(loss):
            return True
        return math.isfinite(self.best) and self.best > 0 and loss > self.config.max_ratio * self.best

    def check(self, loss: float) -> bool:
        """True if training diverged at this loss (the trainer must then restart); else track the best."""
        loss = float(loss)
        if not self.config.enabled:
            return False
        if self.is_divergent(loss):
            return True
        self.best = min(self.best, loss)
        return False

    def restart(self) -> float:
        """Count a restart; returns the new ``lr_scale``. Raises when ``max_restarts`` is exceeded."""
        if self.restarts >= self.config.max_restarts:
            raise InfolmError(
                f"training diverged {self.restarts + 1} times (max_restarts={self.config.max_restarts}); "
                "lower the learning rate or raise the gradient clip"
            )
        self.restarts += 1
        return self.lr_scale

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "restarts": self.restarts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = float(state["best"])
        self.restarts = int(state["restarts"])
