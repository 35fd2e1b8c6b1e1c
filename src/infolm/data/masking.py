"""Masking for masked-language-model pretraining: BERT's token masking and InfoWord's span masking.

* Token masking (Devlin et al.): ``round(15%)`` of a sequence's maskable subwords, chosen uniformly.
* Span masking (Kong et al. Sec. 5.2, after SpanBERT): repeatedly draw an n-gram length
  n ~ N(5, 1) rounded and clipped to 1..10 *words* and an unmasked start word uniformly; mask the
  n words (all their subwords) until 15% of the *subwords* are masked. Where the paper is silent:
  a span stops early at the sequence end, at an already masked word, at an unmaskable position
  (the [SEP] between two sentences), or when the budget is reached (checked after each whole word,
  so the last word may overshoot the budget by its extra subwords).
* Replacement (Devlin et al.): each masked subword becomes [MASK] with probability 0.8, a random
  subword with 0.1 and stays itself with 0.1. Random subwords are drawn uniformly from the
  non-special types (BERT draws from the whole vocabulary; the five specials are left out here).
  This is MLM's input only: the DIM query masks every span subword (``objectives.dim.query_inputs``).

Randomness comes from a ``numpy.random.Generator`` the caller owns (a resumable data order seeds it).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import Tensor

IGNORE_INDEX = -100
SPAN_IDS = "span_ids"  # Batch.extras key: (B, T) int64, k at the k-th masked span of a row, -1 elsewhere
MLM_INPUTS = "mlm_inputs"  # Batch.extras key: (B, T) masked copy of unmasked inputs (MLM beside a task loss)
WORD_STARTS = "word_starts"  # Batch.extras key: (B, T) bool, True at a word's first subword (NSP's negatives)


@dataclasses.dataclass
class SpanLaw:
    mean: float = 5.0  # mean span length in words (InfoWord Sec. 5.2: N(5, 1))
    std: float = 1.0  # standard deviation of the span length
    low: int = 1  # shortest span in words (clip, Sec. 5.2)
    high: int = 10  # longest span in words (clip, Sec. 5.2)


@dataclasses.dataclass
class MaskedTokens:
    inputs: Tensor  # (B, T) ids after replacement (what the encoder reads)
    targets: Tensor  # (B, T) original ids at masked positions, IGNORE_INDEX elsewhere
    masked: Tensor  # (B, T) bool, True at masked positions
    spans: Tensor  # (S, 3) int64 rows of (sequence, start, end): masked n-grams [start, end) (span masking)


def budget(count: Tensor | np.ndarray, rate: float) -> np.ndarray:
    """Subwords to mask in sequences of ``count`` maskable subwords: max(1, round(rate * count))."""
    counts = np.asarray(count, dtype=np.float64)
    return np.maximum(1, np.floor(rate * counts + 0.5)).astype(np.int64) * (counts > 0)


def token_mask(maskable: Tensor, rate: float, rng: np.random.Generator) -> Tensor:
    """BERT's choice of positions: ``budget`` maskable positions per row, uniformly. (B, T) bool."""
    keys = torch.from_numpy(rng.random(tuple(maskable.shape)))
    keys = keys.masked_fill(~maskable, 2.0)  # unmaskable positions sort last
    ranks = keys.argsort(dim=1).argsort(dim=1)  # (B, T) rank of each position's key in its row
    quota = torch.from_numpy(budget(maskable.sum(1).numpy(), rate))  # (B,)
    return (ranks < quota[:, None]) & maskable


def sample_span_lengths(count: int, rng: np.random.Generator, law: SpanLaw | None = None) -> np.ndarray:
    """``count`` span lengths in words: round(N(mean, std)) clipped to [low, high]. (count,) int64."""
    law = law or SpanLaw()
    draws = np.rint(rng.normal(law.mean, law.std, size=count))
    return np.clip(draws, law.low, law.high).astype(np.int64)


def span_mask_row(
    word_of: np.ndarray,
    quota: int,
    rng: np.random.Generator,
    law: SpanLaw | None = None,
    barrier: np.ndarray | None = None,
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Span masking of one sequence of maskable subwords.

    ``word_of`` (n,) is the word index of each subword (0, 0, 1, 2, 2, ...); ``barrier`` (words,) marks
    words a span may start at but not run into (after a [SEP]). Returns the mask (n,) and the masked
    spans as subword ranges [start, end).
    """
    n = len(word_of)
    masked_words: list[tuple[int, int]] = []
    if n == 0 or quota <= 0:
        return np.zeros(n, dtype=bool), masked_words
    num_words = int(word_of[-1]) + 1
    word_start = np.searchsorted(word_of, np.arange(num_words + 1))  # subword offset of each word, then n
    taken = np.zeros(num_words, dtype=bool)
    count = 0
    spans: list[tuple[int, int]] = []
    while count < quota and not taken.all():
        length = int(sample_span_lengths(1, rng, law)[0])
        free = np.flatnonzero(~taken)
        first = int(free[rng.integers(len(free))])
        end = first
        while (
            end < min(first + length, num_words)
            and not taken[end]
            and count < quota
            and (end == first or barrier is None or not barrier[end])
        ):
            taken[end] = True
            count += int(word_start[end + 1] - word_start[end])
            end += 1
        spans.append((int(word_start[first]), int(word_start[end])))
    return taken[word_of], spans


def span_mask(maskable: Tensor, word_start: Tensor, rate: float, rng: np.random.Generator, law: SpanLaw | None = None):
    """Span masking of a batch. ``word_start`` (B, T) is True at the first subword of each word.

    Returns the mask (B, T) bool and the spans (S, 3) as (row, start, end) in absolute positions.
    """
    masked = torch.zeros_like(maskable)
    rows: list[tuple[int, int, int]] = []
    quotas = budget(maskable.sum(1).numpy(), rate)
    for row in range(maskable.size(0)):
        positions = torch.nonzero(maskable[row]).squeeze(1)  # (n,)
        if positions.numel() == 0:
            continue
        starts = word_start[row, positions].clone()
        gap = torch.ones_like(starts)
        gap[1:] = positions[1:] != positions[:-1] + 1  # an unmaskable position ([SEP]) lies before it
        starts |= gap  # a sequence never starts inside a word, a [SEP] ends one
        word_of = (starts.long().cumsum(0) - 1).numpy()
        barrier = gap[starts].numpy()  # per word: does it follow a gap
        row_mask, spans = span_mask_row(word_of, int(quotas[row]), rng, law, barrier)
        masked[row, positions] = torch.from_numpy(row_mask)
        index = positions.numpy()
        for start, end in spans:
            rows.append((row, int(index[start]), int(index[end - 1]) + 1))
    spans_tensor = torch.tensor(rows, dtype=torch.long).reshape(-1, 3)
    return masked, spans_tensor


def span_ids(spans: Tensor, shape: tuple[int, int]) -> Tensor:
    """(B, T) int64: k at the positions of row b's k-th span in ``spans`` (S, 3), -1 elsewhere."""
    out = torch.full(shape, -1, dtype=torch.long)
    if spans.numel() == 0:
        return out
    rows = spans[:, 0]
    first_of_row = torch.ones_like(rows, dtype=torch.bool)
    first_of_row[1:] = rows[1:] != rows[:-1]
    group_start = torch.nonzero(first_of_row).squeeze(1)  # spans are listed row by row
    rank = torch.arange(len(rows)) - group_start[first_of_row.long().cumsum(0) - 1]  # k within its row
    for (row, start, end), k in zip(spans.tolist(), rank.tolist()):
        out[row, start:end] = k
    return out


def token_span_ids(masked: Tensor) -> Tensor:
    """Token masking's n-grams: each masked position is its own span (k-th masked position of a row)."""
    ranks = masked.long().cumsum(1) - 1
    return torch.where(masked, ranks, torch.full_like(ranks, -1))


def replace_masked(
    tokens: Tensor,
    masked: Tensor,
    mask_id: int,
    vocab_size: int,
    rng: np.random.Generator,
    first_regular: int = 5,
    probs: tuple[float, float] = (0.8, 0.1),
) -> Tensor:
    """BERT's 80/10/10: [MASK] with probs[0], a random regular subword with probs[1], else unchanged."""
    u = torch.from_numpy(rng.random(tuple(tokens.shape)))
    random_ids = torch.from_numpy(rng.integers(first_regular, vocab_size, size=tuple(tokens.shape)))
    out = tokens.clone()
    out = torch.where(masked & (u < probs[0]), torch.full_like(tokens, mask_id), out)
    return torch.where(masked & (u >= probs[0]) & (u < probs[0] + probs[1]), random_ids, out)


def mask_batch(
    tokens: Tensor,
    maskable: Tensor,
    word_start: Tensor,
    scheme: str,
    mask_id: int,
    vocab_size: int,
    rng: np.random.Generator,
    rate: float = 0.15,
    law: SpanLaw | None = None,
    first_regular: int = 5,
    probs: tuple[float, float] = (0.8, 0.1),
) -> MaskedTokens:
    """Choose positions (``scheme``: token | span), replace them 80/10/10, and keep the targets."""
    if scheme == "token":
        masked = token_mask(maskable, rate, rng)
        spans = torch.zeros(0, 3, dtype=torch.long)
    elif scheme == "span":
        masked, spans = span_mask(maskable, word_start, rate, rng, law)
    else:
        raise ValueError(f"unknown masking scheme {scheme!r}")
    inputs = replace_masked(tokens, masked, mask_id, vocab_size, rng, first_regular, probs)
    targets = tokens.masked_fill(~masked, IGNORE_INDEX)
    return MaskedTokens(inputs=inputs, targets=targets, masked=masked, spans=spans)
