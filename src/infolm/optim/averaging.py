"""Weight averaging as wrappers around any optimizer: Two-Tailed (Melis thesis ch. 3), tail, EMA.

An averager watches a list of parameters. The trainer drives it through one protocol:

* ``update(step)`` after every optimizer step adds the new iterate ``theta_step`` to the averages;
* ``observe(evaluate)`` at every validation point: ``evaluate()`` must return the validation loss
  of the parameters as they currently are (the averager swaps weights in and out around its calls).
  It returns the loss of the weights that ``swap_in`` now loads, i.e. *the* validation loss to
  log, to early-stop on and to pick the best checkpoint with. Two-Tailed Averaging adapts its
  averaging lengths here (Alg. 1 and 2: its evaluation period E is the trainer's evaluation period);
  tail averaging may start here (NT-ASGD trigger); the others just evaluate their average;
* ``swap_in()`` / ``swap_out()`` or ``with averager.averaged():`` put the averaged weights into the
  parameters temporarily (evaluation, exported weights, generation) and restore the raw iterate;
* ``metrics()`` floats to log; ``state_dict()`` / ``load_state_dict()`` hold only tensors, ints and
  floats (checkpoints load with ``torch.load(weights_only=True)``). Checkpoints for resuming store
  the raw parameters plus this state; weights for evaluation are saved inside ``averaged()``.

Averages are kept in at least float32, on the parameters' device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from infolm.errors import InfolmError
from infolm.optim.ntasgd import NonMonotoneTrigger
from infolm.registry import Registry

AVERAGERS: Registry[WeightAverager] = Registry("averager")
register_averager = AVERAGERS.register

Evaluate = Callable[[], float]


class WeightAverager:
    """Base class and the identity averager: the 'average' is the current iterate."""

    def __init__(self, config: Any, params: Iterable[nn.Parameter]) -> None:
        self.config = config
        self.params = list(params)
        if not self.params:
            raise InfolmError("weight averaging needs at least one parameter")
        self._backup: list[Tensor] | None = None

    # -- the averaged weights ------------------------------------------------------------------
    def average(self) -> list[Tensor] | None:
        """The averaged weights, one tensor per parameter, or None when the raw iterate is the estimate."""
        return None

    def update(self, step: int) -> None:
        """Add the parameters after optimizer step ``step`` (1-based) to the average."""
        self._check_not_swapped("update")

    def set_horizon(self, total_steps: int) -> None:
        """The number of training steps of the run (announced by the trainer; default: unused)."""

    def observe(self, evaluate: Evaluate) -> float:
        """At an evaluation point: the validation loss of the weights ``swap_in`` loads."""
        self._check_not_swapped("observe")
        with self.averaged():
            return float(evaluate())

    # -- swapping ------------------------------------------------------------------------------
    @torch.no_grad()
    def swap_in(self) -> None:
        """Load the averaged weights into the parameters (the raw iterate is kept aside)."""
        self._check_not_swapped("swap_in")
        average = self.average()
        self._backup = [] if average is None else [p.detach().clone() for p in self.params]
        if average is not None:
            torch._foreach_copy_([p.data for p in self.params], average)

    @torch.no_grad()
    def swap_out(self) -> None:
        """Restore the raw iterate saved by :meth:`swap_in`."""
        if self._backup is None:
            raise RuntimeError("swap_out() without swap_in()")
        if self._backup:
            torch._foreach_copy_([p.data for p in self.params], self._backup)
        self._backup = None

    @contextlib.contextmanager
    def averaged(self) -> Iterator[None]:
        """Context in which the parameters hold the averaged weights."""
        self.swap_in()
        try:
            yield
        finally:
            self.swap_out()

    def to(self, device: torch.device | str) -> None:
        """Move the averages to ``device``, where the parameters went (the trainer moves the model after
        the averager is built)."""
        for name, value in vars(self).items():
            if name != "params" and isinstance(value, list) and value and all(isinstance(t, Tensor) for t in value):
                setattr(self, name, [t.to(device) for t in value])

    # -- logging and checkpoints ---------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    # -- helpers -------------------------------------------------------------------------------
    def _check_not_swapped(self, what: str) -> None:
        if self._backup is not None:
            raise RuntimeError(f"{what}() while the averaged weights are swapped in; call swap_out() first")

    def _new_buffers(self) -> list[Tensor]:
        """Copies of the parameters in (at least) float32: the storage of one running average."""
        return [p.detach().to(torch.promote_types(p.dtype, torch.float32), copy=True) for p in self.params]

    def _save_buffers(self, prefix: str, buffers: list[Tensor], out: dict[str, Any]) -> None:
        for i, buffer in enumerate(buffers):
            out[f"{prefix}.{i}"] = buffer

    @torch.no_grad()
    def _load_buffers(self, prefix: str, buffers: list[Tensor], state: dict[str, Any]) -> None:
        for i, buffer in enumerate(buffers):
            key = f"{prefix}.{i}"
            if key not in state or not isinstance(state[key], Tensor):
                raise InfolmError(
                    f"averager state has no tensor {key!r}: the checkpoint is for another averager or model"
                )
            if state[key].shape != buffer.shape:
                raise InfolmError(
                    f"averager state {key!r} has shape {tuple(state[key].shape)}, expected {tuple(buffer.shape)}"
                )
            buffer.copy_(state[key])
        if f"{prefix}.{len(buffers)}" in state:
            raise InfolmError(f"averager state holds more {prefix!r} tensors than the model has parameters")


@torch.no_grad()
def _add_to_mean(mean: list[Tensor], count: int, params: list[nn.Parameter]) -> int:
    """Running mean: ``mean <- mean + (theta - mean) / (count + 1)``; returns the new count (Alg. 1, l. 4-5)."""
    values = [p.detach() for p in params]
    if count == 0:
        torch._foreach_copy_(mean, values)
    else:
        torch._foreach_lerp_(mean, [v.to(m.dtype) for v, m in zip(values, mean)], 1.0 / (count + 1))
    return count + 1


@dataclasses.dataclass
class NoAveragingConfig:
    pass


@register_averager("none", config=NoAveragingConfig)
class NoAveraging(WeightAverager):
    """No averaging: the raw iterate is evaluated and saved."""


# ---------------------------------------------------------------------------------------------
# Two-Tailed Averaging
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class TwoTailedConfig:
    patience: int = 3  # reset heuristic (Alg. 2): an average stagnates after this many evaluations without
    #                    improving its best loss (Fig. 3.6: best at 40E, detected at 43E); 0 = off (Alg. 1)
    defer_to_raw: bool = True  # early deferral (Alg. 2, l. 8-11): use the raw weights while they beat the average

    def __post_init__(self) -> None:
        if self.patience < 0:
            raise InfolmError(f"two-tailed averaging patience must be non-negative, got {self.patience}")


@dataclasses.dataclass
class _Stagnation:
    """Best loss of one running average since it was (re)started and evaluations since that best."""

    best: float = math.inf
    bad: int = 0

    def record(self, loss: float) -> None:
        if loss < self.best:
            self.best, self.bad = loss, 0
        else:
            self.bad += 1


@register_averager("two-tailed", config=TwoTailedConfig)
class TwoTailedAverager(WeightAverager):
    """Two-Tailed Averaging (Melis thesis Alg. 1 with the Alg. 2 extensions): a short and a long
    running average; when the short one is at least as good as the long one, the long one is
    dropped and the short one continues as the long one. No hyperparameters beyond the heuristics.

    ``observe(evaluate)`` is ``evaluate_and_adapt`` of the algorithm boxes: it evaluates the raw
    weights (F^1, only with the Alg. 2 extensions), the short average (F^S) and the long average
    (F^L), switches / resets, and returns the loss of the chosen estimate (F^L, or F^1 when the
    raw weights are better). An empty average scores +inf (Sec. 3.5); identical averages are
    evaluated once.
    """

    def __init__(self, config: TwoTailedConfig, params: Iterable[nn.Parameter]) -> None:
        super().__init__(config, params)
        self.short = self._new_buffers()  # theta^S
        self.long = self._new_buffers()  # theta^L
        self.S = 0  # iterates in the short average
        self.L = 0  # iterates in the long average
        self.period = 0  # iterates added since the previous evaluation (E)
        self.use_raw = False  # the raw iterate is the current estimate (Alg. 2, l. 11)
        self.short_stagnation = _Stagnation()
        self.long_stagnation = _Stagnation()
        self.last: dict[str, float] = {}  # losses of the last evaluation

    def average(self) -> list[Tensor] | None:
        if self.use_raw or self.L == 0:
            return None
        return self.long

    def update(self, step: int) -> None:  # Alg. 1, add_weights
        super().update(step)
        self.S = _add_to_mean(self.short, self.S, self.params)
        self.L = _add_to_mean(self.long, self.L, self.params)
        self.period += 1

    def _switch(self) -> None:  # Alg. 1, switch: S, L, theta^L <- 0, S, theta^S
        self.long, self.short = self.short, self.long
        self.L, self.S = self.S, 0
        self.long_stagnation, self.short_stagnation = self.short_stagnation, _Stagnation()

    def _evaluate_buffers(self, buffers: list[Tensor], evaluate: Evaluate) -> float:
        with torch.no_grad():
            raw = [p.detach().clone() for p in self.params]
            torch._foreach_copy_([p.data for p in self.params], buffers)
        try:
            return float(evaluate())
        finally:
            with torch.no_grad():
                torch._foreach_copy_([p.data for p in self.params], raw)

    def observe(self, evaluate: Evaluate) -> float:  # Alg. 1 / Alg. 2, evaluate_and_adapt
        self._check_not_swapped("observe")
        extensions = self.config.patience > 0 or self.config.defer_to_raw
        period, self.period = self.period, 0
        f_raw = float(evaluate()) if extensions else math.nan  # F^1
        f_long = self._evaluate_buffers(self.long, evaluate) if self.L > 0 else math.inf  # F^L
        if self.S == 0:
            f_short = math.inf
        elif self.S == self.L:  # same iterates: the averages are identical
            f_short = f_long
        else:
            f_short = self._evaluate_buffers(self.short, evaluate)  # F^S
        self.last = {"loss_raw": f_raw, "loss_short": f_short, "loss_long": f_long}

        patience = self.config.patience
        if self.S > 0:
            self.short_stagnation.record(f_short)
        if self.L > 0:
            self.long_stagnation.record(f_long)
        long_stagnating = patience > 0 and self.L > 0 and self.long_stagnation.bad >= patience
        short_stagnating = patience > 0 and self.S > 0 and self.short_stagnation.bad >= patience
        if f_short <= f_long or long_stagnating:  # Alg. 2, l. 3-5 (Alg. 1, l. 12-14)
            f_long = f_short
            self._switch()
        elif short_stagnating:  # Alg. 2, l. 6-7: restart the short average
            self.S = 0
            self.short_stagnation = _Stagnation()

        self.use_raw = False
        if self.config.defer_to_raw and self.L > 1 and f_raw <= f_long:  # Alg. 2, l. 8-11
            if period == self.L:  # the raw weights have been better at every evaluation: reinitialize
                self.S = self.L = 0
                self.short_stagnation, self.long_stagnation = _Stagnation(), _Stagnation()
            self.use_raw = True
            return f_raw
        if self.L == 0:  # nothing averaged yet (observe before any update)
            return float(evaluate()) if not extensions else f_raw
        return f_long

    def metrics(self) -> dict[str, float]:
        out = {"S": float(self.S), "L": float(self.L), "raw": float(self.use_raw)}
        out.update({k: v for k, v in self.last.items() if not math.isnan(v)})
        return out

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "S": self.S,
            "L": self.L,
            "period": self.period,
            "use_raw": int(self.use_raw),
            "short_best": self.short_stagnation.best,
            "short_bad": self.short_stagnation.bad,
            "long_best": self.long_stagnation.best,
            "long_bad": self.long_stagnation.bad,
        }
        self._save_buffers("short", self.short, out)
        self._save_buffers("long", self.long, out)
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_not_swapped("load_state_dict")
        self._load_buffers("short", self.short, state)
        self._load_buffers("long", self.long, state)
        self.S, self.L, self.period = int(state["S"]), int(state["L"]), int(state["period"])
        self.use_raw = bool(state["use_raw"])
        self.short_stagnation = _Stagnation(float(state["short_best"]), int(state["short_bad"]))
        self.long_stagnation = _Stagnation(float(state["long_best"]), int(state["long_bad"]))


# ---------------------------------------------------------------------------------------------
# Tail averaging (and NT-ASGD)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class TailConfig:
    start: int = 0  # s of Eq. 3.2: average the iterates of steps >= start (tuned; 0 = Polyak from step 1)
    nonmono: int = 0  # > 0: start instead when the NT-ASGD trigger fires at an evaluation (Merity et al. 2017: 5)
    latest: float = (
        0.8  # with nonmono: start at this fraction of the training steps at the latest (thesis 2.2.2); 0: off
    )

    def __post_init__(self) -> None:
        if self.start < 0 or self.nonmono < 0:
            raise InfolmError(
                f"tail averaging start and nonmono must be non-negative, got {self.start}, {self.nonmono}"
            )
        if not 0.0 <= self.latest <= 1.0:
            raise InfolmError(f"tail averaging latest must be a fraction in [0, 1], got {self.latest}")


@register_averager("tail", config=TailConfig)
class TailAverager(WeightAverager):
    """Tail averaging (Eq. 3.2): the mean of the iterates since step ``start``, the raw iterate before.

    With ``nonmono > 0`` averaging starts after the evaluation at which the validation loss of the
    raw weights is worse than the best of all but the last ``nonmono`` evaluations: NT-ASGD
    (Merity et al. 2017) with any optimizer; "or at 80% of the training time at the latest" (thesis
    Sec. 2.2.2: ``latest`` x the training steps the trainer announces with ``set_horizon``).
    """

    def __init__(self, config: TailConfig, params: Iterable[nn.Parameter]) -> None:
        super().__init__(config, params)
        self.mean = self._new_buffers()
        self.count = 0  # iterates averaged
        self.trigger = NonMonotoneTrigger(config.nonmono) if config.nonmono > 0 else None
        self.started_at = -1 if self.trigger is not None else config.start  # first averaged step (-1: not yet)
        self.last_step = 0
        self.horizon = 0  # training steps of the run (0: unknown)

    def set_horizon(self, total_steps: int) -> None:
        self.horizon = total_steps

    def average(self) -> list[Tensor] | None:
        return self.mean if self.count > 0 else None

    def update(self, step: int) -> None:
        super().update(step)
        self.last_step = step
        latest = math.ceil(self.config.latest * self.horizon)
        if self.started_at < 0 and self.config.latest > 0 and self.horizon > 0 and step >= latest:
            self.started_at = step  # the trigger has not fired by the latest start
        if 0 <= self.started_at <= step:
            self.count = _add_to_mean(self.mean, self.count, self.params)

    def observe(self, evaluate: Evaluate) -> float:
        if self.trigger is None or self.trigger.triggered or self.started_at >= 0:
            return super().observe(evaluate)
        loss = float(evaluate())  # raw weights: nothing averaged yet
        if self.trigger.observe(loss):
            self.started_at = self.last_step + 1
        return loss

    def metrics(self) -> dict[str, float]:
        return {"averaged": float(self.count), "started_at": float(self.started_at)}

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count, "started_at": self.started_at, "last_step": self.last_step}
        if self.trigger is not None:
            out.update({f"trigger.{k}": v for k, v in self.trigger.state_dict().items()})
        self._save_buffers("mean", self.mean, out)
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_not_swapped("load_state_dict")
        self._load_buffers("mean", self.mean, state)
        self.count, self.started_at, self.last_step = (
            int(state["count"]),
            int(state["started_at"]),
            int(state["last_step"]),
        )
        if self.trigger is not None:
            self.trigger.load_state_dict(
                {k[len("trigger.") :]: v for k, v in state.items() if k.startswith("trigger.")}
            )


# ---------------------------------------------------------------------------------------------
# Exponential moving average
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class EMAConfig:
    decay: float = 0.999  # beta of Eq. 3.1 (tuned in the thesis; no single paper value)
    start: int = 0  # iterates of steps <= start reset the average to the iterate (theta-bar_start = theta_start)

    def __post_init__(self) -> None:
        if not 0.0 <= self.decay < 1.0:
            raise InfolmError(f"ema decay must be in [0, 1), got {self.decay}")
        if self.start < 0:
            raise InfolmError(f"ema start must be non-negative, got {self.start}")


@register_averager("ema", config=EMAConfig)
class EMAAverager(WeightAverager):
    """Exponential moving average of iterates (Eq. 3.1): theta-bar_t = (1 - beta) theta_t + beta theta-bar_{t-1},
    starting from the parameters at construction (theta_0)."""

    def __init__(self, config: EMAConfig, params: Iterable[nn.Parameter]) -> None:
        super().__init__(config, params)
        self.ema = self._new_buffers()  # theta-bar_0 = theta_0
        self.updates = 0

    def average(self) -> list[Tensor] | None:
        return self.ema

    @torch.no_grad()
    def update(self, step: int) -> None:
        super().update(step)
        values = [p.detach().to(e.dtype) for p, e in zip(self.params, self.ema)]
        if step <= self.config.start:
            torch._foreach_copy_(self.ema, values)
        else:
            torch._foreach_lerp_(self.ema, values, 1.0 - self.config.decay)  # Eq. 3.1
        self.updates += 1

    def metrics(self) -> dict[str, float]:
        return {"ema_updates": float(self.updates)}

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"updates": self.updates}
        self._save_buffers("ema", self.ema, out)
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_not_swapped("load_state_dict")
        self._load_buffers("ema", self.ema, state)
        self.updates = int(state["updates"])
