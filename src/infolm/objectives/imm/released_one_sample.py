"""The 1-sample steps of the authors' released code (``one_sample=released``): a soft target.

IMM takes k samples on every j-th step and 1 otherwise (App. D.2). With ``one_sample=released``
(opt-in) the 1-sample steps are those of the authors' released code: each position's own prediction
against (1 − γ(x))·onehot(y) + γ(x)·P̂(y), a soft target (Sec. 5.2's link to noising) rather than one
sample of Eq. 15, at every eligible position (``positions_per_batch`` then applies to the k-sample
steps only, as the released code uses every position on both). γ(x) is the restricted bigram's
back-off mass after the previous word x and P̂(y) its unigram; bigram only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from infolm.objectives.base import Batch
from infolm.objectives.imm.realizations import at_least_fp32

BackoffCache = dict[tuple[str, torch.dtype], tuple[Tensor, Tensor]]


def released_one_sample_loss(
    batch: Batch, output: Any, eligible: Tensor, length: int, restricted: Any, cache: BackoffCache
) -> tuple[Tensor, float]:
    """At every eligible position t (previous word x, next word y), -[(1 − γ(x)) ln Q(y|·) + γ(x) Σ_v P̂(v)
    ln Q(v|·)] with the primary pass's prediction Q, averaged over the positions. Averaged over the
    positions of one short context, the target (1 − γ(x))·onehot(y) + γ(x)·P̂ is close to the
    interpolated KN bigram, whose back-off mass γ(x) and lower order P̂ it uses. Returns the loss and
    the number of positions. Clipped apart like every IMM gradient (App. D.2; the released code leaves
    it unclipped)."""
    logits = output.logits[:, length - 1 :]  # (B, T, V)
    device = logits.device
    mask = eligible.to(device)
    if not bool(mask.any()):  # nothing to score (every target padding)
        return logits.sum() * 0.0, 0.0
    log_q = torch.log_softmax(at_least_fp32(logits[mask]), dim=-1)  # (N, V)
    previous = batch.inputs[:, length - 1 :].to(device)[mask]  # (N,) x
    targets = batch.targets[:, length - 1 :].to(device)[mask]  # (N,) y
    backoff, lower = bigram_backoff(restricted, cache, device, log_q.dtype)  # (V,) γ per previous word, (V,) P̂
    gamma = backoff[previous]  # (N,)
    true_word = log_q.gather(1, targets.unsqueeze(1)).squeeze(1)
    return -((1 - gamma) * true_word + gamma * (log_q @ lower)).mean(), float(len(targets))


def bigram_backoff(
    restricted: Any, cache: BackoffCache, device: torch.device, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """The restricted bigram's back-off mass γ(x) per word and its unigram P̂, as tensors (made once per
    device and dtype, kept in ``cache``)."""
    key = (str(device), dtype)
    if key not in cache:
        unigram = restricted.tables[0]  # order 1: P̂(v) and, per word as a history, γ
        cache[key] = (
            torch.as_tensor(unigram.backoff, device=device, dtype=dtype),
            torch.as_tensor(unigram.prob, device=device, dtype=dtype),
        )
    return cache[key]
