"""The VQ latent (``latent/vq.py``) and the synthetic VQ model in the latent-model contract: the
straight-through gradient, the EMA codebook step, and the evaluation's bound and MI on an enumerable model."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from infolm.errors import InfolmError
from infolm.latent import evaluate_latent, latent_bounds
from infolm.latent.synthetic_vq import SyntheticVQModel
from infolm.latent.vq import (
    Quantization,
    QuantizedLatentModel,
    ema_codebook_update,
    nearest_codes,
    straight_through,
)
from infolm.models import MODELS

V, D, K = 7, 2, 3  # 7 symbols, 2 latents of 3 codes: 9 codes in all, enumerable


def tiny(vocab: int = V, latents: int = D, categories: int = K) -> SyntheticVQModel:
    torch.manual_seed(0)
    settings = {"vq_latents": latents, "vq_categories": categories, "vq_dim": 4, "embedding": 8, "hidden": 16}
    model = MODELS.build("latent-synthetic-vq", settings, vocab_size=vocab, where="model")
    assert isinstance(model, SyntheticVQModel) and isinstance(model, QuantizedLatentModel)
    # a codebook spread like the encoder outputs, so that the symbols use several codes
    model.latent.codebook.normal_(0.0, 0.5)
    model.latent.ema_total.copy_(model.latent.codebook)  # the EMA's starting state, m = e with N = 1
    return model


def every_symbol(vocab: int = V) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.arange(vocab).view(vocab, 1), torch.ones(vocab, dtype=torch.long)


def test_nearest_code_is_the_argmin_of_the_distances() -> None:
    codebook = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    encoded = torch.tensor([[[0.9, 0.2], [0.1, 1.2]], [[-0.3, 0.1], [0.4, 0.3]]])  # (B=2, D=2, E=2)
    assert nearest_codes(encoded, codebook).tolist() == [[1, 2], [0, 0]]


def test_straight_through_gives_the_encoder_the_decoders_gradient_at_z_q() -> None:
    model = tiny()
    tokens, lengths = every_symbol()
    quantization = model.quantize(tokens, lengths)
    h = model.vector_log_likelihood(tokens, lengths, straight_through(quantization).unsqueeze(0))[0]
    # the value is ln p(x|z_q): the contract's log_likelihood of the one-hot codes
    one_hot = F.one_hot(quantization.codes, K).unsqueeze(0)
    torch.testing.assert_close(h, model.log_likelihood(tokens, lengths, one_hot)[0])
    # the gradient reaching z_e is the decoder's gradient with respect to z_q, copied (VQ-VAE Sec. 3.2)
    (to_encoder,) = torch.autograd.grad(h.sum(), quantization.encoded)
    at_codes = quantization.quantized.clone().requires_grad_()
    (decoder,) = torch.autograd.grad(
        model.vector_log_likelihood(tokens, lengths, at_codes.unsqueeze(0)).sum(), at_codes
    )
    torch.testing.assert_close(to_encoder, decoder)
    assert bool(to_encoder.abs().sum() > 0)


def test_ema_update_is_eqs_6_to_8_on_a_hand_example() -> None:
    count = torch.tensor([2.0, 1.0, 0.5])
    total = torch.tensor([[2.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    encoded = torch.tensor([[1.0, 1.0], [3.0, 1.0], [0.0, 2.0]])
    codes = torch.tensor([0, 0, 1])  # code 0 gets two vectors (sum [4, 2]), code 1 one, code 2 none
    # γ = 0.75: N = 0.75 [2, 1, 0.5] + 0.25 [2, 1, 0]; m = 0.75 m + 0.25 [[4, 2], [0, 2], [0, 0]]
    new_count, new_total, codebook = ema_codebook_update(count, total, encoded, codes, decay=0.75, epsilon=0.0)
    torch.testing.assert_close(new_count, torch.tensor([2.0, 1.0, 0.375]))
    torch.testing.assert_close(new_total, torch.tensor([[2.5, 0.5], [0.0, 1.25], [0.375, 0.375]]))
    torch.testing.assert_close(codebook, torch.tensor([[1.25, 0.25], [0.0, 1.25], [1.0, 1.0]]))  # e = m / N
    # Laplace smoothing: Ñ = (N + ε) / (ΣN + Kε) ΣN, here ΣN = 3.375
    _, _, smoothed = ema_codebook_update(count, total, encoded, codes, decay=0.75, epsilon=0.1)
    n_tilde = torch.tensor([2.1, 1.1, 0.475]) / 3.675 * 3.375
    torch.testing.assert_close(smoothed, new_total / n_tilde.unsqueeze(1))


def test_the_module_update_applies_the_formula_and_an_idle_code_keeps_its_place() -> None:
    model = tiny()
    latent = model.latent
    quantization = model.quantize(*every_symbol())
    count, total = latent.ema_count.clone(), latent.ema_total.clone()
    latent.update(quantization, decay=0.9)
    expected = ema_codebook_update(count, total, quantization.encoded, quantization.codes, 0.9)
    for buffer, value in zip((latent.ema_count, latent.ema_total, latent.codebook), expected):
        torch.testing.assert_close(buffer, value)
    # the initial state is one pseudo-assignment of each code's own vector: a code that gets nothing stays put
    fresh = tiny().latent
    start = fresh.codebook.clone()
    fresh.update(Quantization(quantization.encoded, torch.zeros_like(quantization.codes), start[:1]), decay=0.9)
    torch.testing.assert_close(fresh.codebook[1:], start[1:], rtol=1e-4, atol=1e-6)  # (Laplace ε moves it a hair)
    assert not torch.allclose(fresh.codebook[0], start[0])


def log_joint_of_every_code(model: SyntheticVQModel, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """ln p(x, z) = ln p(x|z) - D ln K for every one of the K^D codes z, in ``itertools.product`` order: (K^D, B)."""
    codes = torch.tensor(list(itertools.product(range(K), repeat=D)))  # (K^D, D)
    z = F.one_hot(codes, K).unsqueeze(1).expand(-1, tokens.size(0), D, K)  # (K^D, B, D, K)
    with torch.no_grad():
        return model.log_likelihood(tokens, lengths, z) - D * math.log(K)


def test_the_bound_is_ln_p_x_given_z_q_minus_d_ln_k_and_below_the_exact_marginal() -> None:
    model = tiny().eval()
    tokens, lengths = every_symbol()
    with torch.no_grad():
        codes = model.quantize(tokens, lengths).codes
        at_code = model.log_likelihood(tokens, lengths, F.one_hot(codes, K).unsqueeze(0))[0]
    rate = D * math.log(K)
    for samples in (1, 5):  # a point mass: the same bound for any number of draws
        bounds = latent_bounds(model, tokens, lengths, samples=samples, chunk=2)
        torch.testing.assert_close(bounds.log_likelihood_bound, at_code - rate)
        torch.testing.assert_close(bounds.elbo, at_code - rate)
        torch.testing.assert_close(bounds.rate, torch.full((V,), rate))
    log_joint = log_joint_of_every_code(model, tokens, lengths)
    exact = torch.logsumexp(log_joint, 0)  # ln p(x) = ln (1/K^D) Σ_z p(x|z)
    assert bool((bounds.log_likelihood_bound <= exact + 1e-6).all())
    # the gap is -ln p(z_q|x): the model's true posterior probability of the chosen code, enumerated
    chosen = codes[:, 0] * K + codes[:, 1]  # the code's row in itertools.product order
    log_posterior = (log_joint - exact)[chosen, torch.arange(V)]
    torch.testing.assert_close(exact - bounds.log_likelihood_bound, -log_posterior)
    assert bool((exact - bounds.log_likelihood_bound > 1e-4).any())  # not exact for an untrained decoder


def test_the_mi_estimate_is_d_ln_k_an_upper_bound_on_the_models_mi() -> None:
    model = tiny().eval()
    tokens, lengths = every_symbol()
    metrics = evaluate_latent(model, [(tokens, lengths)], samples=4)
    rate = D * math.log(K)
    assert metrics.mutual_information == pytest.approx(rate, abs=1e-5)
    assert metrics.rate == pytest.approx(rate, abs=1e-5)
    # the generative model's own I_p(X, Z) = E_x KL(p(z|x) || p(z)) over the data (every symbol once)
    log_joint = log_joint_of_every_code(model, tokens, lengths)
    log_posterior = log_joint - torch.logsumexp(log_joint, 0)  # ln p(z|x)
    exact_mi = float((log_posterior.exp() * (log_posterior + rate)).sum(0).mean())
    assert 0.0 <= exact_mi < metrics.mutual_information


def test_the_decoder_is_a_distribution_over_the_vocabulary_and_draws_fold_into_one_pass() -> None:
    model = tiny().eval()
    tokens, lengths = every_symbol()
    z = F.one_hot(torch.tensor([[0, 2], [1, 1]]), K).unsqueeze(1).expand(2, V, D, K)  # two codes, every symbol
    with torch.no_grad():
        together = model.log_likelihood(tokens, lengths, z)
        apart = torch.cat([model.log_likelihood(tokens, lengths, z[k : k + 1]) for k in range(2)])
    torch.testing.assert_close(together, apart)
    torch.testing.assert_close(together.exp().sum(1), torch.ones(2))  # Σ_x p(x|z) = 1 (one-symbol data)


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"vq_categories": 1}, "model.vq_categories must be at least 2"),
        ({"vq_latents": 0}, "model.vq_latents must be at least 1"),
        ({"vq_dim": 0}, "model.vq_dim must be at least 1"),
    ],
)
def test_bad_vq_settings_are_refused(settings, message) -> None:
    with pytest.raises(InfolmError, match=message):
        MODELS.build("latent-synthetic-vq", settings, vocab_size=10, where="model")
