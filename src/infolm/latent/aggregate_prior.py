"""The aggregated posterior of a Gaussian encoder as a prior: p̂(z) = 1/N Σ_n q(z|x_n) (SentenceMIM Eq. 9).

SentenceMIM's model prior p_θ(z) is E_P(x)[q_θ(z|x)], P(x) the data; over the N training sentences it is
a mixture of N diagonal Gaussians, whose log-density this module evaluates exactly (log-sum-exp over
every component). The components are visited in blocks, so memory grows with the points times a block,
never with N. An IWAE bound with this prior is ``iwae_bound(h, p̂.log_prob(z) - ln q(z|x))``
(``latent/estimators.py``); ``evaluation/aggregate_prior.py`` computes it for held-out sentences.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

BLOCK_ELEMENTS = 1 << 19  # points x components per block: 4 MiB of float64 scores (cache-sized: 2x faster than 32 MiB)


def mixture_log_density(z: Tensor, means: Tensor, log_vars: Tensor, block: int = 0) -> Tensor:
    """ln (1/N) Σ_n N(z; means[n], diag exp(log_vars[n])) of points z (..., D) -> (...), in float64.

    ``means``, ``log_vars``: (N, D). ``block``: components per block (0: as many as keep a block of
    points x components under ``BLOCK_ELEMENTS``). Each component's log-density is expanded as
    -½ Σ z²/σ² + Σ z μ/σ² + c_n, c_n = -½ (Σ μ²/σ² + Σ ln σ² + D ln 2π): one matrix product of the points'
    features [z², z] with the components' [-½/σ², μ/σ²] plus c_n, in float64 (sharp posteriors make its terms
    large and nearly cancelling), capped at the component's peak -½ (Σ ln σ² + D ln 2π) where rounding
    would make the quadratic form negative; the running log-sum-exp adds one block at a time."""
    if means.shape != log_vars.shape or means.dim() != 2 or z.size(-1) != means.size(1):
        raise ValueError(
            f"mixture of {tuple(means.shape)} means, {tuple(log_vars.shape)} log-variances, z {tuple(z.shape)}"
        )
    count, dim = means.shape
    points = z.reshape(-1, dim).double()  # (M, D)
    step = block if block > 0 else max(1, BLOCK_ELEMENTS // max(points.size(0), 1))
    features = torch.cat([points * points, points], dim=1)  # (M, 2D)
    total = torch.full((points.size(0),), -math.inf, dtype=torch.float64, device=z.device)
    for start in range(0, count, step):
        mean = means[start : start + step].double().to(z.device)  # (C, D)
        log_var = log_vars[start : start + step].double().to(z.device)
        precision = torch.exp(-log_var)  # (C, D)
        peak = -0.5 * (log_var.sum(1) + dim * math.log(2 * math.pi))  # (C,): ln N(μ; μ, σ²)
        offset = peak - 0.5 * (mean * mean * precision).sum(1)  # c_n
        weights = torch.cat([-0.5 * precision, mean * precision], dim=1)  # (C, 2D)
        log_normal = torch.addmm(offset, features, weights.T)  # (M, C)
        torch.minimum(log_normal, peak, out=log_normal)  # a quadratic form is >= 0, rounding aside
        total = torch.logaddexp(total, torch.logsumexp(log_normal, dim=1))
    return (total - math.log(count)).reshape(z.shape[:-1])


class AggregatePosterior:
    """p̂(z) = 1/N Σ_n N(z; μ_n, diag σ_n²): the aggregated posterior of N encoded sentences (Eq. 9).

    A prior for held-out data: a sentence among the N scores under a prior that holds its own posterior."""

    def __init__(self, means: Tensor, log_vars: Tensor, block: int = 0) -> None:
        if means.dim() != 2 or means.shape != log_vars.shape or means.size(0) == 0:
            raise ValueError(
                f"an aggregated posterior needs (N, D) means and log-variances, N >= 1: {tuple(means.shape)}"
            )
        self.means = means
        self.log_vars = log_vars
        self.block = block

    @property
    def components(self) -> int:
        return int(self.means.size(0))

    def log_prob(self, z: Tensor) -> Tensor:
        """ln p̂(z) of z (..., D) -> (...) in z's dtype, exact over every component."""
        return mixture_log_density(z, self.means, self.log_vars, self.block).to(z.dtype)

    def subsample(self, count: int, seed: int = 0) -> AggregatePosterior:
        """The mixture of ``count`` components drawn without replacement by a generator seeded ``seed``
        (all of them when ``count`` is N or more): a cheaper prior, the same for the same seed."""
        if count >= self.components:
            return self
        keep = component_subset(self.components, count, seed).to(self.means.device)
        return AggregatePosterior(self.means[keep], self.log_vars[keep], self.block)


def component_subset(total: int, count: int, seed: int = 0) -> Tensor:
    """``count`` of ``range(total)`` without replacement, in increasing order, drawn by a generator seeded
    ``seed`` (every index when ``count >= total``): which sentences a capped mixture keeps."""
    if count < 1:
        raise ValueError(f"a mixture needs at least one component, got {count}")
    if count >= total:
        return torch.arange(total)
    return torch.randperm(total, generator=torch.Generator().manual_seed(seed))[:count].sort().values


def aggregate_mutual_information(
    prior: AggregatePosterior, members: Tensor | None = None, samples: int = 10, seed: int = 0
) -> tuple[float, float]:
    """I_q(X; Z) of the encoding distribution q(x, z) = (1/N) Σ_n δ(x - x_n) q(z|x_n) that defines p̂, the
    mutual information A-MIM raises (SentenceMIM Sec. 2), and the standard error of its draws.

    I_q = (1/N) Σ_n E_{q(z|x_n)}[ln q(z|x_n) - ln p̂(z)], estimated with ``samples`` draws from each
    component listed in ``members`` (indices into the mixture; None: all). Every term is at most ln N,
    since p̂(z) >= q(z|x_n)/N, so the estimate never exceeds ln N = H(X) of the N sentences."""
    if samples < 1:
        raise ValueError(f"the MI estimate needs at least one draw, got {samples}")
    index = torch.arange(prior.components) if members is None else members.long()
    mean, log_var = prior.means[index].double(), prior.log_vars[index].double()  # (M, D)
    generator = torch.Generator(device=mean.device).manual_seed(seed)
    eps = torch.randn((samples, *mean.shape), generator=generator, dtype=torch.float64, device=mean.device)
    z = mean + torch.exp(0.5 * log_var) * eps  # (K, M, D), z ~ q(z|x_n)
    log_q = -0.5 * (eps * eps + log_var + math.log(2 * math.pi)).sum(-1)  # ln q(z|x_n), (K, M)
    terms = log_q - mixture_log_density(z, prior.means, prior.log_vars, prior.block)  # (K, M)
    # the draws' Monte Carlo error of the listed members' mean (a subsample of members adds its own)
    sem = float((terms.var(0) / samples).sum().sqrt() / terms.size(1)) if samples > 1 else math.nan
    return float(terms.mean()), sem
