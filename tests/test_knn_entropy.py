"""Kraskov kNN entropy against the closed-form entropy of Gaussians."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infolm.errors import InfolmError
from infolm.evaluation.knn_entropy import knn_entropy, log_unit_ball_volume, standard_normal_entropy


def gaussian_entropy(cov: np.ndarray) -> float:
    d = cov.shape[0]
    return 0.5 * (d * math.log(2 * math.pi * math.e) + float(np.linalg.slogdet(cov)[1]))


def test_standard_normal_entropy_matches_the_paper_table_6() -> None:
    # Table 6 lists N(16) = 22.7 and N(128) = 181.62
    assert round(standard_normal_entropy(16), 1) == 22.7
    assert round(standard_normal_entropy(128), 2) == 181.62


@pytest.mark.parametrize("norm", ["max", "euclidean"])
@pytest.mark.parametrize("dim", [1, 4])
def test_estimate_is_close_to_the_closed_form_entropy_of_a_gaussian(dim: int, norm: str) -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(dim, dim)) * 0.5 + np.eye(dim)
    cov = a @ a.T
    x = rng.multivariate_normal(np.zeros(dim), cov, size=20_000)
    estimate = knn_entropy(x, k=3, norm=norm)
    assert estimate is not None
    assert abs(estimate.entropy - gaussian_entropy(cov)) < 0.03 * dim + 0.02


def test_scaling_shifts_the_entropy_by_d_log_scale() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2000, 3))
    base, scaled = knn_entropy(x), knn_entropy(5.0 * x)
    assert base is not None and scaled is not None
    assert math.isclose(scaled.entropy - base.entropy, 3 * math.log(5.0), rel_tol=1e-9)


def test_unit_ball_volumes() -> None:
    assert log_unit_ball_volume(7, "max") == 0.0
    assert math.isclose(log_unit_ball_volume(2, "euclidean"), math.log(math.pi / 4))
    assert math.isclose(log_unit_ball_volume(3, "euclidean"), math.log(4 / 3 * math.pi / 8))


def test_high_dimensions_are_skipped_and_duplicates_dropped() -> None:
    rng = np.random.default_rng(2)
    assert knn_entropy(rng.normal(size=(50, 1025))) is None
    x = rng.normal(size=(100, 2))
    estimate = knn_entropy(np.concatenate([x, x[:10]]))
    assert estimate is not None and estimate.duplicates == 10 and estimate.points == 100
    assert estimate.entropy == pytest.approx(knn_entropy(x).entropy)  # type: ignore[union-attr]


def test_bad_input_is_one_clear_error() -> None:
    with pytest.raises(InfolmError, match="k >= 1"):
        knn_entropy(np.zeros((5, 2)), k=0)
    with pytest.raises(InfolmError, match="distinct points"):
        knn_entropy(np.zeros((5, 2)))
    with pytest.raises(InfolmError, match="max or euclidean"):
        knn_entropy(np.ones((5, 2)), norm="l1")


def test_the_estimate_comes_with_its_bias_on_a_standard_normal_of_the_same_size() -> None:
    """At 2 dimensions the estimator reads N(0, I) close to its entropy; at 512 (Table 6's largest codes) and
    1,000 points it reads it far above, which is the reference a 512-D code's entropy has to be read against."""
    rng = np.random.default_rng(5)
    low, high = knn_entropy(rng.normal(size=(1000, 2))), knn_entropy(0.1 * rng.normal(size=(1000, 512)))
    assert low is not None and high is not None
    assert abs(low.normal_estimate - standard_normal_entropy(2)) < 0.1  # type: ignore[operator]
    assert high.normal_estimate > standard_normal_entropy(512) + 100  # type: ignore[operator]
    reference = knn_entropy(np.random.default_rng(0).normal(size=(1000, 512)))
    assert reference is not None and high.normal_estimate == pytest.approx(reference.entropy)
