"""Short contexts: where each occurs in the training stream, and which of a batch's are matched.

The short context sh of a position is its ``order - 1`` previous tokens; extend(sh), the multiset of
extended contexts the induced model averages over (Eqs. 9, 13), is the histories before the
training-stream positions where sh ends. ``ShortContextIndex`` lists those positions per short context.

Which short contexts a batch matches (the paper leaves it open for a recurrent model): every
position of the batch whose short context occurs in training (Eqs. 10, 12). Positions sharing a short
context share its k samples (IMM_t depends on t only through sh(y_-t)): the loss is
Σ_s (m_s / n) IMM_s over the batch's distinct short contexts s with m_s occurrences among its n
positions, whose expectation (loss and gradient) equals that of independent draws per position.
``positions_per_batch = P > 0`` draws P positions uniformly without replacement instead: the same
expected gradient, more variance, less cost. Not the same expected *step* under the clip: on the
1-sample steps ∇IMM over a few positions is noisy enough that the clip acts on nearly every draw, and
the mean of the clipped draws is shorter than the default's (a third of it with 8 positions on the
CPU-scale PTB model; the k-sample steps keep the default's; ``experiments/imm_positions_clip_bias.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from infolm.data.contexts import encode_contexts
from infolm.errors import InfolmError
from infolm.objectives.base import Batch

IGNORE_INDEX = -100


class ShortContextIndex:
    """For each short context (L consecutive tokens), the positions of the stream where it ends.

    Position p is an occurrence of short context s when ``stream[p-L+1 : p+1] == s`` and p has a next
    token (p <= N-2): the multiset extend(s) of the paper is the histories before those positions.
    Built with one stable argsort of context ids; ids are dense 0..C-1 in key order.
    """

    def __init__(self, stream: Tensor, vocab_size: int, context_len: int) -> None:
        tokens = stream.cpu().numpy().astype(np.int64)
        if tokens.size < context_len + 1:
            raise InfolmError(
                f"the training stream ({tokens.size} tokens) is too short for {context_len}-token contexts"
            )
        self.vocab_size, self.context_len = vocab_size, context_len
        self.stream = stream.cpu()
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], context_len)  # (N-L, L), ends at p=L-1..N-2
        position_keys = encode_contexts(windows, vocab_size)
        self.keys, context_ids = np.unique(position_keys, return_inverse=True)  # sorted unique keys (C,)
        order = np.argsort(context_ids, kind="stable")
        self.positions = torch.from_numpy(order + context_len - 1)  # (N-L,) grouped by context id
        counts = np.bincount(context_ids, minlength=len(self.keys))
        self.counts = torch.from_numpy(counts)  # (C,)
        self.offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)[:-1]]))  # (C,)

    def __len__(self) -> int:
        return len(self.keys)

    def lookup(self, contexts: Tensor) -> Tensor:
        """(..., L) token ids -> (...) context ids, -1 where the context never occurs in the stream."""
        shape = contexts.shape[:-1]
        keys = encode_contexts(contexts.reshape(-1, self.context_len).cpu().numpy(), self.vocab_size)
        where = np.searchsorted(self.keys, keys).clip(max=len(self.keys) - 1)
        ids = np.where(self.keys[where] == keys, where, -1)
        return torch.from_numpy(ids).view(shape)

    def sample(self, context_ids: Tensor, k: int) -> Tensor:
        """(P,) context ids -> (k, P) stream positions drawn uniformly (with replacement) from their occurrences."""
        counts = self.counts[context_ids].double()  # (P,)
        draws = (torch.rand(k, len(context_ids), dtype=torch.float64) * counts).long()  # (k, P)
        return self.positions[self.offsets[context_ids] + draws]


def batch_positions(index: ShortContextIndex | None, batch: Batch, length: int) -> tuple[Tensor, Tensor, Tensor]:
    """The short context ending at each input position t >= L-1 (B, T-L+1, L), its context id
    (B, T-L+1; -1 where it never occurs in training) and whether the position counts (B, T-L+1)."""
    assert index is not None
    inputs, targets = batch.inputs.cpu(), batch.targets.cpu()
    if inputs.size(1) < length:  # no position has a whole short context in this row
        empty = inputs.new_zeros((inputs.size(0), 0))
        return inputs.new_zeros((inputs.size(0), 0, length)), empty, empty.bool()
    contexts = inputs.unfold(1, length, 1)  # (B, T-L+1, L), context ending at t = L-1..T-1
    ids = index.lookup(contexts)  # (B, T-L+1)
    return contexts, ids, (ids >= 0) & (targets[:, length - 1 :] != IGNORE_INDEX)


def select_contexts(
    index: ShortContextIndex | None,
    batch: Batch,
    length: int,
    positions_per_batch: int,
    positions: tuple[Tensor, Tensor, Tensor] | None = None,
    has_state: Callable[[Tensor], Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The distinct short contexts of the selected positions of ``batch.inputs`` (Eq. 12).

    Returns their tokens (U, L), context ids (U,) and weights (U,): each context's share of the
    selected positions. Positions: all whose context occurs in training (Eq. 10), or
    ``positions_per_batch`` of them drawn uniformly without replacement; with ``has_state`` (the
    state bank's), only those whose context it can serve.
    """
    empty = batch.inputs.new_zeros((0, length)).cpu(), batch.inputs.new_zeros((0,)).cpu(), torch.zeros(0)
    if batch.inputs.size(1) < length:
        return empty
    contexts, ids, eligible = batch_positions(index, batch, length) if positions is None else positions
    flat_contexts, flat_ids = contexts.reshape(-1, length)[eligible.reshape(-1)], ids[eligible]
    if has_state is not None:  # only contexts with a banked state (a biased subset)
        available = has_state(flat_ids)
        flat_contexts, flat_ids = flat_contexts[available], flat_ids[available]
    if 0 < positions_per_batch < len(flat_ids):
        keep = torch.randperm(len(flat_ids))[:positions_per_batch]
        flat_contexts, flat_ids = flat_contexts[keep], flat_ids[keep]
    if len(flat_ids) == 0:
        return empty
    unique_ids, first, counts = _first_occurrences(flat_ids)
    return flat_contexts[first], unique_ids, counts.double() / len(flat_ids)


def _first_occurrences(ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(N,) ids -> distinct ids (U,), the index of each one's first occurrence (U,), their counts (U,)."""
    unique_ids, inverse, counts = torch.unique(ids, return_inverse=True, return_counts=True)
    first = torch.full((len(unique_ids),), len(ids), dtype=torch.long).scatter_reduce(
        0, inverse, torch.arange(len(ids)), reduce="amin"
    )
    return unique_ids, first, counts
