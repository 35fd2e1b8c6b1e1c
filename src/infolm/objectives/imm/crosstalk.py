"""The k-sample induced cross-entropy (Eq. 15) and its crosstalk gradient (App. C.2).

The induced model at a short context sh is estimated from k sampled extended contexts x_i as the mean
Q̂(y|sh) = 1/k Σ_i Q(y|sh, x_i) (Eq. 15), computed in log space as a log-sum-exp (Eq. 21); the IMM term
is the cross-entropy -Σ_y P̂(y|sh) log Q̂(y|sh) of the restricted model against it (Eq. 12), averaged
over short contexts with each one's share of the batch positions as its weight.

Its gradient is computed sample by sample with the crosstalk decomposition of App. C.2, so that memory
does not grow with k: ∇ -Σ_y P̂(y) log Σ_i Q_i(y) = Σ_i ∇[-Σ_y P̂(y) C_i(y) log Q_i(y)] with the
crosstalk weights C_i = Q_i / Σ_j Q_j held constant.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor


def weighted_mean(values: Tensor, weights: Tensor | None) -> Tensor:
    """(P,) -> scalar: the mean, or Σ_p w_p values_p with weights summing to one."""
    return values.mean() if weights is None else (weights * values).sum()


def induced_cross_entropy(target: Tensor, sample_log_probs: Tensor, weights: Tensor | None = None) -> Tensor:
    """-Σ_y P̂(y|sh) log (1/k Σ_i Q(y|sh, x_i)), averaged over short contexts (Eqs. 12, 15).

    ``target`` (P, V) restricted-model probabilities; ``sample_log_probs`` (k, P, V) log Q per sample;
    ``weights`` (P,) summing to one (each short context's share of the batch positions), else uniform.
    """
    k = sample_log_probs.size(0)
    log_induced = torch.logsumexp(sample_log_probs, dim=0) - math.log(k)  # (P, V) log Q̂, Eq. 21
    return weighted_mean(-(target * log_induced).sum(-1), weights)


SampleFn = Callable[[int], Tensor]  # chunk index -> (c, P, V) log-probabilities of c samples


class _CrosstalkInducedCrossEntropy(torch.autograd.Function):
    """Eq. 15 whose gradient is accumulated chunk by chunk with fixed crosstalk weights (App. C.2).

    ∇ -Σ_y P̂(y) log Σ_i Q_i(y) = Σ_i ∇[-Σ_y P̂(y) C_i(y) log Q_i(y)] with C_i = Q_i / Σ_j Q_j held constant.
    Forward: all chunks without a graph, keeping only log Σ_j Q_j (P, V). Backward: each chunk is
    recomputed with a graph, its surrogate differentiated and the graph freed — memory of one chunk.
    The sample function must be deterministic (the IMM passes run without dropout).
    """

    @staticmethod
    def forward(
        ctx: Any, sample_fn: SampleFn, num_chunks: int, target: Tensor, weights: Tensor | None, *params: Tensor
    ) -> Tensor:
        log_total: Tensor | None = None
        count = 0
        for chunk in range(num_chunks):
            log_probs = sample_fn(chunk)  # (c, P, V)
            count += log_probs.size(0)
            chunk_total = torch.logsumexp(log_probs, dim=0)
            log_total = chunk_total if log_total is None else torch.logaddexp(log_total, chunk_total)
        assert log_total is not None
        ctx.sample_fn, ctx.num_chunks, ctx.weights = sample_fn, num_chunks, weights
        # backward runs outside the caller's autocast: recompute the samples under the same precision
        # (bf16 logits), else the crosstalk weights Q_i / sum_j Q_j mix fp32 Q_i with a bf16 total
        device_type = target.device.type
        ctx.autocast = (device_type, torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type))
        ctx.save_for_backward(target, log_total, *params)
        return weighted_mean(-(target * (log_total - math.log(count))).sum(-1), weights)

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor) -> tuple[Tensor | None, ...]:
        target, log_total, *params = ctx.saved_tensors
        grads: list[Tensor | None] = [None] * len(params)
        device_type, autocast, autocast_dtype = ctx.autocast
        for chunk in range(ctx.num_chunks):
            with torch.enable_grad(), torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast):
                log_probs = ctx.sample_fn(chunk)  # (c, P, V), recomputed with a graph, as in forward
                crosstalk = torch.exp(log_probs.detach() - log_total)  # C_i(y), App. C.2 (constant)
                per_context = -(target * crosstalk * log_probs).sum(dim=(0, 2))  # (P,)
                surrogate = weighted_mean(per_context, ctx.weights) * grad_loss
                chunk_grads = torch.autograd.grad(surrogate, params, allow_unused=True)
            for index, grad in enumerate(chunk_grads):
                if grad is not None:
                    grads[index] = grad if grads[index] is None else grads[index] + grad  # type: ignore[operator]
        return (None, None, None, None, *grads)


def crosstalk_induced_cross_entropy(
    sample_fn: SampleFn, num_chunks: int, target: Tensor, params: Sequence[Tensor], weights: Tensor | None = None
) -> Tensor:
    """Eq. 15 over ``num_chunks`` chunks of samples with the memory-saving crosstalk gradient (App. C.2)."""
    loss: Tensor = _CrosstalkInducedCrossEntropy.apply(sample_fn, num_chunks, target, weights, *params)
    return loss
