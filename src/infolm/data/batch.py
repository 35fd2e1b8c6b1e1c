"""The batch every task hands the trainer and every objective receives: named fields, no tuples.

A task fills the data fields (``inputs``, ``targets`` and whatever its shape of learning has:
``lengths`` and ``padding_mask`` for padded sentences, ``labels`` for classification, ``extras``
for anything else, e.g. a masked LM's masked positions); the trainer fills ``state``, ``epoch``
and ``step``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor


@dataclasses.dataclass
class Batch:
    inputs: Tensor  # (B, T) token ids
    targets: Tensor  # (B, T) next-token ids; ``ignore_index`` (-100) marks padding
    state: Any = None  # recurrent state before ``inputs`` (already detached); None: the model's initial state
    lr_scale: float = 1.0  # AWD-LSTM variable-length BPTT scales the step by len/bptt
    epoch: int = 0
    step: int = 0  # optimizer steps taken before this batch
    lengths: Tensor | None = None  # (B,) real (non-padding) positions per row; None: every row is full
    padding_mask: Tensor | None = None  # (B, T) bool, True at real positions; None: no padding
    labels: Tensor | None = None  # (B,) class ids of labeled rows (classification)
    extras: dict[str, Tensor] = dataclasses.field(default_factory=dict)  # task-specific (B, ...) fields

    def num_tokens(self) -> int:
        """Real (non-padding) input positions."""
        if self.padding_mask is not None:
            return int(self.padding_mask.sum())
        return self.inputs.numel()

    def rows(self, index: Tensor) -> Batch:
        """The rows ``index`` of every per-row field (a data-parallel rank's share of a batch)."""
        pick = lambda t: t.index_select(0, index) if isinstance(t, Tensor) else t  # noqa: E731
        return dataclasses.replace(
            self,
            inputs=pick(self.inputs),
            targets=pick(self.targets),
            lengths=pick(self.lengths),
            padding_mask=pick(self.padding_mask),
            labels=pick(self.labels),
            extras={k: pick(v) for k, v in self.extras.items()},
        )

    def to(self, device: torch.device | str) -> Batch:
        move = lambda t: t.to(device) if isinstance(t, Tensor) else t  # noqa: E731
        return dataclasses.replace(
            self,
            inputs=move(self.inputs),
            targets=move(self.targets),
            lengths=move(self.lengths),
            padding_mask=move(self.padding_mask),
            labels=move(self.labels),
            extras={k: move(v) for k, v in self.extras.items()},
        )
