"""The scaffold the data-parallel tests share: two gloo processes each run a function of their rank and
hand back its result, and the checks that a term on two ranks equals one process on the whole batch.

A rank's work must be a module-level function (``torch.multiprocessing.spawn`` pickles it by name)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def _rank_entry(rank: int, work: Callable[[int], Any], store: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        torch.save(work(rank), f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def run_on_two_ranks(folder: Path, work: Callable[[int], Any]) -> list[Any]:
    """``work(rank)`` on each of two processes of one gloo group, the results in rank order."""
    mp.spawn(_rank_entry, args=(work, str(folder / "store"), str(folder / "out")), nprocs=WORLD)
    return [torch.load(folder / f"out.{rank}") for rank in range(WORLD)]


def averaged_gradients(params: Mapping[str, torch.nn.Parameter]) -> dict[str, torch.Tensor]:
    """Every parameter's gradient after the trainer's cross-rank averaging (zeros where none flowed)."""
    from infolm.training.distributed import average_gradients

    average_gradients(list(params.values()))
    return {k: torch.zeros_like(p) if p.grad is None else p.grad.clone() for k, p in params.items()}


def assert_ranks_equal_one_process(
    ranks: list[tuple[torch.Tensor, dict[str, torch.Tensor]]],
    loss: torch.Tensor,
    grads: dict[str, torch.Tensor],
    label: str,
) -> None:
    """Each rank's (loss, averaged gradients) equals one process's on the whole batch."""
    assert torch.isfinite(loss)
    for rank, (rank_loss, rank_grads) in enumerate(ranks):
        torch.testing.assert_close(rank_loss, loss, rtol=1e-5, atol=1e-6)
        for key, grad in grads.items():
            torch.testing.assert_close(rank_grads[key], grad, rtol=1e-4, atol=1e-6, msg=f"{label} {key} rank {rank}")
