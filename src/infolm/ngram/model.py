"""An n-gram language model in backoff form (the form of an ARPA file), with batched queries.

``P(w | h) = prob(h, w)`` if the n-gram ``(h, w)`` is listed, else ``backoff(h) * P(w | h')`` with
``h'`` the history without its first token. Interpolated Kneser-Ney models are converted to this
form exactly (see :mod:`infolm.ngram.smoothing`), so building, querying and ARPA files share one
representation. Tables are sorted key arrays (see :mod:`infolm.ngram.counts`): no per-token dicts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch import Tensor

from infolm.errors import InfolmError
from infolm.ngram.counts import NgramCounts, as_stream, lookup


@dataclasses.dataclass
class BackoffTable:
    """The listed n-grams of one order k; row i is the k-gram with id i."""

    keys: np.ndarray  # (M,) int64 sorted: prefix_id * V + last word (order 1: the token ids 0..V-1)
    prob: np.ndarray  # (M,) float64 P(last word | prefix)
    backoff: np.ndarray  # (M,) float64 multiplicative backoff weight of this k-gram as a history (1: none)
    row_ptr: np.ndarray  # (M_{k-1}+1,) the k-grams with prefix id h are rows row_ptr[h]:row_ptr[h+1]

    @classmethod
    def from_sorted(cls, keys: np.ndarray, prob: np.ndarray, backoff: np.ndarray, num_prefixes: int, vocab_size: int):
        row_ptr = np.searchsorted(keys // vocab_size, np.arange(num_prefixes + 1)).astype(np.int64)
        return cls(keys, prob, backoff, row_ptr)


class NgramModel:
    """A count-based n-gram LM over token ids ``0..V-1`` (see :func:`infolm.ngram.build_ngram`).

    ``history_id`` (the ``<eos>`` id) is the token assumed before the first token of a scored stream
    (PTB convention). ``counts`` holds the n-gram counts for built models (None when read from ARPA);
    ``discounts`` the per-order discounts ``(D1, D2, D3+)``.
    """

    def __init__(
        self,
        tables: list[BackoffTable],
        vocab_size: int,
        history_id: int | None = None,
        method: str = "arpa",
        counts: NgramCounts | None = None,
        discounts: list[tuple[float, float, float]] | None = None,
    ) -> None:
        self.tables = tables  # index k-1 holds order k
        self.vocab_size = vocab_size
        self.history_id = history_id
        self.method = method
        self._counts = counts
        self.discounts = discounts or []
        self.fallback_orders: list[int] = []  # orders whose discounts fell back to (0.5, 1, 1.5)

    @property
    def order(self) -> int:
        return len(self.tables)

    @property
    def counts(self) -> NgramCounts:
        """The n-gram counts the model was estimated from (built models only)."""
        if self._counts is None:
            raise InfolmError("this n-gram model was read from an ARPA file and has no counts")
        return self._counts

    def num_grams(self, k: int) -> int:
        return len(self.tables[k - 1].keys)

    # --- ids of the n-grams ending at each position of a batch of token rows ---
    def _ending_ids(self, tokens: np.ndarray, max_len: int) -> list[np.ndarray]:
        """For j = 1..max_len: (N, T) id of the listed j-gram ending at each column, -1 if none."""
        vocab = self.vocab_size
        ends = [tokens.copy()]  # unigrams: every id in range is listed
        for j in range(2, max_len + 1):
            current = np.full(tokens.shape, -1, dtype=np.int64)
            if tokens.shape[1] >= j:
                current[:, j - 1 :] = lookup(
                    self.tables[j - 1].keys, ends[-1][:, j - 2 : -1], tokens[:, j - 1 :], vocab
                )
            ends.append(current)
        return ends

    def _check_ids(self, array: np.ndarray, what: str) -> None:
        if array.size and (array.min() < 0 or array.max() >= self.vocab_size):
            raise InfolmError(f"{what} ids must lie in [0, {self.vocab_size}); got {array.min()}..{array.max()}")

    # --- queries ---
    def next_token_distribution(self, contexts: Tensor | np.ndarray) -> Tensor:
        """P(. | context) for a batch of contexts. (N, L) ids, L <= order-1 -> (N, V) float32.

        The last ``L`` tokens are the history; ``L < order - 1`` gives the lower-order (backed-off)
        distribution, as for the first tokens of a stream.
        """
        device = contexts.device if isinstance(contexts, Tensor) else torch.device("cpu")
        ctx = contexts.detach().cpu().numpy() if isinstance(contexts, Tensor) else np.asarray(contexts)
        if ctx.ndim != 2:
            raise InfolmError(f"contexts must be (N, L) token ids, got shape {ctx.shape}")
        ctx = ctx.astype(np.int64)
        self._check_ids(ctx, "context")
        n, length = ctx.shape
        if length > self.order - 1:
            ctx, length = ctx[:, length - (self.order - 1) :], self.order - 1
        dist = np.broadcast_to(self.tables[0].prob, (n, self.vocab_size)).copy()  # (N, V) unigram
        ends = self._ending_ids(ctx, length) if length else []
        for k in range(2, length + 2):
            history = ends[k - 2][:, -1]  # (N,) id of the last k-1 tokens among the (k-1)-grams
            rows = np.flatnonzero(history >= 0)
            if len(rows) == 0:
                break
            history = history[rows]
            dist[rows] *= self.tables[k - 2].backoff[history][:, None]  # back off ...
            table = self.tables[k - 1]
            starts, stops = table.row_ptr[history], table.row_ptr[history + 1]
            lengths = stops - starts
            flat_rows = np.repeat(rows, lengths)
            first = np.repeat(np.cumsum(lengths) - lengths, lengths)
            ids = np.arange(int(lengths.sum())) - first + np.repeat(starts, lengths)
            dist[flat_rows, table.keys[ids] % self.vocab_size] = table.prob[ids]  # ... unless listed
        return torch.from_numpy(dist.astype(np.float32)).to(device)

    def token_log_probs(self, stream: Any) -> np.ndarray:
        """Natural-log P(token | previous tokens of the running stream) for each token. (N,) float64.

        The history of the first token is ``history_id`` (``<eos>``) when the model has one.
        """
        tokens = as_stream(stream, self.vocab_size)
        offset = 0
        if self.history_id is not None:
            tokens = np.concatenate([[self.history_id], tokens]).astype(np.int64)
            offset = 1
        ends = [e[0] for e in self._ending_ids(tokens[None, :], self.order)]
        log_prob = np.zeros(len(tokens))
        best = np.zeros(len(tokens), dtype=np.int64)  # order of the longest listed n-gram ending here
        for k in range(1, self.order + 1):
            found = ends[k - 1] >= 0
            log_prob[found] = np.log(self.tables[k - 1].prob[ends[k - 1][found]])
            best[found] = k
        for j in range(1, self.order):  # histories of length j that were backed off from
            history = ends[j - 1][:-1]
            apply = (history >= 0) & (best[1:] <= j)
            log_prob[1:][apply] += np.log(self.tables[j - 1].backoff[history[apply]])
        return log_prob[offset:]

    def log_prob_stream(self, stream: Any) -> tuple[float, int]:
        """(sum of natural-log probabilities, number of tokens) of a stream; PPL = exp(-sum / n)."""
        log_probs = self.token_log_probs(stream)
        return float(log_probs.sum()), int(len(log_probs))

    def perplexity(self, stream: Any) -> float:
        total, n = self.log_prob_stream(stream)
        return float(np.exp(-total / max(n, 1)))
