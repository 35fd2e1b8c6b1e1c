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
