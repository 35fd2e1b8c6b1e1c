"""Objective terms that draw their random numbers from streams of their own (common random numbers).

Every term of a :class:`Composite` draws from torch's global generators: noising's Bernoulli and
replacement draws in ``transform_batch``, IMM's sampled contexts and BMI's sentence pairs (and the dropout
of BMI's own passes through the model) in ``forward``. The model's dropout in the trainer's one pass
draws from the same generators, so adding a term, or changing how much a term draws, moves every later
dropout mask of the primary pass: two arms of a comparison then differ by their masks as well as by the
term.

:class:`OwnStreams` is a Composite whose terms each draw from a random state of their own. Around each
term's ``transform_batch`` and ``forward`` it saves the global generators' state (CPU, and the current
CUDA device's when CUDA is in use), puts the term's own state in their place, and after the call keeps
the term's advanced state and puts the saved one back. The global generators then see only the model's
primary pass (and whatever else the trainer runs), whatever the terms draw: with the same seed, the
same batches and the same model, two runs draw the same primary dropout masks at every step, with any
terms. A term's stream starts from a seed made of the run's seed, the term's name and the process's rank
under ``torchrun`` (``stream_seed``), so a term also draws the same numbers whichever other terms are
present, and each rank draws its own numbers for its own rows (rank 0 those of a single process).
Python's and numpy's global generators are not swapped: no term draws from them.

The streams are not part of the objective's ``state_dict`` (a resumed run starts them afresh); they serve
paired comparisons of short continuations (``infolm pilot``), not resumable training.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator
from typing import Any

import torch

from infolm.objectives.across_ranks import world
from infolm.objectives.base import Composite


def stream_seed(seed: int, name: str, rank: int = 0) -> int:
    """The seed of term ``name``'s stream on rank ``rank`` under run seed ``seed`` (stable across
    processes and versions). Rank 0's is a single process's, so one process draws as it did before
    ranks entered the seed; another rank's differs, else every rank would draw the same noise, masks
    or samples for different rows."""
    return zlib.crc32(f"{seed}:{name}".encode() if rank == 0 else f"{seed}:{name}:rank{rank}".encode())


def _global_state() -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = (torch.cuda.current_device(), torch.cuda.get_rng_state())
    return state


def _set_global_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state:
        device, cuda_state = state["cuda"]
        torch.cuda.set_rng_state(cuda_state, device)


class RandomStream:
    """A random state of one's own, lent to torch's global generators for the length of a ``with``."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.state: dict[str, Any] | None = None  # made on first use (CUDA may start after construction)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        saved = _global_state()
        if self.state is None:
            torch.set_rng_state(torch.Generator().manual_seed(self.seed).get_state())
        else:
            _set_global_state(self.state)
        if "cuda" in saved and (self.state is None or "cuda" not in self.state):  # CUDA's first use here
            torch.cuda.manual_seed(self.seed)  # the current device's generator only, put back below
        try:
            yield
        finally:
            self.state = _global_state()
            _set_global_state(saved)


class OwnStreams(Composite):
    """The terms of a Composite, each drawing from its own random stream (see the module docstring)."""

    def __init__(self, composite: Composite, seed: int, rank: int | None = None) -> None:
        """``rank``: the process's rank under ``torchrun``; None: its rank in the process group when a
        term first draws (the trainer starts the group after the objective is built), 0 without one."""
        super().__init__(dict(composite.named_terms()))
        self.seed, self.rank = seed, rank
        self.streams: dict[str, RandomStream] = {}  # made at each term's first draw

    def drawing(self, name: str) -> contextlib.AbstractContextManager[Any]:
        if name not in self.streams:
            rank = world()[0] if self.rank is None else self.rank
            self.streams[name] = RandomStream(stream_seed(self.seed, name, rank))
        return self.streams[name].active()
