"""The non-monotone trigger of NT-ASGD (Merity et al. 2017, Alg. 1) as a pure policy object.

At every evaluation k (validation loss v_k), the trigger fires when

    k > n  and  v_k > min(v_0, ..., v_{k-n-1})

i.e. the loss is worse than the best of all evaluations except the last n ("non-monotone
interval", n = 5 in the paper). AWD-LSTM then switches SGD to averaged SGD; in infolm the tail
averager (``optim.average={name: tail, nonmono: 5}``) starts averaging, and the BMI objective uses
the same trigger for its phase switch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from infolm.errors import InfolmError


@dataclasses.dataclass
class NTConfig:
    nonmono: int = 5  # n: evaluations excluded from the running best (Merity et al. 2017)


class NonMonotoneTrigger:
    """``observe(loss)`` returns True exactly once: at the evaluation where the trigger fires."""

    def __init__(self, nonmono: int = 5) -> None:
        if nonmono < 1:
            raise InfolmError(f"nonmono must be at least 1, got {nonmono}")
        self.nonmono = nonmono
        self.losses: list[float] = []  # every observed validation loss, in order (logs in Alg. 1)
        self.triggered_at = -1  # index of the evaluation that fired (-1: not yet)

    @property
    def triggered(self) -> bool:
        return self.triggered_at >= 0

    def would_trigger(self, loss: float) -> bool:
        """The condition of Alg. 1 for a new loss, without recording it."""
        n = self.nonmono
        return len(self.losses) > n and loss > min(self.losses[:-n])

    def observe(self, loss: float) -> bool:
        """Record a validation loss; True if the trigger fires now (only the first time)."""
        fire = not self.triggered and self.would_trigger(loss)
        if fire:
            self.triggered_at = len(self.losses)
        self.losses.append(float(loss))
        return fire

    def reset(self) -> None:
        """Forget the history (e.g. a new training phase)."""
        self.losses = []
        self.triggered_at = -1

    def state_dict(self) -> dict[str, Any]:
        return {"losses": torch.tensor(self.losses, dtype=torch.float64), "triggered_at": self.triggered_at}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.losses = [float(x) for x in state["losses"].tolist()]
        self.triggered_at = int(state["triggered_at"])
