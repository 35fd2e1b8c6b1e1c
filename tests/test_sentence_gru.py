"""The SentenceMIM / sentence-VAE GRU: batched K-sample scoring, padding, reversal, Eq. 2, clamps."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from infolm.errors import InfolmError
from infolm.latent.sentence_gru import SentenceGRU, SentenceGRUConfig, reverse_padded

EOS = 0


def tiny(vocab: int = 12, **settings: object) -> SentenceGRU:
    torch.manual_seed(0)
    config = SentenceGRUConfig(**{"emb": 8, "hidden": 10, "latent": 3, "dropout_embedding": 0.0, **settings})  # type: ignore[arg-type]
    return SentenceGRU(config, vocab, eos_id=EOS).eval()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    sentences = [[5, 3, 7, EOS], [2, EOS], [4, 4, 9, 6, 1, EOS]]
    width = max(map(len, sentences))
    tokens = torch.tensor([s + [EOS] * (width - len(s)) for s in sentences])
    return tokens, torch.tensor([len(s) for s in sentences])


@torch.no_grad()
def by_hand(model: SentenceGRU, sentence: list[int], z: torch.Tensor) -> float:
    """ln p(x|z) of one unpadded sentence, token by token (Eq. 1)."""
    state, total = None, 0.0
    inputs = model.sos.view(1, 1, -1)
    for token in sentence:
        logits, state = model.decode_logits(inputs, z.view(1, -1), state)
        total += float(F.log_softmax(logits[0, -1], dim=-1)[token])
        inputs = model.embedding(torch.tensor([[token]]))
    return total


def test_k_samples_in_one_pass_equal_k_separate_passes() -> None:
    model = tiny()
    tokens, lengths = batch()
    z = torch.randn(5, 3, 3)  # (K, B, D)
    with torch.no_grad():
        folded = model.log_likelihood(tokens, lengths, z)  # (K, B)
        separate = torch.stack([model.log_likelihood(tokens, lengths, z[k : k + 1])[0] for k in range(5)])
    torch.testing.assert_close(folded, separate, rtol=1e-5, atol=1e-5)
    for b, length in enumerate(lengths.tolist()):
        assert math.isclose(float(folded[2, b]), by_hand(model, tokens[b, :length].tolist(), z[2, b]), rel_tol=1e-5)


def test_padding_changes_neither_posterior_nor_likelihood() -> None:
    model = tiny()
    tokens, lengths = batch()
    z = torch.randn(1, 3, 3)
    with torch.no_grad():
        q = model.posterior(tokens, lengths)
        lp = model.log_likelihood(tokens, lengths, z)
        for b, length in enumerate(lengths.tolist()):
            alone = tokens[b : b + 1, :length]
            q1 = model.posterior(alone, lengths[b : b + 1])
            torch.testing.assert_close(q1.mean[0], q.mean[b])
            torch.testing.assert_close(q1.stddev[0], q.stddev[b])
            torch.testing.assert_close(model.log_likelihood(alone, lengths[b : b + 1], z[:, b : b + 1])[0, 0], lp[0, b])


def test_encoder_reads_the_words_reversed() -> None:
    assert reverse_padded(torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]]), torch.tensor([3, 2]), 0).tolist() == [
        [3, 2, 1, 0],
        [5, 4, 0, 0],
    ]
    forward, backward = tiny(reverse_encoder=False), tiny()
    words = torch.tensor([[5, 3, 7, EOS]])
    flipped = torch.tensor([[7, 3, 5, EOS]])
    length = torch.tensor([4])
    with torch.no_grad():
        torch.testing.assert_close(backward.posterior(words, length).mean, forward.posterior(flipped, length).mean)


def test_log_variance_is_clamped_from_below() -> None:
    model = tiny()
    with torch.no_grad():
        model.to_log_var.bias.fill_(-50.0)
        model.to_log_var.weight.zero_()
    tokens, lengths = batch()
    std = model.posterior(tokens, lengths).stddev
    torch.testing.assert_close(std, torch.full_like(std, math.exp(-5.0)))


def test_length_prior_decoder_sums_to_one_over_all_sentences_of_each_length() -> None:
    model = tiny(vocab=3, length_prior=True, max_length=4)  # words 1 and 2, <eos> = 0
    model.fit_length_prior(torch.tensor([1, 2, 2, 3]))
    prior = model.log_length_prior.exp()
    assert math.isclose(float(prior.sum()), 1.0, rel_tol=1e-6)
    # add-one smoothing over 1..4: counts 2, 3, 2, 1 of 8
    torch.testing.assert_close(prior, torch.tensor([0.0, 2 / 8, 3 / 8, 2 / 8, 1 / 8]))
    z = torch.randn(1, 1, 3)
    total = 0.0
    for length in (1, 2, 3):
        for words in itertools.product([1, 2], repeat=length):
            tokens = torch.tensor([list(words) + [EOS]])
            with torch.no_grad():
                total += float(model.log_likelihood(tokens, torch.tensor([length + 1]), z).exp())
    assert math.isclose(total, float(prior[1:4].sum()), rel_tol=1e-5)  # Eq. 2: sum over T <= 3 of p(T)


def test_generation_stops_at_eos_or_at_the_prior_length() -> None:
    model = tiny()
    with torch.no_grad():
        model.output.bias.zero_()
        model.output.bias[EOS] = 100.0  # <eos> first: empty sentences
    assert model.generate(torch.randn(2, 3)) == [[], []]
    model = tiny(length_prior=True, max_length=5)
    model.fit_length_prior(torch.tensor([4, 4, 4, 2]))
    sentences = model.generate(torch.randn(3, 3), banned=[1])
    assert [len(s) for s in sentences] == [4, 4, 4]
    assert all(EOS not in s and 1 not in s for s in sentences)


def test_parameter_count_matches_the_paper() -> None:
    # Table 2: 11M (latent 16), 11M (128), 12M (512) on PTB (10,000 words with <eos>)
    for latent, millions in ((16, 11), (128, 11), (512, 12)):
        model = SentenceGRU(SentenceGRUConfig(latent=latent), 10_000)
        assert round(sum(p.numel() for p in model.parameters()) / 1e6) == millions


def test_bad_sizes_are_one_clear_error() -> None:
    with pytest.raises(InfolmError, match="model.latent must be positive"):
        SentenceGRUConfig(latent=0)
    with pytest.raises(InfolmError, match="dropout_embedding"):
        SentenceGRUConfig(dropout_embedding=1.0)


def test_registered_and_every_estimator_reaches_every_parameter() -> None:
    from infolm.latent import LatentVariableModel, latent_bounds, objective_surrogate
    from infolm.latent.estimators import kl_objective
    from infolm.models import MODELS

    torch.manual_seed(0)
    model = MODELS.build("sentence-gru", {"emb": 8, "hidden": 10, "latent": 3}, vocab_size=12, where="model")
    assert isinstance(model, LatentVariableModel)
    tokens, lengths = batch()
    for estimator in ("iwae", "stl", "dreg", "elbo"):
        model.zero_grad()
        base = "elbo" if estimator == "elbo" else "iwae"
        out = objective_surrogate(model, tokens, lengths, kl_objective(0.5, 3, 3, base), estimator)
        out.surrogate.mean().backward()
        for name, parameter in model.named_parameters():
            assert parameter.grad is not None and bool(parameter.grad.abs().sum() > 0), (estimator, name)
    bounds = latent_bounds(model, tokens, lengths, samples=6, chunk=4)
    torch.testing.assert_close(bounds.elbo, -bounds.distortion - bounds.rate)


def test_embedding_dropout_reaches_the_decoder_only_unless_the_encoder_is_given_its_own() -> None:
    """The authors' code drops the decoder's input embeddings (50%) and not the encoder's: in training, q(z|x)
    is then the same on every call while ln p(x|z) is not; ``dropout_encoder`` adds the encoder's."""
    tokens, lengths = torch.tensor([[5, 3, 7, 0], [2, 0, 0, 0]]), torch.tensor([4, 2])
    for encoder, same in ((0.0, True), (0.5, False)):
        torch.manual_seed(0)
        model = SentenceGRU(SentenceGRUConfig(emb=8, hidden=10, latent=3, dropout_encoder=encoder), 12, eos_id=0)
        model.train()
        first, second = model.posterior(tokens, lengths).mean, model.posterior(tokens, lengths).mean
        assert torch.equal(first, second) == same
        z = torch.zeros(1, 2, 3)
        assert not torch.equal(model.log_likelihood(tokens, lengths, z), model.log_likelihood(tokens, lengths, z))


def test_the_eos_term_is_the_last_tokens_own_and_the_words_bound_leaves_it_out() -> None:
    from infolm.evaluation.melbo import evaluate_melbo
    from infolm.latent.base import draw
    from infolm.latent.estimators import iwae_bound
    from infolm.latent.evaluation import evaluate_latent, latent_bounds

    model = tiny()
    tokens, lengths = batch()
    z = torch.randn(4, 3, 3)
    with torch.no_grad():
        whole, end = model.log_likelihood_terms(tokens, lengths, z)
    assert end is not None
    torch.testing.assert_close(whole, model.log_likelihood(tokens, lengths, z))
    for b, length in enumerate(lengths.tolist()):  # Eq. 1 by hand: the whole sentence minus its words
        words = by_hand(model, tokens[b, : length - 1].tolist(), z[1, b])
        assert math.isclose(
            float(end[1, b]), by_hand(model, tokens[b, :length].tolist(), z[1, b]) - words, rel_tol=1e-5
        )
    torch.manual_seed(3)
    bounds = latent_bounds(model, tokens, lengths, samples=7)
    torch.manual_seed(3)
    draws = draw(model, tokens, lengths, samples=7)
    assert draws.log_likelihood_end is not None and bounds.words_bound is not None
    torch.testing.assert_close(
        bounds.words_bound, iwae_bound(draws.log_likelihood - draws.log_likelihood_end, draws.log_ratio)
    )
    torch.testing.assert_close(bounds.log_likelihood_bound, iwae_bound(draws.log_likelihood, draws.log_ratio))
    assert bool((bounds.words_bound > bounds.log_likelihood_bound).all())  # ln p(<eos>|...) < 0 in every draw
    metrics = evaluate_latent(model, [(tokens, lengths)], samples=7)
    assert metrics.nll_words is not None and metrics.nll_words < metrics.nll
    torch.manual_seed(5)
    melbo = evaluate_melbo(model, [(tokens, lengths)], samples=2)
    assert melbo.nll_words is not None and melbo.nll_words < melbo.nll
    # with a length prior the words and p(T) are scored, no <eos>: nothing to leave out
    prior = tiny(length_prior=True, max_length=8)
    prior.fit_length_prior(torch.tensor([1, 3, 5]))
    assert prior.log_likelihood_terms(tokens, lengths, z)[1] is None
    assert evaluate_latent(prior, [(tokens, lengths)], samples=3).nll_words is None


def test_the_thesis_sentence_model_splits_off_its_last_token_the_same_way() -> None:
    from infolm.models import MODELS

    torch.manual_seed(0)
    settings = {"embedding": 8, "hidden": 8, "latent_size": 4, "latent_embedding": 8}
    model = MODELS.build("latent-sentence-lstm", settings, vocab_size=12).eval()
    tokens, lengths = batch()
    z = torch.randn(3, 3, 4)
    with torch.no_grad():
        whole, end = model.log_likelihood_terms(tokens, lengths, z)
        words = model.log_likelihood(tokens, lengths - 1, z)  # the decoder's inputs do not depend on lengths
    assert end is not None
    torch.testing.assert_close(whole - end, words, rtol=1e-5, atol=1e-5)


def test_a_bf16_decoder_sums_its_token_scores_in_float32() -> None:
    """A sentence's ln p(x|z) is a sum of per-token terms; kept in bf16 it would round to ~0.1 nats."""
    model = tiny().to(torch.bfloat16)
    tokens, lengths = batch()
    z = torch.randn(2, 3, 3, dtype=torch.bfloat16)
    with torch.no_grad():
        lp, eos_terms = model.log_likelihood_terms(tokens, lengths, z)
    assert lp.dtype == torch.float32 and eos_terms is not None and eos_terms.dtype == torch.float32


def test_the_model_built_for_a_run_ends_sentences_with_the_vocabularys_eos() -> None:
    from infolm.build import build_model
    from infolm.config import load_config

    config = load_config(None, ['model={"name": "sentence-gru", "emb": 8, "hidden": 10, "latent": 3}'])
    assert build_model(config, 12, eos_id=5).eos_id == 5  # type: ignore[attr-defined]
    assert build_model(config, 12).eos_id == 0  # type: ignore[attr-defined]
    lstm = load_config(None, ['model={"name": "lstm", "emb": 4, "hidden": 4, "layers": 1}'])
    assert build_model(lstm, 12, eos_id=5) is not None  # a model without the argument is built as before


def test_length_prior_sums_to_one_over_all_lengths_beyond_max_length() -> None:
    """Eq. 2 with p(T) extended past ``max_length`` by its geometric tail: summed over every sentence of
    1..max_length + 2 words, p(x|z) is one less the tail's mass beyond (an over-length sentence scores a
    finite, normalised probability, not the last bin's mass again for every extra word)."""
    model = tiny(vocab=3, length_prior=True, max_length=3)  # words 1 and 2, <eos> = 0; length_tail ρ = 0.5
    model.fit_length_prior(torch.tensor([1, 2, 2, 3, 5]))  # the last bin counts 3 words or more
    prior = model.log_length_prior.exp()
    z = torch.randn(1, 1, 3)
    total = 0.0
    for length in range(1, 6):
        sentences = torch.tensor([[*words, EOS] for words in itertools.product([1, 2], repeat=length)])
        lengths = torch.full((len(sentences),), length + 1)
        with torch.no_grad():
            scores = model.log_likelihood(sentences, lengths, z.expand(1, len(sentences), 3))
        assert bool(torch.isfinite(scores).all())
        total += float(scores.exp().sum())
    # lengths 1, 2 from their bins; 3, 4, 5 from the last bin times (1 - ρ) ρ^(T - 3): all but ρ^3 of it
    assert math.isclose(total, float(prior[1:3].sum() + prior[3] * (1 - 0.5**3)), rel_tol=1e-5)
    with pytest.raises(InfolmError, match="length_tail"):
        SentenceGRUConfig(length_tail=1.0)


def embedded_ids(model: SentenceGRU, tokens: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
    """The token ids the model's embedding reads in q(z|x) and then in ln p(x|z) of one draw."""
    seen: list[torch.Tensor] = []
    hook = model.embedding.register_forward_hook(lambda module, args, out: seen.append(args[0].clone()))
    try:
        model.posterior(tokens, lengths)
        model.log_likelihood(tokens, lengths, torch.zeros(1, len(tokens), model.latent_dim))
    finally:
        hook.remove()
    return seen


UNK = 11


def test_word_dropout_replaces_input_words_by_unk_in_training_only() -> None:
    """App. D.4 / Bowman et al.: at rate p about a fraction p of the encoder's and the decoder's input words
    become <unk> in training, none in evaluation; <eos>, padding and the scored targets are untouched; at
    rate 0 the outputs are those of a model without the setting."""
    torch.manual_seed(1)
    sentences = [[int(w) for w in torch.randint(1, UNK, (int(n),))] + [EOS] for n in torch.randint(3, 30, (200,))]
    width = max(map(len, sentences))
    tokens = torch.tensor([s + [EOS] * (width - len(s)) for s in sentences])
    lengths = torch.tensor([len(s) for s in sentences])
    words = torch.arange(width) < (lengths - 1).unsqueeze(1)  # (B, T): the words, not <eos> or padding
    for rate in (0.2, 0.5):
        settings = {"word_dropout_encoder": rate, "word_dropout_decoder": rate, "reverse_encoder": False}
        config = SentenceGRUConfig(emb=8, hidden=10, latent=3, dropout_embedding=0.0, **settings)  # type: ignore[arg-type]
        model = SentenceGRU(config, UNK + 1, eos_id=EOS, unk_id=UNK)
        model.train()
        encoder, decoder = embedded_ids(model, tokens, lengths)  # (B, T) read by the encoder, (B, T - 1) by the decoder
        assert math.isclose(float((encoder[words] == UNK).float().mean()), rate, abs_tol=0.02)
        assert bool((encoder[~words] == tokens[~words]).all())  # <eos> and padding kept
        # the decoder's inputs after <sos> are tokens[:, :-1]: w1..wn (wn's successor is <eos>), then padding
        read = words[:, :-1]
        assert math.isclose(float((decoder[read] == UNK).float().mean()), rate, abs_tol=0.02)
        assert bool((decoder[~read] == EOS).all())
        model.eval()
        encoder, decoder = embedded_ids(model, tokens, lengths)
        assert bool((encoder == tokens).all()) and bool((decoder == tokens[:, :-1]).all())
    plain = tiny()
    zero = tiny(word_dropout_encoder=0.0, word_dropout_decoder=0.0).train()
    z = torch.randn(2, 3, 3)
    batch_tokens, batch_lengths = batch()
    torch.testing.assert_close(
        zero.log_likelihood(batch_tokens, batch_lengths, z),
        plain.train().log_likelihood(batch_tokens, batch_lengths, z),
    )
    with pytest.raises(InfolmError, match="<unk>"):
        tiny(word_dropout_encoder=0.1)
