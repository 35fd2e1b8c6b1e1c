"""In-batch candidates across data-parallel ranks (``torchrun``).

Each rank holds some rows of a global batch. A contrastive term whose negatives come "from other
sequences in the same batch" (Kong et al. Sec. 5.2) must see every rank's rows, or its candidate set
shrinks as processes are added. With these helpers a term on P ranks equals the term on one process
with the whole batch:

* ``gather``: every rank's rows of a tensor, without gradient (token ids, owners);
* ``gather_with_grad``: every rank's rows of a representation; the backward pass sums the gradients
  that every rank's queries send to a row and gives the sum to the rank that computed the row;
* ``mean_over_ranks``: the mean of every rank's per-query losses, with a gradient that, averaged over
  ranks as the trainer averages it, is the gradient of that mean (``mean_of_rank_sums``: the same from
  each rank's sum and count, for a loss that sums its items itself);
* ``gather_batch``: every rank's rows in the order of the global batch, and where this rank's are;
* ``global_rows``: a local row's index in the global batch;
* ``rank_share``: a rank's part of a per-batch budget of subsampled items.

Without an initialised process group, or with one process, each is its one-process operation.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


def world() -> tuple[int, int]:
    """(rank, number of ranks) of the initialised process group; (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_share(total: int) -> int:
    """This rank's part of a per-batch budget of ``total`` items (pairs, locations) drawn from the rows it
    holds: ``total`` split as evenly as whole items allow, the lower ranks taking the remainder, so the
    ranks together draw ``total`` items as one process does with the whole batch (each rank's share is
    drawn uniformly from its own rows: the count is one process's, the draw stratified by rank)."""
    rank, size = world()
    return total // size + (1 if rank < total % size else 0)


def global_rows(local_rows: Tensor) -> Tensor:
    """The index in the global batch of each of this rank's rows. The tasks deal a global batch round
    robin (rank r holds rows r, r + P, r + 2P, ...); the indices are distinct across ranks either way."""
    rank, size = world()
    return local_rows * size + rank


def _gather_padded(local: Tensor, fill: int | float) -> tuple[Tensor, int]:
    """Every rank's rows of ``local`` (n_r, ...) in rank order, each dimension after the first padded
    with ``fill`` to the largest rank's; and where this rank's rows start."""
    rank, size = world()
    shape = torch.tensor(local.shape, dtype=torch.long, device=local.device)
    shapes = [torch.empty_like(shape) for _ in range(size)]
    dist.all_gather(shapes, shape)
    largest = torch.stack(shapes).amax(0).tolist()
    padded = local.new_full(largest, fill)
    padded[tuple(slice(0, n) for n in local.shape)] = local
    parts = [torch.empty_like(padded) for _ in range(size)]
    dist.all_gather(parts, padded)
    counts = [int(s[0]) for s in shapes]
    return torch.cat([part[:n] for part, n in zip(parts, counts)]), sum(counts[:rank])


def gather(local: Tensor, fill: int | float = 0) -> tuple[Tensor, int]:
    """Every rank's rows of ``local`` (n_r, ...) concatenated in rank order (N, ...), later dimensions
    padded with ``fill`` to the largest rank's, and the index of this rank's first row. No gradient."""
    if world()[1] == 1:
        return local.detach(), 0
    return _gather_padded(local.detach(), fill)


def gather_batch(local: Tensor, fill: int | float = 0) -> tuple[Tensor, Tensor]:
    """Every rank's rows of ``local`` (n_r, ...) in the order of the global batch (N, ...), later
    dimensions padded with ``fill``, and the positions of this rank's rows in it (n_r,). No gradient."""
    local_rows = torch.arange(local.size(0), device=local.device)
    every_row, start = gather(global_rows(local_rows))  # (N,)
    every, _ = gather(local, fill)
    by_position = every_row.argsort()
    position = torch.empty_like(by_position)
    position[by_position] = torch.arange(len(by_position), device=local.device)
    return every[by_position], position[start + local_rows]


class _GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, local: Tensor) -> tuple[Tensor, int]:
        rows, start = _gather_padded(local, 0)
        if rows.shape[1:] != local.shape[1:]:
            raise RuntimeError(f"gather_with_grad: ranks disagree on the row shape {tuple(local.shape[1:])}")
        ctx.rows = slice(start, start + local.size(0))
        return rows, start

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _: Any) -> Tensor:
        summed = grad.contiguous().clone()
        dist.all_reduce(summed)  # what every rank's queries send to each row
        return summed[ctx.rows]


def gather_with_grad(local: Tensor) -> tuple[Tensor, int]:
    """Every rank's rows of the representation ``local`` (n_r, D) in rank order (N, D), and the index
    of this rank's first row. The gradient a rank's loss sends to another rank's row reaches the rank
    that computed the row: the backward pass is a collective, so every rank must take part in it."""
    if world()[1] == 1:
        return local, 0
    rows, start = _GatherWithGrad.apply(local)
    return rows, int(start)


def mean_over_ranks(per_query: Tensor, empty: float = math.nan) -> Tensor:
    """The mean of every rank's per-query losses (each rank passes its own, possibly none). Its value is
    the mean over the global batch on every rank; its gradient is P / N times this rank's sum, so that
    the trainer's average of the ranks' gradients (``training/distributed.py``) is the gradient of the
    global mean whatever share of the N queries each rank holds. ``empty``: the value without queries."""
    if world()[1] == 1 and per_query.numel():
        return per_query.mean()
    return mean_of_rank_sums(per_query.sum(), per_query.numel(), empty)


def mean_of_rank_sums(local_sum: Tensor, local_count: int, empty: float = math.nan) -> Tensor:
    """The mean over every rank's items, from this rank's sum over its ``local_count`` items (a rank with
    none passes a zero that keeps the graph, and must still call: the count is a collective). As
    ``mean_over_ranks``: the value is the global mean on every rank; the gradient is P / N times this
    rank's sum's, with N all-reduced and carrying no gradient. ``empty``: the value where no rank has an
    item (torch's mean of nothing is nan). With one process: ``local_sum / local_count``."""
    _, size = world()
    if size == 1:
        return local_sum / local_count if local_count else local_sum * 0.0 + empty
    totals = torch.stack([local_sum.detach().double(), local_sum.new_tensor(local_count, dtype=torch.double)])
    dist.all_reduce(totals)
    total, count = totals[0], totals[1]
    if count == 0:  # the same on every rank: no further collective hangs on it
        return local_sum * 0.0 + empty
    scaled = local_sum * (size / count).to(local_sum.dtype)
    return scaled + ((total / count).to(local_sum.dtype) - scaled).detach()
