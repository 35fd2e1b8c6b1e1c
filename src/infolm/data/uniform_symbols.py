"""The synthetic task of Melis's thesis, Sec. 5.7.1: every example is one symbol drawn uniformly
from 10,000, so the optimal negative log-likelihood is the entropy ln 10,000 = 9.2103 nats.

Each line holds one symbol (``x0`` .. ``x9999``). The training split has every symbol the same
number of times in a seeded random order, so even its empirical distribution is uniform; the
validation and test splits hold every symbol exactly once, so a split average *is* the expectation
over the data distribution, and no model's NLL on them can lie below ln 10,000 (Gibbs' inequality:
Σ_x -ln p(x) / 10,000 >= ln 10,000 whenever Σ_x p(x) <= 1). A bound below it is a bug.
"""

from __future__ import annotations

import math

import numpy as np

SYMBOLS = 10_000  # vocabulary of the synthetic task (Sec. 5.7.1)
TRAIN_REPEATS = 20  # copies of each symbol in the training split (the thesis samples fresh data; ours: 200,000 lines)
OPTIMAL_NLL = math.log(SYMBOLS)  # 9.2103 nats


def uniform_symbol_texts(symbols: int = SYMBOLS, repeats: int = TRAIN_REPEATS, seed: int = 0) -> dict[str, str]:
    """The three splits as text, one symbol per line."""
    names = np.array([f"x{i}" for i in range(symbols)])
    order = np.random.default_rng(seed).permutation(np.repeat(np.arange(symbols), repeats))
    every_once = "\n".join(names) + "\n"
    return {"train": "\n".join(names[order]) + "\n", "valid": every_once, "test": every_once}
