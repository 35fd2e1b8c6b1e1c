"""The synthetic task of Melis's thesis, Sec. 5.7.1 as a registered dataset."""

from __future__ import annotations

import math
from collections import Counter

from infolm.data import DATASETS
from infolm.data.uniform_symbols import OPTIMAL_NLL, uniform_symbol_texts


def test_splits_are_exactly_uniform() -> None:
    texts = uniform_symbol_texts(symbols=50, repeats=3, seed=1)
    train = Counter(texts["train"].split())
    assert len(train) == 50 and set(train.values()) == {3}
    for split in ("valid", "test"):
        assert sorted(texts[split].split()) == sorted(f"x{i}" for i in range(50))
    assert texts["train"] != uniform_symbol_texts(symbols=50, repeats=3, seed=2)["train"]  # shuffled by the seed


def test_registered_with_the_entropy_as_optimum() -> None:
    assert DATASETS["uniform-symbols"].generate is not None
    assert math.isclose(OPTIMAL_NLL, 9.2103, abs_tol=5e-5)
