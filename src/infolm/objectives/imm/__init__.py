"""Induced Model Matching (IMM): a restricted n-gram teaches the full model through its induced model.

``objective.py`` holds the term; this package re-exports its public names.
"""

from infolm.objectives.imm.contexts import IGNORE_INDEX, ShortContextIndex
from infolm.objectives.imm.crosstalk import SampleFn, crosstalk_induced_cross_entropy, induced_cross_entropy
from infolm.objectives.imm.objective import (
    IMM,
    ONE_SAMPLE,
    REALIZATIONS,
    IMMConfig,
)
from infolm.objectives.imm.state_bank import StateBank

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
