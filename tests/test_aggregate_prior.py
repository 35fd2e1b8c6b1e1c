"""The aggregated posterior as a prior (SentenceMIM Eq. 9): its exact log-density, block by block, and the
IWAE bound with it, against a linear-Gaussian model whose ln p(x) under a mixture prior is closed-form."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Categorical, Independent, MixtureSameFamily, MultivariateNormal, Normal

from infolm.latent.aggregate_prior import AggregatePosterior, component_subset, mixture_log_density
from infolm.latent.estimators import iwae_bound


def mixture(means: torch.Tensor, log_vars: torch.Tensor) -> MixtureSameFamily:
    weights = Categorical(logits=torch.zeros(means.size(0), dtype=means.dtype))
    return MixtureSameFamily(weights, Independent(Normal(means, (0.5 * log_vars).exp()), 1))


@pytest.mark.parametrize("block", [0, 1, 2, 3, 7, 100])
def test_the_mixture_density_equals_torch_distributions_whatever_the_blocks(block: int) -> None:
    generator = torch.Generator().manual_seed(0)
    means = torch.randn(7, 4, generator=generator, dtype=torch.float64)
    log_vars = torch.randn(7, 4, generator=generator, dtype=torch.float64) - 1.0
    z = torch.randn(5, 3, 4, generator=generator, dtype=torch.float64) * 2
    expected = mixture(means, log_vars).log_prob(z)  # (5, 3)
    torch.testing.assert_close(mixture_log_density(z, means, log_vars, block), expected)
    torch.testing.assert_close(AggregatePosterior(means, log_vars, block).log_prob(z), expected)


def test_sharp_components_far_apart_keep_their_exact_density() -> None:
    # sMIM's posteriors sit at a log-variance of -10 around means of order one: the expanded quadratic form
    # cancels terms of order 1e5, which float64 keeps exact to far below a nat
    generator = torch.Generator().manual_seed(1)
    means = torch.randn(50, 16, generator=generator, dtype=torch.float64)
    log_vars = torch.full((50, 16), -10.0, dtype=torch.float64)
    z = means[:5] + 1e-3 * torch.randn(5, 16, generator=generator, dtype=torch.float64)
    expected = mixture(means, log_vars).log_prob(z)
    torch.testing.assert_close(mixture_log_density(z.float(), means.float(), log_vars.float(), 8), expected)


def test_a_capped_mixture_is_a_seeded_subsample() -> None:
    assert component_subset(5, 10).tolist() == [0, 1, 2, 3, 4]
    chosen = component_subset(100, 10, seed=3)
    assert chosen.tolist() == component_subset(100, 10, seed=3).tolist() and len(set(chosen.tolist())) == 10
    assert chosen.tolist() != component_subset(100, 10, seed=4).tolist()
    means, log_vars = torch.randn(100, 2), torch.zeros(100, 2)
    small = AggregatePosterior(means, log_vars).subsample(10, seed=3)
    torch.testing.assert_close(small.means, means[chosen])


def linear_gaussian(seed: int = 0):  # type: ignore[no-untyped-def]
    """x|z ~ N(Az + b, noise I), z ~ p̂ = 1/6 Σ_n N(m_n, diag v_n), one observed x; ln p(x) in closed form
    (a mixture of the Gaussians N(A m_n + b, A diag(v_n) A^T + noise I)) and the posterior's mean and
    per-dimension variance (a mixture of the components' Gaussian posteriors, moment-matched)."""
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(3, 2, generator=generator, dtype=torch.float64)
    b = torch.randn(3, generator=generator, dtype=torch.float64)
    noise = 0.5
    prior = AggregatePosterior(
        torch.randn(6, 2, generator=generator, dtype=torch.float64) * 2,
        torch.randn(6, 2, generator=generator, dtype=torch.float64) * 0.3 - 1.0,
        block=4,  # blocks of four of the six components: the chunked path
    )
    x = torch.randn(3, generator=generator, dtype=torch.float64) * 2
    variances = torch.diag_embed(prior.log_vars.exp())  # (N, 2, 2)
    marginals = MultivariateNormal(prior.means @ a.T + b, a @ variances @ a.T + noise * torch.eye(3, dtype=a.dtype))
    log_joint = marginals.log_prob(x) - math.log(6)  # ln p(x, component n)
    truth = torch.logsumexp(log_joint, 0)
    precision = torch.linalg.inv(variances) + a.T @ a / noise  # each component's posterior
    covariance = torch.linalg.inv(precision)
    centre = (covariance @ (torch.linalg.solve(variances, prior.means) + a.T @ (x - b) / noise).unsqueeze(-1))[..., 0]
    weights = torch.softmax(log_joint, 0).unsqueeze(1)
    mean = (weights * centre).sum(0)
    variance = (weights * (covariance.diagonal(dim1=1, dim2=2) + (centre - mean) ** 2)).sum(0)
    likelihood = Independent(Normal(torch.zeros(3, dtype=a.dtype), math.sqrt(noise)), 1)
    return a, b, x, prior, likelihood, float(truth), mean, variance


def test_the_iwae_bound_with_the_mixture_prior_lies_below_ln_p_x_and_reaches_it() -> None:
    """IWAE-K with proposal q and prior p̂ (a mixture of Gaussians) on a model whose ln p(x) is exact: on
    average below the truth (within three standard errors of the mean), increasing in K, within a few
    thousandths of a nat at K = 1000."""
    a, b, x, prior, likelihood, truth, mean, variance = linear_gaussian()
    q = Independent(Normal(mean, 1.5 * variance.sqrt()), 1)  # near the posterior, not it: a gap at small K

    def bounds(samples: int, repeats: int) -> torch.Tensor:
        z = q.sample((samples, repeats))  # (K, R, D)
        h = likelihood.log_prob(x - (z @ a.T + b))  # ln p(x|z), (K, R)
        return iwae_bound(h, prior.log_prob(z) - q.log_prob(z))  # (R,)

    torch.manual_seed(1)
    estimates = {k: bounds(k, 2000) for k in (1, 10, 100)}
    estimates[1000] = bounds(1000, 200)
    means = {k: float(v.mean()) for k, v in estimates.items()}
    for k, values in estimates.items():
        assert means[k] <= truth + 3 * float(values.std()) / math.sqrt(len(values))
    assert means[1] < means[10] < means[100] and truth - means[1] > 0.3
    assert abs(means[1000] - truth) < 0.005


def test_the_mixtures_mutual_information_has_its_known_values() -> None:
    """I_q(X; Z) of (1/N Σ δ_{x_n}) q(z|x_n): 0 when every posterior is the same, ln N when they are sharp
    and far apart, and for two 1-D components the value of a direct quadrature."""
    from infolm.latent.aggregate_prior import AggregatePosterior, aggregate_mutual_information

    same = AggregatePosterior(torch.zeros(5, 3), torch.zeros(5, 3))
    assert aggregate_mutual_information(same, samples=50)[0] == pytest.approx(0.0, abs=1e-12)
    apart = AggregatePosterior(torch.arange(8.0).unsqueeze(1).repeat(1, 2) * 10, torch.full((8, 2), -10.0))
    assert aggregate_mutual_information(apart, samples=20)[0] == pytest.approx(math.log(8), abs=1e-6)
    # two unit-variance components at -1 and +1: I = ln 2 - E over the mixture of H(component | z)
    means, log_vars = torch.tensor([[-1.0], [1.0]]), torch.zeros(2, 1)
    grid = torch.linspace(-12.0, 12.0, 200_001, dtype=torch.float64)
    log_n = [-0.5 * (grid - m) ** 2 - 0.5 * math.log(2 * math.pi) for m in (-1.0, 1.0)]
    log_mix = torch.logaddexp(log_n[0], log_n[1]) - math.log(2)
    exact = float(sum((torch.exp(ln) * (ln - log_mix)).sum() * (grid[1] - grid[0]) for ln in log_n) / 2)
    estimate, sem = aggregate_mutual_information(AggregatePosterior(means, log_vars), samples=200_000, seed=1)
    assert abs(estimate - exact) < 4 * max(sem, 1e-3) and 0.0 < exact < math.log(2)


@pytest.mark.parametrize("block", [0, 1, 4])
def test_the_nearest_components_are_the_densest_at_the_point_whatever_the_blocks(block: int) -> None:
    from infolm.latent.aggregate_prior import nearest_components

    generator = torch.Generator().manual_seed(2)
    means = torch.randn(9, 3, generator=generator, dtype=torch.float64)
    log_vars = torch.randn(9, 3, generator=generator, dtype=torch.float64) - 1.0
    points = torch.randn(4, 3, generator=generator, dtype=torch.float64)
    log_normal = Independent(Normal(means, (0.5 * log_vars).exp()), 1).log_prob(points.unsqueeze(1))  # (4, 9)
    chosen = nearest_components(points, AggregatePosterior(means, log_vars, block), 4)
    assert chosen.tolist() == log_normal.topk(4, dim=1).indices.tolist()
    assert nearest_components(points, AggregatePosterior(means, log_vars, block), 20).shape == (4, 9)


def test_the_neighbour_proposal_draws_from_and_has_the_density_of_its_mixture() -> None:
    """r = (K q + D Σ_m q_m) / (K + M D) at any z equals the mixture written out; D draws of each neighbour."""
    from infolm.latent.aggregate_prior import NeighborProposal

    generator = torch.Generator().manual_seed(3)
    prior = AggregatePosterior(
        torch.randn(7, 2, generator=generator, dtype=torch.float64),
        torch.randn(7, 2, generator=generator, dtype=torch.float64) * 0.2 - 2.0,
    )
    centres = torch.randn(3, 2, generator=generator, dtype=torch.float64)
    proposal = NeighborProposal(prior, centres, neighbors=2, draws=4)
    torch.manual_seed(0)
    z = proposal.sample()
    assert z.shape == (8, 3, 2)
    for row in range(3):  # draw d of neighbour m sits at d M + m, within a few widths of its mean
        for m in range(2):
            near = (z[m::2, row] - prior.means[proposal.index[row, m]]).abs() / (0.5 * prior.log_vars).exp().max()
            assert float(near.max()) < 6.0
    q = Independent(Normal(centres, torch.full_like(centres, 0.3)), 1)
    points = torch.randn(5, 3, 2, generator=generator, dtype=torch.float64)
    own = q.log_prob(points)
    components = Independent(Normal(prior.means, (0.5 * prior.log_vars).exp()), 1)
    log_each = components.log_prob(points.unsqueeze(2))  # (5, 3, 7)
    neighbours = torch.stack([log_each[:, r, proposal.index[r]] for r in range(3)], 1)  # (5, 3, 2)
    expected = torch.log((10 * own.exp() + 4 * neighbours.exp().sum(-1)) / (10 + 8))
    torch.testing.assert_close(proposal.log_density(points, own, samples=10), expected)


def test_the_neighbour_proposal_keeps_p_x_unbiased_and_tightens_the_bound_where_q_misses_the_prior() -> None:
    """A sharp q away from the posterior: the IWAE bound with q alone sits far below ln p(x); adding draws
    from the nearest components keeps the estimate of p(x) unbiased (its mean is p(x)) and the bound below
    ln p(x), much closer to it, and with every component drawn often, at it."""
    from infolm.latent.aggregate_prior import NeighborProposal

    a, b, x, prior, likelihood, truth, mean, variance = linear_gaussian()
    centre = mean + 2.0 * variance.sqrt()
    q = Independent(Normal(centre, 0.2 * variance.sqrt()), 1)

    def estimates(samples: int, neighbors: int, draws: int, repeats: int) -> torch.Tensor:
        z = q.sample((samples, repeats))  # (K, R, D)
        log_q = q.log_prob(z)
        log_r = log_q
        if neighbors:
            proposal = NeighborProposal(prior, centre.expand(repeats, -1), neighbors, draws)
            z = torch.cat([z, proposal.sample()])
            log_q = q.log_prob(z)
            log_r = proposal.log_density(z, log_q, samples)
        h = likelihood.log_prob(x - (z @ a.T + b))
        return iwae_bound(h, prior.log_prob(z) - log_r)  # (R,)

    torch.manual_seed(5)
    alone = estimates(20, 0, 0, 4000)
    mixed = estimates(20, 2, 5, 4000)
    ratio = torch.exp(mixed - truth)  # p̂(x) / p(x): mean one if unbiased
    assert abs(float(ratio.mean()) - 1.0) < 4 * float(ratio.std()) / math.sqrt(len(ratio))
    assert float(mixed.mean()) <= truth + 3 * float(mixed.std()) / math.sqrt(len(mixed))
    assert truth - float(alone.mean()) > 1.0 and truth - float(mixed.mean()) < 0.5 * (truth - float(alone.mean()))
    assert abs(float(estimates(20, 6, 400, 20).mean()) - truth) < 0.01
