"""BLEU-1 of reconstructions against values computed by hand."""

from __future__ import annotations

import math

import pytest

from infolm.errors import InfolmError
from infolm.evaluation.bleu import bleu1


def test_clipped_unigram_precision_and_brevity_penalty_by_hand() -> None:
    # "the" appears 3 times in the hypothesis and twice in the reference: 2 clipped matches of 3;
    # hypothesis 3 words, reference 6: brevity penalty exp(1 - 6/3) = e^-1
    score = bleu1([["the", "the", "the"]], [["the", "cat", "is", "on", "the", "mat"]])
    assert math.isclose(score.precision, 2 / 3, rel_tol=1e-9)
    assert math.isclose(score.brevity_penalty, math.exp(-1), rel_tol=1e-9)
    assert math.isclose(score.bleu, 2 / 3 * math.exp(-1), rel_tol=1e-9)


def test_corpus_pools_counts_and_sentence_averages() -> None:
    hyps = [["a", "b", "<eos>"], ["c", "d", "e", "f", "<eos>"]]
    refs = [["a", "b", "c"], ["c", "d", "e", "f"]]
    corpus = bleu1(hyps, refs)
    # 6 of 6 unigrams match; lengths 6 against 7: BP = exp(1 - 7/6); <eos> is not a word
    assert math.isclose(corpus.precision, 1.0)
    assert math.isclose(corpus.bleu, math.exp(1 - 7 / 6), rel_tol=1e-9)
    sentence = bleu1(hyps, refs, mode="sentence")
    # per sentence: exp(1 - 3/2) * 1 and 1 * 1, averaged
    assert math.isclose(sentence.bleu, (math.exp(1 - 3 / 2) + 1.0) / 2, rel_tol=1e-9)


def test_perfect_and_disjoint_reconstructions() -> None:
    refs = [["there", "was", "no", "panic"]]
    assert math.isclose(bleu1(refs, refs).bleu, 1.0)
    assert bleu1([["x", "y", "z", "w"]], refs).bleu == 0.0
    assert bleu1([[]], refs).bleu == 0.0


def test_bad_input_is_one_clear_error() -> None:
    with pytest.raises(InfolmError, match="one reference per hypothesis"):
        bleu1([["a"]], [])
    with pytest.raises(InfolmError, match="corpus or sentence"):
        bleu1([["a"]], [["a"]], mode="token")


def test_the_authors_protocol_keeps_eos_as_a_word() -> None:
    """The authors' test script scores ``<eos>`` as a token on both sides: "the cat <eos>" against "the cat
    sat <eos>" has precision 1 and brevity penalty exp(1 - 4/3); without ``<eos>``, exp(1 - 3/2)."""
    hyp, ref = [["the", "cat", "<eos>"]], [["the", "cat", "sat", "<eos>"]]
    assert math.isclose(bleu1(hyp, ref, mode="sentence", keep_eos=True).bleu, math.exp(1 - 4 / 3), rel_tol=1e-6)
    assert math.isclose(bleu1(hyp, ref, mode="sentence").bleu, math.exp(1 - 3 / 2), rel_tol=1e-6)
