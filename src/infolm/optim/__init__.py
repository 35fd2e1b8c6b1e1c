"""Optimizers, schedules, weight averaging and training policies."""

from infolm.optim.factory import LRSchedule, build_optimizers

__all__ = ["LRSchedule", "build_optimizers"]
