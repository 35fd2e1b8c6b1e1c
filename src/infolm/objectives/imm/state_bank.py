"""The state bank: detached recurrent states of the primary pass, keyed by the short context fed next.

The store behind the ``state-bank`` realization (``realizations.py``): after each batch the primary
pass's final state is banked under the short context that ends at the next input; a sample of an
extended context of sh is then a banked state whose short context is sh. A ring buffer of
``bank_size`` states, the oldest overwritten; states are copies (the primary state is not touched).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_unflatten

from infolm.objectives.base import Batch
from infolm.objectives.imm.contexts import IGNORE_INDEX, ShortContextIndex


def _batch_dim(t: Tensor) -> int:
    return 1 if t.dim() == 3 else 0  # the convention of infolm.models.base.select_state


class StateBank:
    """A ring buffer of detached recurrent states, each keyed by the short context fed next."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.keys: Tensor | None = None  # (capacity,) context ids, -1 empty
        self.leaves: list[Tensor] = []  # per state leaf, (capacity, ...) batch-first copies
        self.spec: Any = None
        self.cursor = 0
        self._sorted: tuple[Tensor, Tensor] | None = None

    def __len__(self) -> int:
        return 0 if self.keys is None else int((self.keys >= 0).sum())

    def add(self, context_ids: Tensor, state: Any) -> None:
        """Store rows of ``state`` whose ``context_ids`` (B,) are >= 0 (copies; the state is not touched)."""
        leaves, spec = tree_flatten(state)
        rows = torch.nonzero(context_ids >= 0).squeeze(1)
        if rows.numel() == 0 or not leaves:
            return
        if self.keys is None:
            device = leaves[0].device
            self.keys = torch.full((self.capacity,), -1, dtype=torch.long, device=device)
            self.leaves = [
                torch.zeros(
                    (self.capacity,) + tuple(t.movedim(_batch_dim(t), 0).shape[1:]), dtype=t.dtype, device=device
                )
                for t in leaves
            ]
            self.spec = spec
        rows = rows[-self.capacity :]
        slots = (self.cursor + torch.arange(len(rows))) % self.capacity
        self.cursor = int((self.cursor + len(rows)) % self.capacity)
        slots, device_rows = slots.to(self.keys.device), rows.to(self.keys.device)
        self.keys[slots] = context_ids.to(self.keys.device)[device_rows]
        for store, leaf in zip(self.leaves, leaves, strict=True):
            store[slots] = leaf.detach().movedim(_batch_dim(leaf), 0)[device_rows].to(store.dtype)
        self._sorted = None

    def available(self, context_ids: Tensor) -> Tensor:
        """(P,) bool: which context ids have at least one banked state."""
        if self.keys is None:
            return torch.zeros(context_ids.shape, dtype=torch.bool)
        low, high = self._ranges(context_ids)
        return (high > low).cpu()

    def _ranges(self, context_ids: Tensor) -> tuple[Tensor, Tensor]:
        assert self.keys is not None
        if self._sorted is None:
            sorted_keys, order = torch.sort(self.keys)
            self._sorted = (sorted_keys, order)
        sorted_keys = self._sorted[0]
        query = context_ids.to(sorted_keys.device)
        return torch.searchsorted(sorted_keys, query), torch.searchsorted(sorted_keys, query, right=True)

    def sample(self, context_ids: Tensor, k: int) -> list[Tensor]:
        """(P,) context ids (each available) -> per leaf, (k*P, ...) batch-first states, sample-major."""
        assert self.keys is not None
        low, high = self._ranges(context_ids)
        draws = (torch.rand(k, len(context_ids), device=low.device, dtype=torch.float64) * (high - low)).long()
        slots = self._sorted[1][(low + draws).reshape(-1)]  # type: ignore[index]
        return [store[slots] for store in self.leaves]

    def as_state(self, leaves: list[Tensor]) -> Any:
        """Batch-first leaves -> a state pytree in the model's layout."""
        return tree_unflatten([t.movedim(0, 1) if t.dim() == 3 else t for t in leaves], self.spec)


def record(bank: StateBank, index: ShortContextIndex | None, batch: Batch, output: Any, length: int) -> None:
    """Bank the primary pass's final state under the short context that ends at the next input."""
    if output.state is None or index is None:
        return
    inputs, targets = batch.inputs.cpu(), batch.targets.cpu()
    sequence = torch.cat([inputs, targets[:, -1:]], dim=1)  # (B, T+1); the next input is targets[:, -1]
    if sequence.size(1) < length:
        return
    ids = index.lookup(sequence[:, -length:])  # (B,)
    ids = torch.where(targets[:, -1] == IGNORE_INDEX, torch.full_like(ids, -1), ids)
    bank.add(ids, output.state)
