"""Latent-variable model contract: every registered latent model, batched draws equal separate passes."""

from __future__ import annotations

import pytest
import torch

from infolm.errors import InfolmError
from infolm.latent import LatentVariableModel, latent_bounds, objective_surrogate
from infolm.latent.estimators import kl_objective
from infolm.models import MODELS

LATENT_MODELS = [
    ("latent-synthetic", {"latent": "gaussian", "latent_size": 6, "hidden": 16, "embedding": 8}),
    ("latent-synthetic", {"latent": "categorical", "variables": 3, "categories": 4, "hidden": 16, "embedding": 8}),
]
IDS = ["synthetic-gaussian", "synthetic-categorical"]


def build(name: str, settings: dict, vocab: int = 30) -> LatentVariableModel:
    torch.manual_seed(0)
    model = MODELS.build(name, settings, vocab_size=vocab, where="model")
    assert isinstance(model, LatentVariableModel)
    return model


def batch(vocab: int = 30, B: int = 5, T: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, vocab, (B, T), generator=g), torch.full((B,), T)


@pytest.mark.parametrize("name,settings", LATENT_MODELS, ids=IDS)
def test_batched_draws_equal_separate_passes(name, settings) -> None:
    model = build(name, settings).eval()
    tokens, lengths = batch()
    z = model.posterior(tokens, lengths).sample((4,))  # (K, B, *event)
    together = model.log_likelihood(tokens, lengths, z)
    apart = torch.cat([model.log_likelihood(tokens, lengths, z[k : k + 1]) for k in range(4)])
    torch.testing.assert_close(together, apart)
    # and each example on its own
    single = torch.stack(
        [model.log_likelihood(tokens[b : b + 1], lengths[b : b + 1], z[:, b : b + 1])[:, 0] for b in range(5)], 1
    )
    torch.testing.assert_close(together, single)


@pytest.mark.parametrize("name,settings", LATENT_MODELS, ids=IDS)
def test_probabilities_and_priors(name, settings) -> None:
    model = build(name, settings).eval()
    tokens, lengths = batch()
    z = model.posterior(tokens, lengths).sample((2,))
    # p(x|z) sums to one over the vocabulary for a fixed z (one-symbol data)
    everything = torch.arange(30).view(30, 1)
    zs = z[:, :1].expand(2, 30, *z.shape[2:])
    total = model.log_likelihood(everything, torch.ones(30), zs).exp().sum(1)
    torch.testing.assert_close(total, torch.ones(2))
    log_prior = model.prior().log_prob(z)
    assert log_prior.shape == (2, 5)
    if settings["latent"] == "categorical":  # uniform prior: ln p(z) = -n ln C
        torch.testing.assert_close(log_prior, torch.full((2, 5), -3 * torch.log(torch.tensor(4.0)).item()))


@pytest.mark.parametrize("name,settings", LATENT_MODELS, ids=IDS)
def test_estimators_give_every_parameter_a_gradient(name, settings) -> None:
    model = build(name, settings)
    tokens, lengths = batch()
    estimators = ("iwae", "stl", "dreg", "elbo") if model.reparameterized else ("reinforce", "vimco")
    for estimator in estimators:
        model.zero_grad()
        base = "elbo" if estimator == "elbo" else "iwae"
        out = objective_surrogate(model, tokens, lengths, kl_objective(0.5, 3, 3, base), estimator)
        out.surrogate.mean().backward()
        for pname, p in model.named_parameters():
            assert p.grad is not None and bool(p.grad.abs().sum() > 0), (estimator, pname)
    bounds = latent_bounds(model, tokens, lengths, samples=6, chunk=4)  # chunked decoding
    torch.testing.assert_close(bounds.elbo, -bounds.distortion - bounds.rate)


def test_pathwise_estimators_refuse_categorical_latents() -> None:
    model = build(*LATENT_MODELS[1])
    tokens, lengths = batch()
    with pytest.raises(ValueError, match="reparameterized"):
        objective_surrogate(model, tokens, lengths, kl_objective(0.5, 2, 2), "dreg")


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"latent": "mixture"}, "gaussian or categorical"),
        ({"latent_size": 0}, "latent_size"),
        ({"categories": 1}, "categories"),
    ],
)
def test_bad_latent_settings_are_refused(settings, message) -> None:
    with pytest.raises(InfolmError, match=message):
        MODELS.build("latent-synthetic", settings, vocab_size=10, where="model")
