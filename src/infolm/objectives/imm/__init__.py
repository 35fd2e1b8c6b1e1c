"""Induced Model Matching (IMM): a restricted n-gram teaches the full model through its induced model.

Muneeb & Ohannessian, "Induced Model Matching". The induced model of the full model Q at a short
context sh (the ``order - 1`` previous tokens) is Q averaged over the extended contexts that co-occur
with sh in the training data (Eq. 9, 13); the IMM term is the cross-entropy of the restricted model
P̂ (a modified Kneser-Ney n-gram, Sec. 6) against it (Eq. 12), estimated with k sampled extended
contexts (Eq. 15, Alg. 1) and weighted by λ in the Composite (Eq. 11).

One idea per module:

* ``objective.py``: ``IMMConfig`` and the registered ``imm`` term (how many samples, when, the clip group).
* ``contexts.py``: the short-context index of the training stream and which of a batch's are matched.
* ``crosstalk.py``: the k-sample induced cross-entropy (Eq. 15) and its crosstalk gradient (App. C.2).
* ``realizations.py``: how a sampled extended context is realized (replay, carried-state, in-batch, state-bank).
* ``state_bank.py``: the ring buffer of detached recurrent states behind the state-bank realization.
* ``released_one_sample.py``: the 1-sample steps of the authors' released code (a soft target).
"""

from infolm.objectives.imm.contexts import IGNORE_INDEX, ShortContextIndex
from infolm.objectives.imm.crosstalk import SampleFn, crosstalk_induced_cross_entropy, induced_cross_entropy
from infolm.objectives.imm.objective import IMM, ONE_SAMPLE, REALIZATIONS, IMMConfig
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
