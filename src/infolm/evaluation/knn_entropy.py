"""Differential entropy of latent codes by nearest neighbours (SentenceMIM Table 6).

The Kozachenko-Leonenko estimator in the form of Kraskov, Stoegbauer & Grassberger (2004), Eq. 20:

    H(X) ~= -psi(k) + psi(N) + log c_d + (d / N) sum_i log eps_i

where eps_i is twice the distance from x_i to its k-th nearest neighbour and c_d the volume of the
d-dimensional ball of diameter 1 in the chosen norm (max norm: c_d = 1; Euclidean:
c_d = pi^(d/2) / Gamma(1 + d/2) / 2^d). Reported beside the entropy of a standard normal in d
dimensions, (d/2) log(2 pi e), the anchor P(z) of A-MIM. Like the paper, dimensions above 300 are
skipped: the estimator's bias grows with d and the neighbour search degrades to brute force.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy.special import digamma, gammaln

from infolm.errors import InfolmError

MAX_DIM = 300  # the paper reports no latent entropy above this dimension (Table 6 stops at 128D)


@dataclasses.dataclass
class EntropyEstimate:
    entropy: float  # nats
    normal_entropy: float  # nats: the standard normal in the same dimension, (d/2) log(2 pi e)
    dim: int
    points: int  # distinct points used
    duplicates: int  # exact duplicates dropped (a repeated sentence under a deterministic encoder)
    k: int
    norm: str


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
    """Kraskov et al. Eq. 20 on ``points`` (N, d); None when d > ``max_dim`` (skipped, as the paper).

    Exact duplicate rows are dropped first: a point mass has no density and would give log 0.
    """
    from scipy.spatial import cKDTree

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
    distances, _ = cKDTree(x).query(x, k=k + 1, p=math.inf if norm == "max" else 2)  # (N, k+1), self first
    eps = 2.0 * distances[:, k]  # twice the distance to the k-th neighbour
    entropy = float(-digamma(k) + digamma(n) + log_cd + dim * np.mean(np.log(eps)))
    return EntropyEstimate(entropy, standard_normal_entropy(dim), dim, n, n_all - n, k, norm)
