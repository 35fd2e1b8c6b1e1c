"""Token log-likelihoods under a softmax layer, in row blocks.

K draws folded into the batch multiply the logits tensor by K: 16 draws of 20 PTB sentences of 35
tokens over 10,000 words are 448 MB of logits, and as much again for their gradient. glibc serves
blocks above 32 MiB with fresh ``mmap``-ed pages on every call (its ceiling for heap reuse; see
``infolm.training.allocator``), so one such tensor costs page faults that grow with K. Scoring
``block_elements`` logits at a time keeps every buffer in the reusable heap; the arithmetic is the same.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

BLOCK_ELEMENTS = 1 << 22  # 4M logits (16 MB in fp32) per block, well below glibc's 32 MiB mmap ceiling


def token_log_likelihood(
    hidden: Tensor, softmax: nn.Linear, targets: Tensor, block_elements: int = BLOCK_ELEMENTS
) -> Tensor:
    """ln softmax(W h + b)[target] for every row: hidden (N, H), targets (N,) -> (N,)."""
    rows = max(1, block_elements // softmax.out_features)
    if hidden.size(0) <= rows:
        return -F.cross_entropy(softmax(hidden), targets, reduction="none")
    parts = [
        -F.cross_entropy(softmax(hidden[i : i + rows]), targets[i : i + rows], reduction="none")
        for i in range(0, hidden.size(0), rows)
    ]
    return torch.cat(parts)
