"""Divergence: the rule that says a run diverged, and the restarts of Melis thesis Sec. 4.4.

The thesis says what to do when training diverges ("reset the weights and the optimization state to
the previous best checkpoint and multiply the learning rate by 0.9") but not how divergence is
recognised. infolm's rule (``loss_diverged``): a training loss diverged when it is not finite, or
when it has stayed above ``loss_factor x ln |V|`` for ``patience`` consecutive steps. ``ln |V|`` is
the per-token cross-entropy of the uniform distribution over the vocabulary, the loss of a model
that has learned nothing; a model whose loss is twice that for several steps in a row is confidently
wrong everywhere, which an ordinary noisy step or an early spike does not produce. The rule is
always on: with restarts off (the default), a divergence stops the run with one clear error and
keeps what is on disk; with ``enabled: true`` it triggers the restarts.

The policy only decides; the trainer acts. Its contract:

1. after every optimizer step call ``policy.check(loss)`` with the step's training loss (per-token
   mean, a float; all ranks must pass the same value under DDP); ``policy.suspect`` is True while
   the loss is above the bound but ``patience`` has not run out (no checkpoint should be written
   then);
2. when ``check`` returns True and ``config.enabled``: call ``policy.restart()`` (raises
   ``InfolmError`` after ``max_restarts``), then restore model, optimizers, averager, schedule and
   data position from the best checkpoint (the initial weights if none was written yet) -- but NOT
   this policy, whose state must survive; when it returns True and restarts are off: stop with
   ``policy.describe(step, loss)`` as the error;
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
    enabled: bool = False  # restart from the best checkpoint on divergence (Sec. 4.4); off: stop with an error
    lr_factor: float = 0.9  # learning-rate multiplier per restart (Sec. 4.4)
    loss_factor: float = 2.0  # diverged: training loss above loss_factor x ln|V| (the uniform model's loss) ...
    patience: int = 3  # ... for this many consecutive steps (infolm's rule; the thesis gives none)
    max_restarts: int = 10  # give up after this many restarts

    def __post_init__(self) -> None:
        if not 0.0 < self.lr_factor <= 1.0:
            raise InfolmError(f"train.divergence.lr_factor must be in (0, 1], got {self.lr_factor}")
        if self.loss_factor <= 1.0:
            raise InfolmError(f"train.divergence.loss_factor must be above 1, got {self.loss_factor}")
        if self.patience < 1:
            raise InfolmError(f"train.divergence.patience must be at least 1, got {self.patience}")
        if self.max_restarts < 0:
            raise InfolmError(f"train.divergence.max_restarts must be non-negative, got {self.max_restarts}")


def loss_bound(vocab_size: int, loss_factor: float) -> float:
    """``loss_factor x ln |V|``: the training loss above which a step counts towards divergence."""
    return loss_factor * math.log(max(vocab_size, 2))


def loss_diverged(losses: list[float], bound: float, patience: int) -> bool:
    """The rule on a run's losses so far: the last is not finite, or the last ``patience`` are all above
    ``bound``."""
    if losses and not math.isfinite(losses[-1]):
        return True
    return len(losses) >= patience and all(loss > bound for loss in losses[-patience:])


class DivergencePolicy:
    """Applies ``loss_diverged`` to the stream of training losses and counts restarts."""

    def __init__(self, config: DivergenceConfig, vocab_size: int) -> None:
        self.config = config
        self.bound = loss_bound(vocab_size, config.loss_factor)
        self.recent: list[float] = []  # the last ``patience`` training losses since the last restart
        self.restarts = 0

    @property
    def lr_scale(self) -> float:
        """Multiplier of the scheduled learning rate: ``lr_factor ** restarts``."""
        return self.config.lr_factor**self.restarts

    @property
    def suspect(self) -> bool:
        """The last loss is above the bound (divergence is declared if it stays there)."""
        return bool(self.recent) and not self.recent[-1] <= self.bound

    def check(self, loss: float) -> bool:
        """True if training diverged at this loss (the trainer must restart or stop)."""
        self.recent = [*self.recent, float(loss)][-self.config.patience :]
        diverged = loss_diverged(self.recent, self.bound, self.config.patience)
        if diverged:
            self.recent = []
        return diverged

    def describe(self, step: int, loss: float) -> str:
        """The one-line reason a run stopped."""
        if not math.isfinite(loss):
            why = f"loss is {loss}"
        else:
            why = (
                f"loss {loss:.4g} has been above {self.config.loss_factor:g} x ln|V| = {self.bound:.2f} "
                f"for {self.config.patience} steps"
            )
        return f"training diverged at step {step}: {why}"

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
        return {"recent": list(self.recent), "restarts": self.restarts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.recent = [float(loss) for loss in state.get("recent", [])]
        self.restarts = int(state["restarts"])
