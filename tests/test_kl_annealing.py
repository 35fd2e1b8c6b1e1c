"""KL annealing: the logistic and linear schedules reach weight 1 on schedule."""

from __future__ import annotations

import math

import pytest

from infolm.errors import InfolmError
from infolm.objectives.kl_annealing import kl_weight


def test_logistic_schedule_of_the_authors_code() -> None:
    assert kl_weight(10_000, "logistic") == 0.5  # x0
    assert math.isclose(kl_weight(0, "logistic"), 1 / (1 + math.exp(25)))
    reach = 10_000 + math.log(99) / 0.0025  # 11,838 steps: 0.99
    assert kl_weight(math.ceil(reach), "logistic") >= 0.99 > kl_weight(math.floor(reach), "logistic")
    assert kl_weight(30_000, "logistic") > 1 - 1e-15
    steps = range(0, 40_000, 500)
    weights = [kl_weight(s, "logistic") for s in steps]
    assert weights == sorted(weights) and all(0.0 <= w <= 1.0 for w in weights)


def test_linear_schedule_reaches_one_after_its_steps_and_stays() -> None:
    assert kl_weight(0, "linear") == 0.0
    assert kl_weight(2_500, "linear") == 0.25
    assert kl_weight(9_999, "linear") < 1.0 == kl_weight(10_000, "linear") == kl_weight(50_000, "linear")
    assert kl_weight(50, "linear", steps=100) == 0.5


def test_no_annealing_and_bad_names() -> None:
    assert kl_weight(0) == kl_weight(10**6) == 1.0
    with pytest.raises(InfolmError, match="none, logistic, linear"):
        kl_weight(0, "cosine")
