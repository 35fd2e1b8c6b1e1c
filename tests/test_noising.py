"""Noising (Xie et al. 2017): gamma0 = 0 is plain cross-entropy; noise rates and proposals as stated."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from infolm.data.corpus import Corpus
from infolm.data.vocab import Vocab
from infolm.errors import InfolmError
from infolm.models.base import LanguageModel, LMOutput
from infolm.objectives.base import Batch, build_objective
from infolm.objectives.noising import Noising, NoisingConfig

# stream: a b E a c E a b E b b E <unk> a E   (E = <eos>)
TEXT = "a b\na c\na b\nb b\n<unk> a\n"


class TinyLM(LanguageModel):
    """Embedding + linear: logits depend on the current token only."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, 8)
        self.out = nn.Linear(8, vocab_size)

    def forward(self, tokens: Tensor, state: object = None) -> LMOutput:
        hidden = self.embedding(tokens)  # (B, T, H)
        return LMOutput(logits=self.out(hidden), hiddens=[hidden], state=None)


def setup(**settings: object) -> tuple[Corpus, TinyLM, Noising]:
    corpus = Corpus.from_texts("toy", "word", {"train": TEXT})
    if settings.get("mode") == "blank":
        corpus.vocab = Vocab(corpus.vocab.itos + ["<_>"])  # data.extra_tokens: ["<_>"]
    model = TinyLM(len(corpus.vocab))
    composite = build_objective({"noising": dict(settings)})
    objective = composite.terms["noising"]
    assert isinstance(objective, Noising)
    objective.setup(corpus, model)
    return corpus, model, objective


def test_gamma_zero_is_plain_cross_entropy() -> None:
    torch.manual_seed(0)
    corpus, model, objective = setup(gamma0=0.0)
    stream = corpus.stream("train")
    inputs, targets = stream[:-1].view(1, -1), stream[1:].clone().view(1, -1)
    targets[0, -2] = -100  # padding is ignored alike
    batch = Batch(inputs=inputs, targets=targets)
    rng = torch.get_rng_state()
    assert objective.transform_batch(batch) is batch
    loss = objective(model, batch, model(inputs)).losses["noising"]
    assert torch.equal(torch.get_rng_state(), rng)  # no noise drawn
    expected = F.cross_entropy(model(inputs).logits.view(-1, model.vocab_size), targets.view(-1), ignore_index=-100)
    assert loss.item() == expected.item()
    grad = torch.autograd.grad(loss, model.out.weight)[0]
    assert torch.equal(grad, torch.autograd.grad(expected, model.out.weight)[0])


def test_gamma_is_gamma0_times_distinct_continuations_over_count() -> None:
    corpus, _, objective = setup(gamma0=0.6)
    ids = corpus.vocab.stoi
    # following a: b, c, b, E -> 3/4; b: E, E, b, E -> 2/4; E: a, a, b, <unk> -> 3/4; c: E; <unk>: a
    expected = {"a": 3 / 4, "b": 2 / 4, "<eos>": 3 / 4, "c": 1.0, "<unk>": 1.0}
    for token, ratio in expected.items():
        assert objective.gamma[ids[token]].item() == pytest.approx(0.6 * ratio)
    # bigram-kn proposal N1+(., x) / N1+(., .): a {E, <unk>}, b {a, E, b}, c {a}, E {b, c, a}, <unk> {E}
    proposal = {"a": 2, "b": 3, "c": 1, "<eos>": 3, "<unk>": 1}
    for token, n in proposal.items():
        assert objective.proposal[ids[token]].item() == pytest.approx(n / 10)


@pytest.mark.parametrize("mode", ["blank", "unigram", "bigram-kn"])
def test_empirical_noise_rate_matches_gamma(mode: str) -> None:
    torch.manual_seed(1)
    corpus, _, objective = setup(gamma0=0.6, mode=mode)
    vocab_size = len(corpus.vocab)
    inputs = torch.arange(vocab_size).repeat(1, 20000)  # (1, 20000 V)
    targets = torch.randint(0, vocab_size, inputs.shape)
    noised_inputs, noised_targets, drawn = objective.noise(inputs, targets)
    for token in range(vocab_size):
        at = inputs == token
        rate, gamma = drawn[at].float().mean().item(), objective.gamma[token].item()
        assert rate == pytest.approx(gamma, abs=4 * (gamma * (1 - gamma) / at.sum().item()) ** 0.5 + 1e-9)
    assert torch.equal(noised_inputs[~drawn], inputs[~drawn]) and torch.equal(noised_targets[~drawn], targets[~drawn])
    replaced = noised_inputs[drawn]
    if mode == "blank":
        assert (replaced == corpus.vocab.stoi["<_>"]).all() and "<_>" not in TEXT  # a token of its own
        assert torch.equal(noised_targets, targets)
    else:
        frequency = torch.bincount(replaced, minlength=vocab_size).float() / len(replaced)
        assert torch.allclose(frequency, objective.proposal, atol=0.01)
        targets_noised = not torch.equal(noised_targets, targets)
        assert targets_noised == (mode == "bigram-kn")  # Xie et al.: KN noising swaps targets as well


def test_noising_trains_through_the_model_and_keeps_padding() -> None:
    torch.manual_seed(2)
    corpus, model, objective = setup(gamma0=1.0, mode="unigram", noise_targets=True, schedule="constant")
    inputs = torch.randint(0, len(corpus.vocab), (4, 6))
    targets = torch.randint(0, len(corpus.vocab), (4, 6))
    targets[:, -1] = -100
    _, noised_targets, drawn = objective.noise(inputs, targets)
    assert drawn[:, :-1].all() and not drawn[:, -1].any() and (noised_targets[:, -1] == -100).all()
    batch = objective.transform_batch(Batch(inputs=inputs, targets=targets))
    assert not torch.equal(batch.inputs, inputs) and (batch.targets[:, -1] == -100).all()
    terms = objective(model, batch, model(batch.inputs))
    assert terms.tokens == 20 and terms.metrics["noised_fraction"] == 1.0
    terms.losses["noising"].backward()
    assert model.embedding.weight.grad is not None


def test_bad_settings_are_user_errors() -> None:
    with pytest.raises(InfolmError, match="mode"):
        NoisingConfig(mode="trigram")
    with pytest.raises(InfolmError, match="gamma0"):
        NoisingConfig(gamma0=1.5)
    with pytest.raises(InfolmError, match="blank"):
        NoisingConfig(mode="blank", noise_targets=True)
    with pytest.raises(InfolmError, match="extra_tokens"):
        corpus = Corpus.from_texts("toy", "word", {"train": "a b\n<unk> b\n"})  # <unk> is a word, not a blank
        objective = Noising(NoisingConfig(mode="blank"))
        objective.setup(corpus, TinyLM(len(corpus.vocab)))


def test_kneser_ney_missing_mass_and_schedule() -> None:
    """nu(x) = (D1 N1(x, .) + D2 N2(x, .) + D3+ N3+(x, .)) / c(x) (IMM App. B: gamma = gamma0 nu)."""
    from infolm.ngram import count_ngrams
    from infolm.ngram.smoothing import estimate_discounts
    from infolm.objectives.noising import kneser_ney_missing_mass

    nu = kneser_ney_missing_mass(torch.tensor([0, 0, 0, 1]), torch.tensor([1, 3, 5, 2]), (0.5, 1.0, 1.5), 3)
    assert torch.allclose(nu, torch.tensor([(0.5 + 1.5 + 1.5) / 9, 1.0 / 2, 0.0]))
    corpus, _, objective = setup(gamma0=0.6, schedule="kneser-ney")
    counts = count_ngrams(corpus.stream("train"), len(corpus.vocab), 2)
    discounts, _ = estimate_discounts(counts.raw(2), "modified-kn")
    ids = corpus.vocab.stoi
    # following a: b twice, c once, E once (c(a) = 4): nu(a) = (D2 + 2 D1) / 4
    assert objective.gamma[ids["a"]].item() == pytest.approx(0.6 * (discounts[1] + 2 * discounts[0]) / 4)


def test_the_trainer_runs_the_model_once_per_step_on_the_noised_batch(tmp_path, monkeypatch) -> None:
    """No wasted clean pass: one training forward per step, and its (noised) state is the one carried."""
    from infolm.build import train
    from infolm.config import load_config
    from infolm.models.lstm import LSTMLM
    from infolm.training.trainer import Trainer
    from tests.conftest import ROOT

    calls = {"train": 0, "steps": 0}
    forward, step = LSTMLM.forward, Trainer.train_step

    def counted_forward(self: LSTMLM, tokens: Tensor, state: object = None) -> LMOutput:
        calls["train"] += int(self.training)
        return forward(self, tokens, state)

    def counted_step(self: Trainer, batch: Batch) -> dict[str, float]:
        calls["steps"] += 1
        values = step(self, batch)
        assert self.objective.term("noising")._noised_fraction > 0
        return values

    monkeypatch.setattr(LSTMLM, "forward", counted_forward)
    monkeypatch.setattr(Trainer, "train_step", counted_step)
    overrides = [f"run.dir={tmp_path}", "train.max_steps=4", "objective={noising: {gamma0: 0.5}}"]
    train(load_config(ROOT / "configs/tiny.yaml", overrides), overrides)
    assert calls == {"train": 4, "steps": 4}
