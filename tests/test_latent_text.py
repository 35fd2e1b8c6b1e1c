"""Reconstruction, perturbation, interpolation, sampling and MELBO for a sentence latent model."""

from __future__ import annotations

import math

import pytest
import torch

from infolm.errors import InfolmError
from infolm.evaluation.melbo import evaluate_melbo, melbo_nll
from infolm.evaluation.reconstruction import (
    encode,
    interpolate,
    interpolation_codes,
    latent_codes,
    reconstruct,
    reconstruction_bleu,
    reconstruction_bleu_scores,
    sample_sentences,
)
from infolm.latent.sentence_gru import SentenceGRU, SentenceGRUConfig

EOS = 0
SENTENCES = [[5, 3, 7], [2], [4, 4, 9, 6, 1]]


def tiny() -> SentenceGRU:
    torch.manual_seed(0)
    config = SentenceGRUConfig(emb=8, hidden=10, latent=3, dropout_embedding=0.0, max_length=12)
    return SentenceGRU(config, 12, eos_id=EOS).eval()


def test_codes_of_each_mode() -> None:
    model = tiny()
    tokens = torch.tensor([[5, 3, 7, EOS], [2, EOS, EOS, EOS]])
    q = model.posterior(tokens, torch.tensor([4, 2]))
    torch.testing.assert_close(latent_codes(q, "mean"), q.mean)
    noise = torch.randn(q.mean.shape, generator=torch.Generator().manual_seed(1))
    sampled = latent_codes(q, "sample", generator=torch.Generator().manual_seed(1))
    perturbed = latent_codes(q, "perturb", generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(sampled, q.mean + q.stddev * noise)
    torch.testing.assert_close(perturbed, q.mean + 10 * q.stddev * noise)  # App. D.1: 10 sigma
    with pytest.raises(InfolmError, match="mean, sample, perturb"):
        latent_codes(q, "median")


def test_reconstruction_decodes_the_code_greedily() -> None:
    model = tiny()
    z = encode(model, SENTENCES, "mean")
    assert reconstruct(model, SENTENCES, "mean", batch_size=2) == model.generate(z)
    # <eos> is appended when missing: the same codes either way
    torch.testing.assert_close(encode(model, [s + [EOS] for s in SENTENCES], "mean"), z)


def test_interpolation_runs_from_one_code_to_the_other() -> None:
    a, b = torch.tensor([0.0, 2.0]), torch.tensor([4.0, -2.0])
    torch.testing.assert_close(interpolation_codes(a, b, 5)[:, 0], torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0]))
    model = tiny()
    path = interpolate(model, SENTENCES[0], SENTENCES[2], steps=4, mode="mean")
    ends = reconstruct(model, [SENTENCES[0], SENTENCES[2]], "mean")
    assert len(path) == 4 and path[0] == ends[0] and path[-1] == ends[1]
    with pytest.raises(InfolmError, match="at least 2 steps"):
        interpolation_codes(a, b, 1)


def test_sampling_follows_the_seed_and_refuses_bad_counts() -> None:
    model = tiny()
    first = sample_sentences(model, 3, generator=torch.Generator().manual_seed(5))
    assert first == sample_sentences(model, 3, generator=torch.Generator().manual_seed(5))
    with pytest.raises(InfolmError, match="must be positive"):
        sample_sentences(model, 0)


def test_a_memorizing_model_reconstructs_with_bleu_one() -> None:
    torch.manual_seed(0)
    model = SentenceGRU(SentenceGRUConfig(emb=16, hidden=32, latent=4, dropout_embedding=0.0), 12, eos_id=EOS)
    tokens = torch.tensor([[5, 3, 7, EOS, EOS, EOS], [2, EOS, EOS, EOS, EOS, EOS], [4, 4, 9, 6, 1, EOS]])
    lengths = torch.tensor([4, 2, 6])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    for _ in range(30):  # an auto-encoder on three sentences: z = posterior mean
        loss = -model.log_likelihood(tokens, lengths, model.posterior(tokens, lengths).mean.unsqueeze(0)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    itos = [f"w{i}" for i in range(12)]
    score = reconstruction_bleu(model, SENTENCES, itos, mode="mean")
    assert math.isclose(score.bleu, 1.0)
    ours, authors = reconstruction_bleu_scores(model, SENTENCES, itos, mode="mean")  # every one ends with <eos>
    assert math.isclose(ours.bleu, 1.0) and math.isclose(authors.bleu, 1.0)


def test_melbo_is_eq16_and_bounds_the_nll_under_the_aggregated_posterior() -> None:
    assert math.isclose(melbo_nll(torch.tensor([-3.0, -5.0])), 4.0 + math.log(2))
    model = tiny()
    tokens = torch.tensor([[5, 3, 7, EOS, EOS, EOS], [2, EOS, EOS, EOS, EOS, EOS], [4, 4, 9, 6, 1, EOS]])
    lengths = torch.tensor([4, 2, 6])
    torch.manual_seed(0)
    result = evaluate_melbo(model, [(tokens, lengths)], samples=2000)
    assert result.sentences == 3 and result.tokens == 12 and math.isclose(result.log_n, math.log(3))
    assert math.isclose(result.ppl, math.exp(3 * result.nll / 12))
    # -ln p_T(x_i) with p_T(z) = 1/3 sum_j q(z|x_j): Monte Carlo from each q(z|x_j), then the mixture
    with torch.no_grad():
        z = model.posterior(tokens, lengths).sample((4000,))  # (M, 3 sources, D)
        h = torch.stack([model.log_likelihood(tokens, lengths, z[:, j : j + 1].expand(-1, 3, -1)) for j in range(3)])
        log_p = torch.logsumexp(h, dim=1) - math.log(4000)  # (sources j, sentences i): ln E_q(z|x_j) p(x_i|z)
        nll = -(torch.logsumexp(log_p, dim=0) - math.log(3)).mean()
    assert result.nll >= float(nll) + 0.05  # Eq. 15: MELBO drops the mixture's other components


def test_a_widened_proposal_bounds_the_same_model_and_leaves_it_as_it_was() -> None:
    """At the model's own floor the widened-proposal bound is the usual IWAE bound (same draws); a wider
    floor scores the same p(x|z) p(z) with another proposal (a different number, a valid bound too); a
    floor below the model's is the model's; the model's floor is restored; a model without one is refused."""
    from infolm.data.batching import sentence_batches
    from infolm.evaluation.latent_report import widened_proposal_bound
    from infolm.latent.evaluation import evaluate_latent

    model = tiny()
    sentences = [torch.tensor([*s, EOS]) for s in SENTENCES]
    own = model.config.min_log_var
    torch.manual_seed(3)
    usual = evaluate_latent(model, sentence_batches(sentences, 2, pad_id=EOS), samples=50, chunk=10)
    at_own = widened_proposal_bound(model, sentences, own, EOS, samples=50, chunk=10, batch_size=2, seed=3)
    assert at_own["floor"] == own and at_own["nll"] == usual.nll and at_own["mi"] == usual.mutual_information
    wider = widened_proposal_bound(model, sentences, 1.0, EOS, samples=50, chunk=10, batch_size=2, seed=3)
    assert wider["floor"] == 1.0 and wider["nll"] != usual.nll and math.isfinite(wider["nll"])
    assert widened_proposal_bound(model, sentences, own - 5, EOS, samples=5, seed=3)["floor"] == own
    assert model.config.min_log_var == own
    # the floor binds iff some posterior log-variance lies below it
    from infolm.evaluation.latent_report import proposal_floor_binds

    with torch.no_grad():
        batch = next(iter(sentence_batches(sentences, len(sentences), pad_id=EOS)))
        log_var = model.posterior(*batch).variance.log()
    assert not proposal_floor_binds(model, sentences, own, EOS, batch_size=2)
    below = float(log_var.min()) - 0.01
    assert not proposal_floor_binds(model, sentences, below, EOS, batch_size=2)
    # a floor that binds nowhere leaves q as it is: the same bound, draw for draw
    unbound = widened_proposal_bound(model, sentences, below, EOS, samples=50, chunk=10, batch_size=2, seed=3)
    assert unbound["floor"] == below and unbound["nll"] == usual.nll
    assert proposal_floor_binds(model, sentences, float(log_var.min()) + 0.01, EOS, batch_size=2)
    assert proposal_floor_binds(model, sentences, 1.0, EOS, batch_size=2)
    with pytest.raises(InfolmError, match="no log-variance floor"):
        widened_proposal_bound(torch.nn.Linear(2, 2), sentences, 0.0, EOS)


def test_the_aggregate_prior_bound_with_one_standard_normal_component_is_the_usual_bound() -> None:
    """A mixture of one N(0, I) component is the N(0, I) prior: the same draws give the usual IWAE bound;
    the aggregated posterior of sentences holds their posterior means and log-variances."""
    from infolm.data.batching import sentence_batches
    from infolm.evaluation.aggregate_prior import aggregate_posterior, aggregate_prior_bound
    from infolm.latent.aggregate_prior import AggregatePosterior
    from infolm.latent.evaluation import evaluate_latent

    model = tiny()
    sentences = [torch.tensor([*s, EOS]) for s in SENTENCES]
    torch.manual_seed(3)
    usual = evaluate_latent(model, sentence_batches(sentences, 2, pad_id=EOS), samples=40, chunk=10)
    normal = AggregatePosterior(torch.zeros(1, 3), torch.zeros(1, 3))
    result = aggregate_prior_bound(model, sentences, normal, EOS, samples=40, chunk=10, batch_size=2, seed=3)
    assert result["nll_aggregate_prior"] == pytest.approx(usual.nll, rel=1e-5)
    assert result["nll_words_aggregate_prior"] == pytest.approx(usual.nll_words, rel=1e-5)
    assert result["nll_aggregate_prior_per_token"] == pytest.approx(usual.nll_per_token, rel=1e-5)
    prior = aggregate_posterior(model, sentences, EOS, batch_size=2)
    with torch.no_grad():
        q = model.posterior(*next(iter(sentence_batches(sentences, 3, pad_id=EOS))))
    torch.testing.assert_close(prior.means, q.mean)
    torch.testing.assert_close(prior.log_vars, q.variance.log())
    assert aggregate_posterior(model, sentences, EOS, components=2, seed=1).components == 2
    with pytest.raises(InfolmError, match="at least one component"):
        aggregate_posterior(model, sentences, EOS, components=0)


def test_sampled_reconstructions_follow_the_seed_and_differ_from_greedy_ones() -> None:
    """The paper's BLEU protocol samples every word from p(x|z): with <eos> the likeliest token but below
    one half, greedy decoding writes nothing while sampling writes words; the same seeds, the same score."""
    model = tiny()
    with torch.no_grad():
        model.output.weight.zero_()
        model.output.bias.zero_()
        model.output.bias[EOS] = 2.0  # p(<eos>) = e^2 / (e^2 + 11), about 0.4
    itos = [f"w{i}" for i in range(12)]

    def sampled(seed: int) -> tuple[list[list[int]], float]:
        words = reconstruct(model, SENTENCES * 4, "mean", generator=torch.Generator().manual_seed(seed), greedy=False)
        score, _ = reconstruction_bleu_scores(
            model, SENTENCES * 4, itos, "mean", generator=torch.Generator().manual_seed(seed)
        )
        return words, score.bleu

    first, bleu = sampled(7)
    assert sampled(7) == (first, bleu) and sampled(8)[0] != first
    greedy = reconstruct(model, SENTENCES * 4, "mean")
    assert greedy == [[]] * 12 and any(first)
    greedy_bleu = reconstruction_bleu(model, SENTENCES * 4, itos, "mean", decoding="greedy")
    assert greedy_bleu.bleu == 0.0 and bleu > 0.0
    with pytest.raises(InfolmError, match="sampled, greedy"):
        reconstruction_bleu(model, SENTENCES, itos, "mean", decoding="beam")


def test_under_a_length_prior_a_reconstruction_has_the_observed_length() -> None:
    torch.manual_seed(0)
    config = SentenceGRUConfig(emb=8, hidden=10, latent=3, dropout_embedding=0.0, length_prior=True, max_length=12)
    model = SentenceGRU(config, 12, eos_id=EOS).eval()
    model.fit_length_prior(torch.tensor([2, 2, 2]))  # the mode of p(T): two words
    for greedy in (True, False):
        out = reconstruct(model, SENTENCES, "mean", greedy=greedy, generator=torch.Generator().manual_seed(0))
        assert [len(s) for s in out] == [len(s) for s in SENTENCES]
