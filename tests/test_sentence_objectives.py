"""A-MIM, ELBO (with KL annealing) and AE on a tiny sentence GRU: each loss equals its equation by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from infolm.data.batching import IGNORE_INDEX
from infolm.errors import InfolmError
from infolm.latent.sentence_gru import SentenceGRU, SentenceGRUConfig
from infolm.models import MODELS
from infolm.objectives import OBJECTIVES, build_objective

EOS = 0
SENTENCES = [[5, 3, 7, EOS], [2, EOS], [4, 4, 9, 6, 1, EOS]]


def tiny() -> SentenceGRU:
    torch.manual_seed(0)
    return SentenceGRU(SentenceGRUConfig(emb=8, hidden=10, latent=3, dropout_embedding=0.0), 12, eos_id=EOS)


def sentence_batch(step: int = 0) -> SimpleNamespace:
    width = max(map(len, SENTENCES))
    targets = torch.tensor([s + [IGNORE_INDEX] * (width - len(s)) for s in SENTENCES])
    return SimpleNamespace(targets=targets, lengths=torch.tensor([len(s) for s in SENTENCES]), step=step)


def decode_by_hand(model: SentenceGRU, sentence: list[int], z: torch.Tensor) -> torch.Tensor:
    """ln p(x|z) token by token (Eq. 1): <sos>, then each previous word, z concatenated every step."""
    state = model.latent_to_hidden(z).view(1, 1, -1)
    x, total = model.sos, torch.zeros(())
    for token in sentence:
        out, state = model.decoder(torch.cat([x, z]).view(1, 1, -1), state)
        total = total + F.log_softmax(model.output(out[0, 0]), dim=-1)[token]
        x = model.embedding.weight[token]
    return total


def gaussian_log_density(z: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    return (-0.5 * (math.log(2 * math.pi) + 2 * std.log() + ((z - mean) / std) ** 2)).sum(-1)


def test_amim_loss_is_eq14_by_hand() -> None:
    model = tiny()
    objective = build_objective({"amim": {"weight": 1.0}})
    torch.manual_seed(7)
    terms = objective(model, sentence_batch(), None)
    torch.manual_seed(7)
    tokens = torch.tensor([s + [EOS] * (6 - len(s)) for s in SENTENCES])
    q = model.posterior(tokens, torch.tensor([len(s) for s in SENTENCES]))
    z = q.rsample((1,))[0]  # the same joint sample
    by_hand = []
    for b, sentence in enumerate(SENTENCES):
        log_p = decode_by_hand(model, sentence, z[b])
        log_q = gaussian_log_density(z[b], q.mean[b], q.stddev[b])
        log_anchor = gaussian_log_density(z[b], torch.zeros(3), torch.ones(3))
        by_hand.append(-(log_p + 0.5 * (log_q + log_anchor)))  # Alg. 1 line 3 / Eq. 14 without 1/2 H_P(x)
    # without a corpus (no setup): the mean over the 3 sentences over their own mean length, 12 / 3 tokens
    torch.testing.assert_close(terms.losses["amim"], torch.stack(by_hand).sum() / 12, rtol=1e-5, atol=1e-5)
    assert terms.tokens == 12


@pytest.mark.parametrize("name", ["amim", "elbo", "ae"])
def test_losses_are_alg1_means_over_sentences_scaled_by_the_training_sentences_mean_length(name: str) -> None:
    """Alg. 1 averages over the N sentences of a batch: the loss is that mean divided by a constant, the
    mean length of the training sentences (here lines of 3, 5 and 2 tokens: 10 / 3), so that it reads per
    token; ``normalize: tokens`` divides the batch's sum by its own scored tokens (12) instead."""
    corpus = SimpleNamespace(sentence_offsets=lambda split: torch.tensor([0, 3, 8, 10]).numpy())
    losses = {}
    for normalize in ("sentences", "tokens"):
        model = tiny()
        objective = build_objective({name: {"normalize": normalize}})
        objective.setup(corpus, model)
        torch.manual_seed(7)
        losses[normalize] = objective(model, sentence_batch(), None).losses[name]
    total = losses["tokens"] * 12  # the sum over the batch's sentences
    torch.testing.assert_close(losses["sentences"], total / (3 * (10 / 3)), rtol=1e-6, atol=1e-6)
    with pytest.raises(InfolmError, match="normalize"):
        build_objective({name: {"normalize": "words"}})


@pytest.mark.parametrize("name", ["ae", "mi-kl", "mi-renyi", "mi-power", "beta-vae"])
def test_a_per_sentence_bound_has_the_per_token_scale_only_when_every_training_sentence_has_one_length(
    name: str,
) -> None:
    """The divergence scale ln|V| of a bound on -ln p(x) read per sentence over the training mean length:
    kept when every training sentence scores as many tokens (the quotient is then the per-token loss),
    dropped when lengths vary; per token it is always kept. The setup every sentence objective shares."""
    uneven = SimpleNamespace(sentence_offsets=lambda split: torch.tensor([0, 3, 8, 10]).numpy())
    even = SimpleNamespace(sentence_offsets=lambda split: torch.tensor([0, 4, 8, 12]).numpy())
    for corpus, normalize, scale in (
        (uneven, "sentences", None),
        (even, "sentences", math.log(12)),
        (uneven, "tokens", math.log(12)),
    ):
        objective = build_objective({name: {"normalize": normalize}})
        objective.setup(corpus, tiny())
        assert objective.term(name).mean_length == pytest.approx(10 / 3 if corpus is uneven else 4.0)
        assert objective.loss_scale(12) == (None if scale is None else pytest.approx(scale)), (name, normalize)


def test_validation_amim_loss_is_distortion_plus_half_the_rate_plus_the_posterior_entropy() -> None:
    """The A-MIM loss that evaluation reports (the K-draw average of Alg. 1 line 3) has the expectation
    E_q[-ln p(x|z)] + KL(q || P)/2 + H(q): -1/2 E_q[ln q + ln P] = H(q) + KL(q || P)/2."""
    from infolm.latent import latent_bounds

    model = tiny().eval()
    tokens = torch.tensor([s + [EOS] * (6 - len(s)) for s in SENTENCES])
    lengths = torch.tensor([len(s) for s in SENTENCES])
    torch.manual_seed(3)
    bounds = latent_bounds(model, tokens, lengths, samples=20000, chunk=5000)
    q = model.posterior(tokens, lengths)
    expected = bounds.distortion + 0.5 * bounds.rate + q.entropy()  # rate: the closed-form KL here
    torch.testing.assert_close(bounds.amim, expected.detach(), atol=0.03, rtol=0)  # MC std ~0.01 at 20k draws
    assert not torch.allclose(bounds.amim, bounds.distortion + bounds.rate, atol=0.3)  # not the -ELBO


def test_elbo_is_reconstruction_minus_the_closed_form_kl_and_annealing_scales_the_kl() -> None:
    model = tiny()
    tokens = torch.tensor([s + [EOS] * (6 - len(s)) for s in SENTENCES])
    q = model.posterior(tokens, torch.tensor([len(s) for s in SENTENCES]))
    mean, std = q.mean.detach(), q.stddev.detach()
    kl = 0.5 * (std**2 + mean**2 - 1 - 2 * std.log()).sum(-1)  # KL(N(mu, sigma^2) || N(0, I))
    for anneal, step, beta in (("none", 0, 1.0), ("logistic", 10_000, 0.5), ("linear", 2_500, 0.25)):
        objective = build_objective({"elbo": {"anneal": anneal}})
        torch.manual_seed(3)
        terms = objective(model, sentence_batch(step), None)
        torch.manual_seed(3)
        z = q.rsample((1,))[0].detach()
        log_p = torch.stack([decode_by_hand(model, s, z[b]) for b, s in enumerate(SENTENCES)])
        torch.testing.assert_close(terms.losses["elbo"], -(log_p - beta * kl).sum() / 12, rtol=1e-5, atol=1e-5)
        assert terms.metrics["kl_weight"] == beta


def test_ae_reconstructs_from_the_posterior_mean() -> None:
    model = tiny()
    terms = build_objective({"ae": {}})(model, sentence_batch(), None)
    tokens = torch.tensor([s + [EOS] * (6 - len(s)) for s in SENTENCES])
    mean = model.posterior(tokens, torch.tensor([len(s) for s in SENTENCES])).mean
    log_p = torch.stack([decode_by_hand(model, s, mean[b]) for b, s in enumerate(SENTENCES)])
    torch.testing.assert_close(terms.losses["ae"], -log_p.sum() / 12, rtol=1e-5, atol=1e-5)
    terms.losses["ae"].backward()
    assert model.to_log_var.weight.grad is None  # the variance head plays no part in the AE


def test_weight_zero_changes_nothing() -> None:
    model = tiny()
    torch.manual_seed(1)
    alone = build_objective({"amim": {}})(model, sentence_batch(), None).total()
    torch.manual_seed(1)
    with_zero = build_objective({"amim": {}, "elbo": {"weight": 0.0}})(model, sentence_batch(), None).total()
    torch.testing.assert_close(alone, with_zero)


def test_bad_settings_are_one_clear_error() -> None:
    with pytest.raises(InfolmError, match="samples must be at least 1"):
        OBJECTIVES.build("amim", {"samples": 0}, where="objective.amim")
    with pytest.raises(InfolmError, match="none, logistic, linear"):
        OBJECTIVES.build("elbo", {"anneal": "cosine"}, where="objective.elbo")
    for name in ("amim", "elbo", "ae"):
        with pytest.raises(InfolmError, match=f"objective {name} needs a latent-variable model, got LSTMLM"):
            build_objective({name: {}}).setup(None, MODELS.build("lstm", {}, vocab_size=12))


LATENT_OBJECTIVES = [
    n
    for n in OBJECTIVES.names()
    if "sentences" in getattr(OBJECTIVES.get(n).factory, "needs", ())
    and "latent-variable" in getattr(OBJECTIVES.get(n).factory, "protocols", ())
]


@pytest.mark.parametrize("name", LATENT_OBJECTIVES)
def test_contract_of_every_sentence_objective(name: str) -> None:
    losses = []
    for _ in range(2):
        model = tiny()
        torch.manual_seed(11)
        terms = build_objective({name: {}})(model, sentence_batch(), None)
        assert terms.losses and all(loss.dim() == 0 and torch.isfinite(loss) for loss in terms.losses.values())
        terms.total().backward()
        assert model.embedding.weight.grad is not None and bool(model.decoder.weight_hh_l0.grad.abs().sum() > 0)
        losses.append({k: float(v.detach()) for k, v in terms.losses.items()})
    assert losses[0] == losses[1]  # deterministic under the seed
