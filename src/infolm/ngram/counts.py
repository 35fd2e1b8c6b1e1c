"""N-gram counting over integer token streams, vectorized with numpy.

Every order-k n-gram gets an integer id. Ids are hierarchical: the k-gram ``(w_1..w_k)`` is the pair
(id of its prefix ``w_1..w_{k-1}`` among the (k-1)-grams, ``w_k``), encoded as the key
``prefix_id * V + w_k``; the table of order k keeps these keys sorted, so the k-grams sharing a
prefix are contiguous (a CSR layout) and look-ups are one ``np.searchsorted``. Unigram ids are the
token ids themselves (all ``V`` of them, seen or not). Keys stay below ``(#(k-1)-grams) * V``, so any
order fits in int64 for any realistic corpus.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from infolm.errors import InfolmError


@dataclasses.dataclass
class OrderCounts:
    """The distinct n-grams of one order k >= 2 and their counts (row i is the k-gram with id i)."""

    keys: np.ndarray  # (M,) int64 sorted: prefix_id * V + last word
    prefix: np.ndarray  # (M,) int64 id of w_1..w_{k-1} among the (k-1)-grams
    suffix: np.ndarray  # (M,) int64 id of w_2..w_k among the (k-1)-grams
    word: np.ndarray  # (M,) int64 last word w_k
    count: np.ndarray  # (M,) int64 occurrences c(w_1..w_k) in the stream


def lookup(keys: np.ndarray, prefix_ids: np.ndarray, words: np.ndarray, vocab_size: int) -> np.ndarray:
    """Ids of the n-grams ``(prefix, word)`` in a sorted key table; -1 where absent (or prefix is -1)."""
    query = prefix_ids * vocab_size + words
    pos = np.searchsorted(keys, query)
    pos_clipped = np.minimum(pos, max(len(keys) - 1, 0))
    found = (prefix_ids >= 0) & (pos < len(keys))
    if len(keys):
        found &= keys[pos_clipped] == query
    return np.where(found, pos_clipped, -1).astype(np.int64)


def as_stream(stream: object, vocab_size: int) -> np.ndarray:
    """A 1-D int64 numpy copy of ``stream`` (numpy array, torch tensor or list), ids checked."""
    if hasattr(stream, "detach"):
        stream = stream.detach().cpu().numpy()  # type: ignore[attr-defined]
    array = np.asarray(stream)
    if array.ndim != 1:
        raise InfolmError(f"an n-gram stream must be 1-D token ids, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise InfolmError(f"an n-gram stream must hold integer token ids, got {array.dtype}")
    array = array.astype(np.int64)
    if array.size and (array.min() < 0 or array.max() >= vocab_size):
        raise InfolmError(f"token ids must lie in [0, {vocab_size}); got {array.min()}..{array.max()}")
    return array


class NgramCounts:
    """Counts of all orders 1..``order`` of one stream.

    ``history_id`` (the ``<eos>`` id) is prepended to the stream before counting, so the first token
    is seen after ``<eos>`` exactly as :meth:`NgramModel.log_prob_stream` scores it. The prepended
    token is a history only: it is counted inside the n-grams that contain it, like every token.
    """

    def __init__(self, stream: object, vocab_size: int, order: int, history_id: int | None = None) -> None:
        if order < 1:
            raise InfolmError(f"n-gram order must be at least 1, got {order}")
        if vocab_size < 1:
            raise InfolmError(f"vocabulary size must be positive, got {vocab_size}")
        tokens = as_stream(stream, vocab_size)
        if history_id is not None:
            if not 0 <= history_id < vocab_size:
                raise InfolmError(f"history id {history_id} is outside the vocabulary of size {vocab_size}")
            tokens = np.concatenate([[history_id], tokens]).astype(np.int64)
        if len(tokens) < 1:
            raise InfolmError("cannot count n-grams of an empty stream")
        self.order = order
        self.vocab_size = vocab_size
        self.history_id = history_id
        self.tokens = tokens  # (N,) the counted stream, history included
        self.unigram = np.bincount(tokens, minlength=vocab_size).astype(np.int64)  # (V,)
        self.orders: list[OrderCounts] = []  # index k-2 holds order k
        ending = tokens.copy()  # id of the (k-1)-gram ending at each position (k-1 = 1 here)
        for k in range(2, order + 1):
            # k-grams end at positions k-1..N-1; their prefix is the (k-1)-gram ending one earlier
            key = ending[k - 2 : -1] * vocab_size + tokens[k - 1 :]
            keys, inverse, count = np.unique(key, return_inverse=True, return_counts=True)
            suffix = np.empty(len(keys), dtype=np.int64)
            suffix[inverse] = ending[k - 1 :]  # the (k-1)-gram ending at the same position
            self.orders.append(OrderCounts(keys, keys // vocab_size, suffix, keys % vocab_size, count.astype(np.int64)))
            new_ending = np.full(len(tokens), -1, dtype=np.int64)
            new_ending[k - 1 :] = inverse
            ending = new_ending
            if len(keys) == 0:
                raise InfolmError(f"the stream has {len(tokens)} tokens: too short for order {order}")

    def num_grams(self, k: int) -> int:
        """Number of distinct k-grams (``V`` for k = 1: every token id is a unigram)."""
        return self.vocab_size if k == 1 else len(self.orders[k - 2].keys)

    def raw(self, k: int) -> np.ndarray:
        """(M_k,) occurrence counts of the k-grams, indexed by id."""
        return self.unigram if k == 1 else self.orders[k - 2].count

    def words(self, k: int) -> np.ndarray:
        """(M_k, k) the token ids of every k-gram, row = id."""
        if k == 1:
            return np.arange(self.vocab_size, dtype=np.int64)[:, None]
        table = self.orders[k - 2]
        return np.concatenate([self.words(k - 1)[table.prefix], table.word[:, None]], axis=1)

    def continuation(self, k: int) -> np.ndarray:
        """(M_k,) N1+(. w_1..w_k): distinct tokens preceding each k-gram (k < order).

        The k-gram at the very start of the stream has no left neighbour; it counts one extra
        distinct "start" history (as KenLM keeps raw counts for n-grams after ``<s>``), so every
        observed k-gram has a positive continuation count.
        """
        if k >= self.order:
            raise InfolmError(f"continuation counts of order {k} need n-grams of order {k + 1}")
        higher = self.orders[k - 1]
        out = np.bincount(higher.suffix, minlength=self.num_grams(k)).astype(np.int64)
        if len(self.tokens) >= k:
            out[self.gram_id(self.tokens[:k])] += 1
        return out

    def gram_id(self, gram: np.ndarray) -> int:
        """Id of one k-gram (token ids), -1 if it was not seen."""
        current = int(gram[0])
        for k in range(2, len(gram) + 1):
            table = self.orders[k - 2]
            current = int(lookup(table.keys, np.array([current]), np.array([int(gram[k - 1])]), self.vocab_size)[0])
            if current < 0:
                return -1
        return current

    # --- bigram statistics used by noising (Xie et al. 2017) and IMM ---
    def context_counts(self) -> np.ndarray:
        """(V,) c(x) = sum_y c(x, y): how often each token is followed by another."""
        self._need_bigrams()
        table = self.orders[0]
        return np.bincount(table.prefix, weights=table.count, minlength=self.vocab_size).astype(np.int64)

    def distinct_continuations(self) -> np.ndarray:
        """(V,) N1+(x, .): number of distinct tokens following each token."""
        self._need_bigrams()
        return np.bincount(self.orders[0].prefix, minlength=self.vocab_size).astype(np.int64)

    def distinct_histories(self) -> np.ndarray:
        """(V,) N1+(., x): number of distinct tokens preceding each token (no start correction)."""
        self._need_bigrams()
        return np.bincount(self.orders[0].word, minlength=self.vocab_size).astype(np.int64)

    def _need_bigrams(self) -> None:
        if self.order < 2:
            raise InfolmError("bigram statistics need counts of order at least 2")


def count_ngrams(stream: object, vocab_size: int, order: int, history_id: int | None = None) -> NgramCounts:
    """Count all n-grams of orders 1..``order`` in ``stream`` (optionally after ``history_id``)."""
    return NgramCounts(stream, vocab_size, order, history_id)
