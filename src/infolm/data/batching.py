"""Batches: BPTT windows over contiguous streams (fixed and AWD-style variable length),
full-split evaluation windows, and padded sentence batches."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

IGNORE_INDEX = -100


def batchify(stream: Tensor, batch_size: int) -> Tensor:
    """Cut a stream into ``batch_size`` contiguous rows, dropping the remainder. (B, N // B)."""
    n = stream.numel() // batch_size
    if n < 2:
        raise ValueError(f"a stream of {stream.numel()} tokens is too short for {batch_size} rows")
    return stream[: n * batch_size].view(batch_size, n)


@dataclasses.dataclass
class Window:
    inputs: Tensor  # (B, T)
    targets: Tensor  # (B, T)
    lr_scale: float  # len / bptt (AWD-LSTM scales the learning rate with the window length)


class StreamBatcher:
    """Training windows over a batchified stream; resumable from ``state_dict``.

    With ``variable=True`` the window length follows AWD-LSTM: ``bptt`` with p=0.95 else
    ``bptt / 2``, then ``N(len, 5)``, at least 5 — drawn from a generator whose state is saved.
    """

    def __init__(self, stream: Tensor, batch_size: int, bptt: int, variable: bool = False, seed: int = 0) -> None:
        self.data = batchify(stream, batch_size)  # (B, N)
        self.bptt = bptt
        self.variable = variable
        self.position = 0
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        """Windows per epoch with fixed length."""
        return (self.data.size(1) - 1 + self.bptt - 1) // self.bptt

    def tokens_per_epoch(self) -> int:
        return self.data.size(0) * (self.data.size(1) - 1)

    def _next_length(self) -> int:
        if not self.variable:
            return self.bptt
        base = self.bptt if self.rng.random() < 0.95 else self.bptt / 2
        return max(5, int(self.rng.normal(base, 5)))

    def next_window(self) -> Window | None:
        """The next window, or None at the end of the epoch (then the position wraps to 0)."""
        limit = self.data.size(1) - 1
        if self.position >= limit:
            self.position = 0
            return None
        length = self._next_length()
        length = min(length, limit - self.position)
        i = self.position
        self.position += length
        inputs = self.data[:, i : i + length]
        targets = self.data[:, i + 1 : i + 1 + length]
        return Window(inputs, targets, length / self.bptt)

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])
        self.rng.bit_generator.state = state["rng"]


def eval_rows(stream: Tensor, eos_id: int, batch_size: int) -> tuple[Tensor, Tensor]:
    """Full-split evaluation layout: every token is a target, the first one predicted from <eos>.

    The targets are cut into ``batch_size`` contiguous rows of equal length ``L`` (the last rows
    padded with ``IGNORE_INDEX``); inputs are the targets shifted right by one, row ``r`` starting
    with the token before its first target. Returns ``inputs, targets`` of shape (B, L).
    """
    n = stream.numel()
    batch_size = max(1, min(batch_size, n))
    length = -(-n // batch_size)
    history = torch.cat([stream.new_tensor([eos_id]), stream])  # history[i] precedes stream[i]
    targets = torch.full((batch_size * length,), IGNORE_INDEX, dtype=torch.long)
    inputs = torch.full((batch_size * length,), eos_id, dtype=torch.long)
    targets[:n] = stream
    inputs[:n] = history[:n]
    return inputs.view(batch_size, length), targets.view(batch_size, length)


def eval_windows(stream: Tensor, eos_id: int, batch_size: int, bptt: int) -> Iterator[tuple[Tensor, Tensor]]:
    """``(inputs, targets)`` windows of at most ``bptt`` steps over :func:`eval_rows`."""
    inputs, targets = eval_rows(stream, eos_id, batch_size)
    for i in range(0, inputs.size(1), bptt):
        yield inputs[:, i : i + bptt], targets[:, i : i + bptt]


def pad_sentences(sentences: Sequence[Tensor], pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """Right-pad sentences into (S, Lmax); returns ``tokens, lengths``."""
    lengths = torch.tensor([len(s) for s in sentences], dtype=torch.long)
    out = torch.full((len(sentences), int(lengths.max())), pad_id, dtype=torch.long)
    for row, sentence in enumerate(sentences):
        out[row, : len(sentence)] = sentence
    return out, lengths


def sentence_batches(
    sentences: Sequence[Tensor], batch_size: int, shuffle: bool = False, seed: int = 0, pad_id: int = 0
) -> Iterator[tuple[Tensor, Tensor]]:
    """Batches of padded sentences ``(tokens (S, L), lengths (S,))``, optionally shuffled."""
    order = np.random.default_rng(seed).permutation(len(sentences)) if shuffle else np.arange(len(sentences))
    for start in range(0, len(order), batch_size):
        yield pad_sentences([sentences[i] for i in order[start : start + batch_size]], pad_id)
