"""Divergence: the rule that says a run diverged, and the restarts of Melis thesis Sec. 4.4.

The thesis says what to do when training diverges ("reset the weights and the optimization state to
the previous best checkpoint and multiply the learning rate by 0.9") but not how divergence is
recognised. infolm's rule (``loss_diverged``): a training loss diverged when it is not finite, or
when its magnitude has stayed above a bound for ``patience`` consecutive steps. The bound comes from
the objective (``Objective.loss_scale``, summed over a Composite's terms by weight):

* a known scale -- about the loss of a model that has learned nothing: ``ln |V|`` for a token-level
  cross-entropy over the vocabulary or a bound on -ln p(x) per token, ``ln`` of the candidate count
  for a contrastive term, ``ln C`` for a C-class head -- gives ``loss_factor x scale``. A model
  whose cross-entropy is twice the uniform model's for several steps in a row is confidently wrong
  everywhere, which an ordinary noisy step or an early spike does not produce;
* an objective with a term of no known scale (A-MIM's -1/2 (ln q(z|x) + ln P(z)), which no ln |V|
  bounds; a loss per sentence; a KL whose weight is annealed; contrastive sets that vary with the
  batch) is judged on the run's own losses: ``relative_factor x`` the largest loss magnitude of the
  run so far that was not itself above the bound (the first loss, at the initial weights, always
  counts). The factor is wide: a per-sentence loss reads several times higher on a length-bucketed
  batch of long sentences than on one of short sentences. A healthy loss that rises as a schedule
  asks (KL annealing) carries the reference with it; an explosion leaves it by orders of magnitude
  in a step or two. A sustained rise by less than that factor (which the tighter bound of a known
  scale would catch) goes unnoticed until the loss is no longer finite.

The rule is always on: with restarts off (the default), a divergence stops the run with one clear
error and keeps what is on disk; with ``enabled: true`` it triggers the restarts.

The policy only decides; the trainer acts. Its contract:

1. build the policy with ``objective.loss_scale(vocab_size)`` (after the objective's ``setup``);
2. after every optimizer step call ``policy.check(loss)`` with the step's training loss (a float; all
   ranks must pass the same value under DDP); ``policy.suspect`` is True while the loss is above the
   bound but ``patience`` has not run out (no checkpoint should be written then);
3. when ``check`` returns True and ``config.enabled``: call ``policy.restart()`` (raises
   ``InfolmError`` after ``max_restarts``), then restore model, optimizers, averager, schedule and
   data position from the best checkpoint (the initial weights if none was written yet) -- but NOT
   this policy, whose state must survive; when it returns True and restarts are off: stop with
   ``policy.describe(step, loss)`` as the error;
4. the effective learning rate is always ``schedule lr x batch lr_scale x policy.lr_scale``, where
   ``policy.lr_scale = lr_factor ** restarts``, so restarts compound however often the same
   checkpoint is restored;
5. save ``policy.state_dict()`` in checkpoints and load it only when resuming a run.
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
    loss_factor: float = 2.0  # diverged: |training loss| above loss_factor x the objective's loss scale ...
    relative_factor: float = 10.0  # ... (no known scale: relative_factor x the run's largest loss so far) ...
    patience: int = 3  # ... for this many consecutive steps (infolm's rule; the thesis gives none)
    max_restarts: int = 10  # give up after this many restarts

    def __post_init__(self) -> None:
        if not 0.0 < self.lr_factor <= 1.0:
            raise InfolmError(f"train.divergence.lr_factor must be in (0, 1], got {self.lr_factor}")
        for key in ("loss_factor", "relative_factor"):
            if not getattr(self, key) > 1.0:
                raise InfolmError(f"train.divergence.{key} must be above 1, got {getattr(self, key)}")
        if self.patience < 1:
            raise InfolmError(f"train.divergence.patience must be at least 1, got {self.patience}")
        if self.max_restarts < 0:
            raise InfolmError(f"train.divergence.max_restarts must be non-negative, got {self.max_restarts}")


def loss_bound(scale: float, loss_factor: float) -> float:
    """``loss_factor x scale``: the loss magnitude above which a step counts towards divergence."""
    return loss_factor * scale


def loss_diverged(losses: list[float], bound: float, patience: int) -> bool:
    """The rule on a run's losses so far: the last is not finite, or the last ``patience`` all have a
    magnitude above ``bound``."""
    if losses and not math.isfinite(losses[-1]):
        return True
    return len(losses) >= patience and all(abs(loss) > bound for loss in losses[-patience:])


class DivergencePolicy:
    """Applies ``loss_diverged`` to the stream of training losses and counts restarts.

    ``scale``: the objective's loss scale (``Objective.loss_scale``); None: the objective has a term of
    no known scale, and the bound is ``relative_factor`` x the largest accepted loss magnitude so far.
    """

    def __init__(self, config: DivergenceConfig, scale: float | None) -> None:
        self.config = config
        self.scale = scale
        self.reference: float | None = None  # scale None: the largest |loss| so far not above the bound
        self.recent: list[float] = []  # the last ``patience`` training losses since the last restart
        self.restarts = 0

    @property
    def bound(self) -> float:
        """The loss magnitude above which a step counts towards divergence (inf before a reference)."""
        if self.scale is not None:
            return loss_bound(self.scale, self.config.loss_factor)
        if self.reference is None:  # the first loss, at the initial weights, is the reference
            return math.inf
        return loss_bound(self.reference, self.config.relative_factor)

    @property
    def lr_scale(self) -> float:
        """Multiplier of the scheduled learning rate: ``lr_factor ** restarts``."""
        return self.config.lr_factor**self.restarts

    @property
    def suspect(self) -> bool:
        """The last loss is above the bound (divergence is declared if it stays there)."""
        return bool(self.recent) and not abs(self.recent[-1]) <= self.bound

    def check(self, loss: float) -> bool:
        """True if training diverged at this loss (the trainer must restart or stop)."""
        loss = float(loss)
        # With factors above 1 the bound only grows, and only by losses under it: every earlier loss of
        # ``recent`` is judged against the present bound as it was against its own.
        bound = self.bound
        self.recent = [*self.recent, loss][-self.config.patience :]
        diverged = loss_diverged(self.recent, bound, self.config.patience)
        if diverged:
            self.recent = []
        elif self.scale is None and abs(loss) <= bound:
            self.reference = max(self.reference or 0.0, abs(loss))
        return diverged

    def describe(self, step: int, loss: float) -> str:
        """The one-line reason a run stopped."""
        if not math.isfinite(loss):
            why = f"loss is {loss}"
        elif self.scale is not None:
            why = (
                f"loss {loss:.4g} has been above {self.config.loss_factor:g} x {self.scale:.4g} "
                f"(the objective's loss scale) = {self.bound:.2f} for {self.config.patience} steps"
            )
        else:
            why = (
                f"loss {loss:.4g} has been above {self.config.relative_factor:g} x {self.reference or 0.0:.4g} "
                f"(the run's largest loss before) = {self.bound:.2f} for {self.config.patience} steps"
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
        return {"recent": list(self.recent), "restarts": self.restarts, "reference": self.reference}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.recent = [float(loss) for loss in state.get("recent", [])]
        self.restarts = int(state["restarts"])
        reference = state.get("reference")
        self.reference = None if reference is None else float(reference)
