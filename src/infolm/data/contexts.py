"""Short token contexts as integer keys: the shared indexing of IMM's context multiset and of the
induced n-gram evaluation."""

from __future__ import annotations

import numpy as np

from infolm.errors import InfolmError


def encode_contexts(contexts: np.ndarray, vocab_size: int) -> np.ndarray:
    """(M, L) token ids -> (M,) int64 keys, equal iff the rows are equal (base-V digits)."""
    length = contexts.shape[1]
    if vocab_size**length >= 2**62:
        raise InfolmError(f"short contexts of {length} tokens over {vocab_size} types do not fit a 64-bit key")
    keys = np.zeros(contexts.shape[0], dtype=np.int64)
    for column in range(length):
        keys = keys * vocab_size + contexts[:, column].astype(np.int64)
    return keys
