"""The aggregated posterior of a Gaussian encoder as a prior: p̂(z) = 1/N Σ_n q(z|x_n) (SentenceMIM Eq. 9).

SentenceMIM's model prior p_θ(z) is E_P(x)[q_θ(z|x)], P(x) the data; over the N training sentences it is
a mixture of N diagonal Gaussians, whose log-density this module evaluates exactly (log-sum-exp over
every component). The components are visited in blocks, so memory grows with the points times a block,
never with N. An IWAE bound with this prior is ``iwae_bound(h, p̂.log_prob(z) - ln q(z|x))``
(``latent/estimators.py``); ``evaluation/aggregate_prior.py`` computes it for held-out sentences.

With sharp posteriors that bound is valid but loose when the proposal is the sentence's own q(z|x): p̂ has
density near a held-out code only where a training component lies within a few widths in every dimension.
``NeighborProposal`` adds draws from the training components nearest the code (multiple importance
sampling with the balance heuristic), which keeps the estimate of p(x) unbiased and the bound valid.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

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
    points = z.reshape(-1, means.size(1)).double()  # (M, D)
    total = torch.full((points.size(0),), -math.inf, dtype=torch.float64, device=z.device)
    for _, log_normal in component_blocks(points, means, log_vars, block):
        total = torch.logaddexp(total, torch.logsumexp(log_normal, dim=1))
    return (total - math.log(means.size(0))).reshape(z.shape[:-1])


def component_blocks(points: Tensor, means: Tensor, log_vars: Tensor, block: int = 0) -> Iterator[tuple[int, Tensor]]:
    """(first component, ln N(points; μ_n, diag σ_n²) of a block of components, (M, C) float64) for points
    (M, D), block by block as ``mixture_log_density`` describes (the expanded quadratic form, capped at each
    component's peak)."""
    count, dim = means.shape
    step = block if block > 0 else max(1, BLOCK_ELEMENTS // max(points.size(0), 1))
    features = torch.cat([points * points, points], dim=1)  # (M, 2D)
    for start in range(0, count, step):
        mean = means[start : start + step].double().to(points.device)  # (C, D)
        log_var = log_vars[start : start + step].double().to(points.device)
        precision = torch.exp(-log_var)  # (C, D)
        peak = -0.5 * (log_var.sum(1) + dim * math.log(2 * math.pi))  # (C,): ln N(μ; μ, σ²)
        offset = peak - 0.5 * (mean * mean * precision).sum(1)  # c_n
        weights = torch.cat([-0.5 * precision, mean * precision], dim=1)  # (C, 2D)
        log_normal = torch.addmm(offset, features, weights.T)  # (M, C)
        torch.minimum(log_normal, peak, out=log_normal)  # a quadratic form is >= 0, rounding aside
        yield start, log_normal


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


def nearest_components(points: Tensor, prior: AggregatePosterior, count: int) -> Tensor:
    """Indices (B, M) of the ``count`` components of ``prior`` whose density is highest at each of ``points``
    (B, D), most dense first: the training posteriors nearest a held-out code, each measured in its own
    widths. Every component when ``count`` is N or more."""
    if count < 1:
        raise ValueError(f"the nearest components: at least one, got {count}")
    count = min(count, prior.components)
    flat = points.reshape(points.size(0), -1).double()
    best = torch.full((flat.size(0), 0), -math.inf, dtype=torch.float64, device=points.device)
    index = torch.zeros((flat.size(0), 0), dtype=torch.long, device=points.device)
    for start, log_normal in component_blocks(flat, prior.means, prior.log_vars, prior.block):
        ids = torch.arange(start, start + log_normal.size(1), device=points.device).expand_as(log_normal)
        best, keep = torch.cat([best, log_normal], 1).topk(min(count, best.size(1) + log_normal.size(1)), dim=1)
        index = torch.cat([index, ids], 1).gather(1, keep)
    return index


class NeighborProposal:
    """r(z|x) = (K q(z|x) + D Σ_{m=1..M} q(z|x_{n_m})) / (K + M D): the sentence's own posterior q, drawn K
    times, and the M training posteriors nearest its mean (``nearest_components``), each drawn D times.

    With the draws' counts fixed in advance and every draw weighted by the whole mixture r (the balance
    heuristic of multiple importance sampling), 1/(K + MD) Σ_s p(x|z_s) p̂(z_s) / r(z_s) is an unbiased
    estimate of p(x): E = Σ_j (n_j/S) ∫ r_j p(x|z) p̂(z) / Σ_l (n_l/S) r_l dz = ∫ p(x|z) p̂(z) dz. Its log is
    therefore a lower bound on ln p(x) in expectation (Jensen), as IWAE's is; it is IWAE's when M D = 0.
    Under p̂ with sharp components, p(x) ≈ 1/N Σ_n p(x | z ≈ μ_n): the neighbours' draws reach the terms
    that q's draws, far from every component, cannot."""

    def __init__(self, prior: AggregatePosterior, means: Tensor, neighbors: int, draws: int) -> None:
        if neighbors < 1 or draws < 1:
            raise ValueError(f"a neighbour proposal needs neighbours and draws >= 1, got {neighbors}, {draws}")
        self.prior = prior
        self.index = nearest_components(means, prior, neighbors)  # (B, M)
        self.draws = draws
        self.mean = prior.means[self.index].double()  # (B, M, D)
        self.log_var = prior.log_vars[self.index].double()
        self.precision = torch.exp(-self.log_var)  # read by every chunk of log_neighbors

    @property
    def neighbors(self) -> int:
        return int(self.index.size(1))

    def sample(self) -> Tensor:
        """D draws from each neighbour of each row: (D M, B, D_z), draw d of neighbour m at d M + m."""
        eps = torch.randn((self.draws, *self.mean.shape), dtype=torch.float64, device=self.mean.device)
        z = self.mean + torch.exp(0.5 * self.log_var) * eps  # (D, B, M, D_z)
        return z.transpose(1, 2).reshape(-1, self.mean.size(0), self.mean.size(2))

    def log_neighbors(self, z: Tensor) -> Tensor:
        """ln (1/M) Σ_m q(z|x_{n_m}) of each row's own neighbours at z (S, B, D_z) -> (S, B), in float64."""
        out = []
        for part in z.double().split(64):  # (s, B, D_z): (s, B, M, D_z) of differences at a time
            diff = part.unsqueeze(2) - self.mean
            log_normal = -0.5 * (diff * diff * self.precision + self.log_var + math.log(2 * math.pi))
            out.append(torch.logsumexp(log_normal.sum(-1), dim=2) - math.log(self.neighbors))
        return torch.cat(out)

    def log_density(self, z: Tensor, log_q: Tensor, samples: int) -> Tensor:
        """ln r(z|x) at z (S, B, D_z) given ln q(z|x) there (S, B), with K = ``samples`` draws from q."""
        mixed = self.draws * self.neighbors
        own = math.log(samples) + log_q.double() if samples > 0 else torch.full_like(log_q.double(), -math.inf)
        return torch.logaddexp(own, math.log(mixed) + self.log_neighbors(z)) - math.log(samples + mixed)
