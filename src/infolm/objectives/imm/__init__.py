"""Induced Model Matching (IMM): a restricted n-gram teaches the full model through its induced model.

``objective.py`` holds the term; this package re-exports its public names.
"""

from infolm.objectives.imm.objective import (
    IGNORE_INDEX,
    IMM,
    ONE_SAMPLE,
    REALIZATIONS,
    IMMConfig,
    SampleFn,
    ShortContextIndex,
    StateBank,
    crosstalk_induced_cross_entropy,
    induced_cross_entropy,
)

__all__ = [
    "IGNORE_INDEX",
    "IMM",
    "IMMConfig",
    "ONE_SAMPLE",
    "REALIZATIONS",
    "SampleFn",
    "ShortContextIndex",
    "StateBank",
    "crosstalk_induced_cross_entropy",
    "induced_cross_entropy",
]
