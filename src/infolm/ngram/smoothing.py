"""Interpolated Kneser-Ney (modified and plain) and absolute discounting, built from counts.

Chen & Goodman (1999), interpolated form, for every order k from 1 to n::

    P_k(w | h) = max(a(hw) - D(a(hw)), 0) / a(h.)  +  gamma(h) * P_{k-1}(w | h'),
    gamma(h)   = sum_w min(D(a(hw)), a(hw)) / a(h.),           P_0(w) = 1 / V,

where ``a`` is the raw count at the highest order and, for Kneser-Ney, the continuation count
``N1+(. h w)`` at lower orders (absolute discounting keeps raw counts at every order). Modified
KN uses three discounts per order, ``D1, D2, D3+``, estimated from the counts-of-counts
``n1..n4`` of ``a`` (Chen & Goodman Eq. 26); plain KN and absolute discounting one,
``D = n1 / (n1 + 2 n2)``. Histories never followed by a token back off with weight 1.

The interpolated model equals the backoff model with ``prob(hw) = P_k(w | h)`` for every seen
n-gram and ``backoff(h) = gamma(h)``, which is how it is stored (:class:`NgramModel`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from infolm.errors import InfolmError
from infolm.ngram.counts import NgramCounts
from infolm.ngram.model import BackoffTable, NgramModel

METHODS = ("modified-kn", "kn", "absolute")
FALLBACK = (0.5, 1.0, 1.5)  # KenLM's --discount_fallback defaults, for counts-of-counts that cannot estimate D


def estimate_discounts(counts: np.ndarray, method: str) -> tuple[tuple[float, float, float], bool]:
    """``((D1, D2, D3+), used_fallback)`` from the positive counts of one order.

    Modified KN (Chen & Goodman Eq. 26): ``Y = n1/(n1+2 n2)``, ``D_c = c - (c+1) Y n_{c+1}/n_c``.
    Plain KN and absolute discounting: one discount ``Y`` for every count.
    """
    n = [int(np.count_nonzero(counts == c)) for c in range(1, 5)]
    if n[0] == 0 or n[1] == 0:
        return (FALLBACK if method == "modified-kn" else (FALLBACK[0],) * 3), True
    y = n[0] / (n[0] + 2 * n[1])
    if method != "modified-kn":
        return (y, y, y), False
    if n[2] == 0 or n[3] == 0:
        return FALLBACK, True
    d = tuple(c - (c + 1) * y * n[c] / n[c - 1] for c in (1, 2, 3))
    if not all(0.0 < d[c - 1] <= c for c in (1, 2, 3)):
        return FALLBACK, True
    return (float(d[0]), float(d[1]), float(d[2])), False


def build_ngram(
    stream: Any,
    vocab_size: int,
    order: int,
    method: str = "modified-kn",
    history_id: int | None = 0,
) -> NgramModel:
    """Estimate an n-gram model of ``order`` from a 1-D stream of token ids (numpy or torch).

    ``method``: ``modified-kn`` (three discounts per order), ``kn`` (one discount per order) or
    ``absolute`` (one discount, raw counts at every order); all interpolate down to the uniform
    distribution over the ``vocab_size`` ids. ``history_id`` is the token assumed before the stream
    (``<eos>``, id 0 in infolm vocabularies; None: no history), used when counting and scoring.
    """
    if method not in METHODS:
        raise InfolmError(f"n-gram method must be one of {', '.join(METHODS)}; got {method!r}")
    counts = NgramCounts(stream, vocab_size, order, history_id)
    return smooth(counts, method)


def smooth(counts: NgramCounts, method: str) -> NgramModel:
    """The interpolated model of ``method`` over ``counts``, in backoff form."""
    vocab = counts.vocab_size
    tables: list[BackoffTable] = []
    discounts: list[tuple[float, float, float]] = []
    fallbacks: list[int] = []
    lower_prob = np.full(1, 1.0 / vocab)  # P_0: uniform
    for k in range(1, counts.order + 1):
        if k == counts.order or method == "absolute":
            adjusted = counts.raw(k)
        else:
            adjusted = counts.continuation(k)  # N1+(. w_1..w_k)
        (d1, d2, d3), fallback = estimate_discounts(adjusted[adjusted > 0], method)
        discounts.append((d1, d2, d3))
        if fallback:
            fallbacks.append(k)
        adjusted = adjusted.astype(np.float64)
        discount = np.where(adjusted >= 3, d3, np.where(adjusted == 2, d2, d1))
        discount = np.minimum(np.where(adjusted > 0, discount, 0.0), adjusted)
        if k == 1:
            prefix = np.zeros(vocab, dtype=np.int64)  # the empty history
            keys = np.arange(vocab, dtype=np.int64)
            lower = np.full(vocab, lower_prob[0])
            num_prefixes = 1
        else:
            table = counts.orders[k - 2]
            prefix, keys = table.prefix, table.keys
            lower = lower_prob[table.suffix]  # P_{k-1}(w | h'): the suffix n-gram is always listed
            num_prefixes = counts.num_grams(k - 1)
        total = np.bincount(prefix, weights=adjusted, minlength=num_prefixes)  # a(h.)
        mass = np.bincount(prefix, weights=discount, minlength=num_prefixes)  # discounted mass of h
        seen = total > 0
        gamma = np.where(seen, mass / np.where(seen, total, 1.0), 1.0)  # interpolation weight of h
        prob = (adjusted - discount) / np.where(seen, total, 1.0)[prefix] + gamma[prefix] * lower
        if k > 1:
            tables[k - 2].backoff = gamma  # backoff(h) of the (k-1)-grams
        tables.append(BackoffTable.from_sorted(keys, prob, np.ones(len(keys)), num_prefixes, vocab))
        lower_prob = prob
    model = NgramModel(tables, vocab, counts.history_id, method, counts, discounts)
    model.fallback_orders = fallbacks
    return model
