"""Induced n-gram evaluation: identities against brute force and against a model that is itself a bigram."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from infolm.data.corpus import Corpus
from infolm.errors import InfolmError
from infolm.evaluation.induced import (
    induced_ngram,
    induced_ngram_perplexity,
    induced_ngram_report,
    split_contexts,
)
from infolm.models.base import LanguageModel, LMOutput


def make_corpus(seed: int = 0) -> Corpus:
    rng = random.Random(seed)
    words = ["a", "b", "c", "d", "e", "f", "g", "h"]

    def text(lines: int) -> str:
        return "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(2, 7))) for _ in range(lines))

    return Corpus.from_texts("toy", "word", {"train": text(60), "valid": text(15), "test": text(15)})


class TinyLSTM(LanguageModel):
    def __init__(self, vocab_size: int, hidden: int = 8) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, hidden)
        self.rnn = nn.LSTM(hidden, hidden, batch_first=True)
        self.drop = nn.Dropout(0.5)
        self.decoder = nn.Linear(hidden, vocab_size)

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> Any:
        zeros = torch.zeros(1, batch_size, self.rnn.hidden_size, device=device)
        return [(zeros, zeros.clone())]

    def forward(self, tokens: Tensor, state: Any = None) -> LMOutput:
        state = self.init_state(tokens.size(0), tokens.device) if state is None else state
        x, new_state = self.rnn(self.drop(self.embedding(tokens)), state[0])
        return LMOutput(logits=self.decoder(self.drop(x)), hiddens=[x], state=[new_state])


class BigramNet(LanguageModel):
    """A model whose prediction depends on the current token only: its induced bigram is itself."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.table = nn.Parameter(torch.randn(vocab_size, vocab_size))

    def forward(self, tokens: Tensor, state: Any = None) -> LMOutput:
        return LMOutput(logits=self.table[tokens], hiddens=[])


class AddOneBigram:
    def __init__(self, stream: Tensor, vocab_size: int) -> None:
        counts = torch.ones(vocab_size, vocab_size, dtype=torch.float64)
        counts.index_put_((stream[:-1], stream[1:]), torch.ones(len(stream) - 1, dtype=torch.float64), accumulate=True)
        self.table = (counts / counts.sum(1, keepdim=True)).float()

    def next_token_distribution(self, contexts: Tensor) -> Tensor:
        return self.table[contexts[:, -1]]


def brute_force_induced_ppl(model: nn.Module, corpus: Corpus, split: str, order: int) -> float:
    """Q̂ by a Python loop over one full-history pass of the training stream (batch of one row)."""
    eos, length = corpus.vocab.eos_id, order - 1
    train = corpus.stream("train")
    history = torch.cat([torch.tensor([eos]), train[:-1]])  # input before each training token
    model.eval()
    with torch.no_grad():
        probs = torch.softmax(model(history[None]).logits[0], -1)  # (N, V)
    sums: dict[tuple[int, ...], Tensor] = {}
    counts: dict[tuple[int, ...], int] = {}
    train_contexts = split_contexts(train, eos, length)
    for position, context in enumerate(map(tuple, train_contexts.tolist())):
        sums[context] = sums.get(context, 0) + probs[position]
        counts[context] = counts.get(context, 0) + 1
    stream = corpus.stream(split)
    total = 0.0
    for context, token in zip(map(tuple, split_contexts(stream, eos, length).tolist()), stream.tolist()):
        total += math.log(float(sums[context][token]) / counts[context])
    return math.exp(-total / len(stream))


@pytest.mark.parametrize("order", [2, 3])
def test_induced_perplexity_equals_brute_force(order: int) -> None:
    corpus = make_corpus()
    torch.manual_seed(0)
    model = TinyLSTM(len(corpus.vocab))
    expected = brute_force_induced_ppl(model, corpus, "train", order)
    model.train()
    got = induced_ngram_perplexity(model, corpus, "train", order=order, batch_size=1, bptt=7)
    assert model.training  # mode restored
    assert math.isclose(got, expected, rel_tol=1e-5)


def test_induced_table_rows_sum_to_one_and_fallback_is_the_short_context_alone() -> None:
    corpus = make_corpus()
    torch.manual_seed(1)
    model = TinyLSTM(len(corpus.vocab)).eval()
    table = induced_ngram(model, corpus, 2, batch_size=4, bptt=5, max_train_tokens=12)  # a few contexts only
    assert torch.allclose(table.probs.sum(-1), torch.ones(len(table.keys)), atol=1e-5)
    unseen = torch.nonzero(table.counts == 0).squeeze(1)
    assert 0 < len(unseen) < len(table.keys)
    with torch.no_grad():
        alone = torch.softmax(model(torch.from_numpy(table.contexts[unseen.numpy()])).logits[:, -1], -1)
    assert torch.allclose(table.probs[unseen], alone, atol=1e-6)
    assert int(table.counts.sum()) <= 12


def test_induced_bigram_of_a_bigram_model_is_the_model() -> None:
    corpus = make_corpus()
    torch.manual_seed(2)
    model = BigramNet(len(corpus.vocab))
    for split in ("train", "valid"):
        stream = corpus.stream(split)
        previous = torch.cat([torch.tensor([corpus.vocab.eos_id]), stream[:-1]])
        with torch.no_grad():
            own = torch.log_softmax(model.table[previous], -1)[torch.arange(len(stream)), stream]
        expected = math.exp(-float(own.double().mean()))
        got = induced_ngram_perplexity(model, corpus, split, batch_size=3, bptt=4)
        assert math.isclose(got, expected, rel_tol=1e-5)


def test_report_gives_induced_and_restricted_perplexity_per_split() -> None:
    corpus = make_corpus()
    torch.manual_seed(3)
    model = TinyLSTM(len(corpus.vocab))
    restricted = AddOneBigram(corpus.stream("train"), len(corpus.vocab))
    report = induced_ngram_report(model, corpus, 2, restricted=restricted, batch_size=2, bptt=6)
    assert set(report) == {"train", "valid", "test"}
    for split, numbers in report.items():
        stream = corpus.stream(split)
        previous = torch.cat([torch.tensor([corpus.vocab.eos_id]), stream[:-1]])
        kn = restricted.table[previous, stream].double().log().mean()
        assert math.isclose(numbers["kn_ppl"], math.exp(-float(kn)), rel_tol=1e-6)
        assert numbers["tokens"] == len(stream)
        assert 1.0 < numbers["induced_ppl"] < 2 * len(corpus.vocab)


def test_report_with_kneser_ney_matches_its_own_perplexity() -> None:
    pytest.importorskip("infolm.ngram")
    from infolm.ngram import build_ngram

    corpus = make_corpus()
    model = BigramNet(len(corpus.vocab))
    report = induced_ngram_report(model, corpus, 2, splits=("valid",), batch_size=2)
    kn = build_ngram(corpus.stream("train"), len(corpus.vocab), 2, history_id=corpus.vocab.eos_id)
    assert math.isclose(report["valid"]["kn_ppl"], kn.perplexity(corpus.stream("valid")), rel_tol=1e-5)


def test_split_contexts_and_bad_order() -> None:
    contexts = split_contexts(torch.tensor([5, 6, 7]), eos_id=0, length=2)
    assert np.array_equal(contexts, [[0, 0], [0, 5], [5, 6]])
    with pytest.raises(InfolmError, match="order"):
        induced_ngram(BigramNet(3), make_corpus(), order=1)
