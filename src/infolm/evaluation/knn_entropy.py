"""Differential entropy of latent codes by nearest neighbours (SentenceMIM Table 6).

The Kozachenko-Leonenko estimator in the form of Kraskov, Stoegbauer & Grassberger (2004), Eq. 20:

    H(X) ~= -psi(k) + psi(N) + log c_d + (d / N) sum_i log eps_i

where eps_i is twice the distance from x_i to its k-th nearest neighbour and c_d the volume of the
d-dimensional ball of diameter 1 in the chosen norm (max norm: c_d = 1; Euclidean:
c_d = pi^(d/2) / Gamma(1 + d/2) / 2^d). Reported beside the entropy of a standard normal in d
dimensions, (d/2) log(2 pi e), the anchor P(z) of A-MIM, and beside the same estimator applied to
as many N(0, I_d) samples (``normal_estimate``): the estimator's bias grows with d at a fixed N (at
N = 3,000 it reads a 512-dimensional standard normal several hundred nats above its entropy), so a
code's entropy is compared with that reference, not with the exact normal entropy alone. The paper's
Table 6 reports up to 512 dimensions (Yelp15, Yahoo Answers) with no such reference. Dimensions above
``MAX_DIM`` are skipped for cost (the neighbour search degrades to brute force).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy.special import digamma, gammaln

from infolm.errors import InfolmError

MAX_DIM = 1024  # cost only: Table 6 reports 512-dimensional codes (Yelp15, Yahoo Answers)


@dataclasses.dataclass
class EntropyEstimate:
    entropy: float  # nats
    normal_entropy: float  # nats: the standard normal in the same dimension, (d/2) log(2 pi e)
    dim: int
    points: int  # distinct points used
    duplicates: int  # exact duplicates dropped (a repeated sentence under a deterministic encoder)
    k: int
    norm: str
    normal_estimate: float | None = None  # the same estimator on N(0, I_d) samples of the same N (its bias)


def standard_normal_entropy(dim: int) -> float:
    """Differential entropy of N(0, I_d) in nats."""
    return 0.5 * dim * math.log(2 * math.pi * math.e)


def log_unit_ball_volume(dim: int, norm: str) -> float:
    """log c_d: volume of the ball of diameter 1 (Kraskov et al. 2004, after Eq. 20)."""
    if norm == "max":
        return 0.0
    if norm == "euclidean":
        return 0.5 * dim * math.log(math.pi) - float(gammaln(1 + 0.5 * dim)) - dim * math.log(2)
    raise InfolmError(f"kNN entropy norm must be max or euclidean, got {norm!r}")


def knn_entropy(points: np.ndarray, k: int = 3, norm: str = "max", max_dim: int = MAX_DIM) -> EntropyEstimate | None:
    """Kraskov et al. Eq. 20 on ``points`` (N, d); None when d > ``max_dim`` (skipped for cost).

    Exact duplicate rows are dropped first: a point mass has no density and would give log 0.
    """
    if k < 1:
        raise InfolmError(f"kNN entropy needs k >= 1, got {k}")
    x = np.asarray(points, dtype=np.float64)
    if x.ndim != 2:
        raise InfolmError(f"kNN entropy needs points of shape (N, d), got {x.shape}")
    n_all, dim = x.shape
    log_cd = log_unit_ball_volume(dim, norm)  # checks ``norm`` before anything is skipped
    if dim > max_dim:
        return None
    x = np.unique(x, axis=0)
    n = x.shape[0]
    if n <= k:
        raise InfolmError(f"kNN entropy with k={k} needs more than {k} distinct points, got {n}")
    entropy = _kraskov(x, k, norm, log_cd)
    reference = _kraskov(np.random.default_rng(0).normal(size=(n, dim)), k, norm, log_cd)
    return EntropyEstimate(entropy, standard_normal_entropy(dim), dim, n, n_all - n, k, norm, reference)


def _kraskov(x: np.ndarray, k: int, norm: str, log_cd: float) -> float:
    """Eq. 20 on distinct points ``x`` (N, d)."""
    from scipy.spatial import cKDTree

    n, dim = x.shape
    distances, _ = cKDTree(x).query(x, k=k + 1, p=math.inf if norm == "max" else 2)  # (N, k+1), self first
    eps = 2.0 * distances[:, k]  # twice the distance to the k-th neighbour
    return float(-digamma(k) + digamma(n) + log_cd + dim * np.mean(np.log(eps)))
