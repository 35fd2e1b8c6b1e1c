"""Optimizers, schedules, weight averaging and training policies."""

from infolm.optim.averaging import AVERAGERS
from infolm.optim.factory import LRSchedule, build_optimizers

__all__ = ["AVERAGERS", "LRSchedule", "build_optimizers"]
