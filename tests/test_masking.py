"""Token masking (15%, 80/10/10) and InfoWord span masking (N(5, 1) clipped to 1..10 words, 15% budget)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from infolm.data.masking import (
    IGNORE_INDEX,
    SpanLaw,
    budget,
    mask_batch,
    replace_masked,
    sample_span_lengths,
    span_mask,
    token_mask,
)


def clipped_rounded_normal(law: SpanLaw) -> np.ndarray:
    """P(n = k) for k = low..high of round(N(mean, std)) clipped to [low, high]."""
    cdf = [0.5 * (1 + math.erf((x - law.mean) / (law.std * math.sqrt(2)))) for x in np.arange(law.low, law.high) + 0.5]
    edges = np.array([0.0, *cdf, 1.0])
    return np.diff(edges)


def assert_follows(lengths: np.ndarray, law: SpanLaw) -> None:
    expected = clipped_rounded_normal(law)
    observed = np.bincount(lengths - law.low, minlength=law.high - law.low + 1) / len(lengths)
    assert observed.shape == expected.shape
    tolerance = 4 * np.sqrt(expected * (1 - expected) / len(lengths)) + 1e-4
    assert np.all(np.abs(observed - expected) <= tolerance), (observed, expected)


@pytest.mark.parametrize("std", [1.0, 3.0])
def test_span_lengths_follow_the_clipped_rounded_normal(std):
    law = SpanLaw(std=std)
    lengths = sample_span_lengths(200_000, np.random.default_rng(0), law)
    assert lengths.min() >= 1 and lengths.max() <= 10
    assert_follows(lengths, law)


def test_realized_spans_follow_the_length_law():
    """A row's first span meets no masked word; away from the end it has exactly the drawn length."""
    rng = np.random.default_rng(1)
    rows, words = 4000, 200
    maskable = torch.ones(rows, words, dtype=torch.bool)
    _, spans = span_mask(maskable, torch.ones_like(maskable), 0.15, rng)
    first = np.unique(spans[:, 0].numpy(), return_index=True)[1]
    starts, ends = spans[first, 1].numpy(), spans[first, 2].numpy()
    away = starts <= words - 10
    assert away.sum() > 3800
    assert_follows(ends[away] - starts[away], SpanLaw())


def word_pieces(rng: np.random.Generator, rows: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch layout [CLS] subwords [SEP] [PAD]...: maskable positions and word starts (1-3 pieces/word)."""
    maskable = torch.zeros(rows, length, dtype=torch.bool)
    word_start = torch.zeros(rows, length, dtype=torch.bool)
    for row in range(rows):
        n = int(rng.integers(5, length - 1))
        maskable[row, 1 : n + 1] = True
        position = 1
        while position <= n:
            word_start[row, position] = True
            position += int(rng.integers(1, 4))
    return maskable, word_start


def test_span_masking_keeps_the_budget_and_masks_whole_words():
    rng = np.random.default_rng(2)
    maskable, word_start = word_pieces(rng, 300, 60)
    masked, spans = span_mask(maskable, word_start, 0.15, rng)
    quota = torch.from_numpy(budget(maskable.sum(1).numpy(), 0.15))
    count = masked.sum(1)
    assert bool((count >= quota).all()) and bool((count <= quota + 2).all())  # overshoot < one word (<= 3 pieces)
    assert not bool((masked & ~maskable).any())
    rebuilt = torch.zeros_like(masked)
    for row, start, end in spans.tolist():
        assert word_start[row, start]  # a span starts at a word ...
        assert end == maskable.size(1) or not maskable[row, end] or word_start[row, end]  # ... and ends at one
        assert not rebuilt[row, start:end].any()  # spans do not overlap
        rebuilt[row, start:end] = True
    assert torch.equal(rebuilt, masked)


def test_spans_do_not_cross_an_unmaskable_position():
    rng = np.random.default_rng(7)
    maskable = torch.ones(400, 30, dtype=torch.bool)
    maskable[:, [0, 12, 29]] = False  # [CLS] A [SEP] B [SEP]
    masked, spans = span_mask(maskable, maskable.clone(), 0.5, rng)
    for row, start, end in spans.tolist():
        assert bool(maskable[row, start:end].all())
    assert not bool(masked[:, 12].any())


def test_span_masking_with_one_piece_words_masks_exactly_the_budget():
    rng = np.random.default_rng(3)
    maskable = torch.ones(50, 100, dtype=torch.bool)
    masked, _ = span_mask(maskable, maskable.clone(), 0.15, rng)
    assert bool((masked.sum(1) == 15).all())


def test_token_masking_masks_the_budget_of_each_row():
    rng = np.random.default_rng(4)
    maskable, _ = word_pieces(rng, 200, 40)
    masked = token_mask(maskable, 0.15, rng)
    assert torch.equal(masked.sum(1), torch.from_numpy(budget(maskable.sum(1).numpy(), 0.15)))
    assert not bool((masked & ~maskable).any())


def test_replacement_is_80_10_10():
    rng = np.random.default_rng(5)
    tokens = torch.from_numpy(rng.integers(5, 1000, size=(400, 250)))
    masked = torch.ones_like(tokens, dtype=torch.bool)
    masked[:, ::2] = False
    out = replace_masked(tokens, masked, mask_id=4, vocab_size=1000, rng=rng)
    assert torch.equal(out[~masked], tokens[~masked])
    n = int(masked.sum())
    as_mask = float((out[masked] == 4).sum()) / n
    kept = float((out[masked] == tokens[masked]).sum()) / n  # includes random draws equal to the original (0.1%)
    assert abs(as_mask - 0.8) < 0.005 and abs(kept - 0.1 - 0.1 / 995) < 0.004
    assert int(out.min()) >= 4


def test_mask_batch_targets_only_masked_positions():
    rng = np.random.default_rng(6)
    maskable, word_start = word_pieces(rng, 20, 30)
    tokens = torch.from_numpy(rng.integers(5, 50, size=(20, 30)))
    for scheme in ("token", "span"):
        out = mask_batch(tokens, maskable, word_start, scheme, mask_id=4, vocab_size=50, rng=rng)
        assert torch.equal(out.targets[out.masked], tokens[out.masked])
        assert bool((out.targets[~out.masked] == IGNORE_INDEX).all())
