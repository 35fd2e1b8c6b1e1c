"""Sentence and segment pairs: batches reproduce the corpus, samplers have the stated distributions."""

from __future__ import annotations

import math

import pytest
import torch

from infolm.data.corpus import Corpus
from infolm.data.pairs import SentenceIndex, concat_padded, segment_pairs, truncated_geometric
from infolm.errors import InfolmError

TEXT = "a b c\nd e\nf g h i j\nk\nl m n\no p\n"


def corpus() -> Corpus:
    return Corpus.from_texts("toy", "word", {"train": TEXT})


def test_batch_reproduces_sentences_with_padding() -> None:
    c = corpus()
    index = SentenceIndex.from_corpus(c, "train")
    assert len(index) == c.num_sentences("train") == 6
    ids = torch.tensor([2, 0, 3, 5])
    tokens, lengths = index.batch(ids)
    for row, i in enumerate(ids.tolist()):
        sentence = c.sentence("train", i)
        assert lengths[row] == len(sentence)
        assert torch.equal(tokens[row, : len(sentence)], sentence)
        assert (tokens[row, len(sentence) :] == index.pad_id).all()


def test_max_len_cuts_long_sentences() -> None:
    index = SentenceIndex.from_corpus(corpus(), "train", max_len=3)
    tokens, lengths = index.batch(torch.arange(6))
    assert lengths.max() == 3 and tokens.shape == (6, 3)


def test_positive_pairs_are_consecutive_and_negatives_cover_the_corpus() -> None:
    index = SentenceIndex.from_corpus(corpus(), "train")
    g = torch.Generator().manual_seed(0)
    x, y = index.sample_positive(1000, g)
    assert torch.equal(y, x + 1) and x.max() == len(index) - 2 and x.min() == 0
    neg = index.sample_negative(6000, g)
    counts = torch.bincount(neg, minlength=6).float()
    assert counts.min() > 800 and counts.max() < 1200


def test_truncated_geometric_matches_its_log_probabilities() -> None:
    g = torch.Generator().manual_seed(1)
    size, lam, n = 8, 0.3, 200_000
    targets = torch.full((n,), 5)  # offsets 0, 1, 2 admissible
    k, log_prob = truncated_geometric(targets, size, lam, g)
    assert k.min() == 5 and k.max() == 7
    expected = torch.tensor([(1 - lam) ** j * lam for j in range(3)])
    expected /= expected.sum()
    freq = torch.bincount(k - 5, minlength=3).double() / n
    torch.testing.assert_close(freq, expected.double(), atol=5e-3, rtol=0)
    for j in range(3):
        assert math.isclose(float(log_prob[k == 5 + j][0]), math.log(expected[j]), rel_tol=1e-5)
    # far from the end the proposal is the plain geometric (1 - lam)^j lam of Eq. 15
    k, log_prob = truncated_geometric(torch.zeros(4, dtype=torch.long), 10_000, lam, g)
    torch.testing.assert_close(log_prob.double(), k.double() * math.log(1 - lam) + math.log(lam))


def test_concat_padded_joins_rows() -> None:
    a = torch.tensor([[1, 2, 0], [3, 0, 0]])
    b = torch.tensor([[4, 0], [5, 6]])
    tokens, lengths = concat_padded(a, torch.tensor([2, 1]), b, torch.tensor([1, 2]))
    assert tokens.tolist() == [[1, 2, 4], [3, 5, 6]] and lengths.tolist() == [3, 3]
    tokens, lengths = concat_padded(a, torch.tensor([3, 1]), b, torch.tensor([1, 1]))
    assert tokens.tolist() == [[1, 2, 0, 4], [3, 5, 0, 0]] and lengths.tolist() == [4, 2]


def test_segment_pairs_layout() -> None:
    stream = torch.arange(300)
    x, y = segment_pairs(stream, seg_len=40, gap=10)
    assert x.shape == (3, 40)
    assert torch.equal(y - x, torch.full_like(x, 50))  # Y starts seg_len + gap after X
    assert torch.equal(x[1, 0:1], torch.tensor([90]))  # disjoint pairs by default
    with pytest.raises(InfolmError):
        segment_pairs(torch.arange(50), seg_len=40, gap=10)
