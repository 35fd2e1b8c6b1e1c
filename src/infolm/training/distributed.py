"""Data parallelism under ``torchrun``: process group set-up and gradient averaging.

Gradients are averaged with one all-reduce per step after all of the step's backward passes,
so objectives may run any number of forward passes (DDP's per-forward hooks would not allow that).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn


def world() -> tuple[int, int]:
    """(rank, world_size) from torchrun's environment; (0, 1) without it."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def init(device: torch.device) -> None:
    rank, size = world()
    if size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")


def average_gradients(parameters: list[nn.Parameter]) -> None:
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    for p in parameters:
        if p.grad is None:  # every rank must all-reduce the same tensors
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in parameters if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
