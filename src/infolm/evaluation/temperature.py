"""Softmax temperature chosen to maximize the validation likelihood (Melis et al. 2018), applied to test.

With temperature T the next-token distribution is p^(1/T) / sum p^(1/T) (thesis Sec. 1.5), i.e.
``softmax(logits / T)``; since ``log_softmax`` of the logits is the log-distribution, this holds for
mixture-of-softmaxes models too. The per-token NLL is convex in beta = 1/T:

    h(beta) = logsumexp(beta z) - beta z_y,  h'(beta) = E_p_beta[z] - z_y,  h''(beta) = Var_p_beta[z] >= 0,

so the optimum is the root of h'. :func:`fit_temperature` finds it exactly on stored logits
(safeguarded Newton); :func:`tune_temperature` re-runs the model over the split, scoring a coarse
grid of temperatures in one pass and a fine grid around the best in a second pass.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from infolm.data.batching import IGNORE_INDEX
from infolm.errors import InfolmError
from infolm.evaluation.perplexity import stream_batches
from infolm.models.base import LanguageModel, detach_state

_CHUNK = 2048  # rows of logits processed at once (bounds the float64 working memory)


def _flatten(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """Rows of logits (N, V) and their targets (N,), padding removed."""
    z = logits.reshape(-1, logits.size(-1))
    y = targets.reshape(-1)
    keep = y != IGNORE_INDEX
    return z[keep], y[keep]


def nll_at_temperatures(logits: Tensor, targets: Tensor, temperatures: Sequence[float] | Tensor) -> Tensor:
    """Summed NLL (nats, float64) of ``targets`` under ``softmax(logits / T)`` for each T: (K,)."""
    z, y = _flatten(logits, targets)
    temps = torch.as_tensor(temperatures, dtype=torch.float64).flatten()
    out = torch.zeros(temps.numel(), dtype=torch.float64, device=z.device)
    for start in range(0, z.size(0), _CHUNK):
        zc = z[start : start + _CHUNK].double()  # (n, V)
        target = zc.gather(1, y[start : start + _CHUNK, None]).squeeze(1)  # (n,)
        for k, t in enumerate(temps.tolist()):
            out[k] += (torch.logsumexp(zc / t, dim=1) - target / t).sum()
    return out.cpu()


def _beta_derivatives(z: Tensor, y: Tensor, beta: float) -> tuple[float, float]:
    """h'(beta) and h''(beta) summed over rows."""
    grad, curvature = 0.0, 0.0
    for start in range(0, z.size(0), _CHUNK):
        zc = z[start : start + _CHUNK].double()
        p = torch.softmax(beta * zc, dim=1)
        mean = (p * zc).sum(1)
        grad += float((mean - zc.gather(1, y[start : start + _CHUNK, None]).squeeze(1)).sum())
        curvature += float(((p * zc.square()).sum(1) - mean.square()).clamp(min=0).sum())
    return grad, curvature


def fit_temperature(
    logits: Tensor, targets: Tensor, bounds: tuple[float, float] = (0.05, 20.0), tol: float = 1e-7
) -> float:
    """The temperature in ``bounds`` that minimizes the NLL of stored ``logits`` (..., V) for ``targets`` (...)."""
    z, y = _flatten(logits, targets)
    if z.numel() == 0:
        raise InfolmError("no targets to fit a temperature on")
    low, high = 1.0 / bounds[1], 1.0 / bounds[0]  # beta bracket
    if _beta_derivatives(z, y, low)[0] >= 0:
        return bounds[1]
    if _beta_derivatives(z, y, high)[0] <= 0:
        return bounds[0]
    beta = min(max(1.0, low), high)
    for _ in range(100):
        grad, curvature = _beta_derivatives(z, y, beta)
        if grad > 0:
            high = beta
        else:
            low = beta
        newton = beta - grad / curvature if curvature > 0 else math.nan
        beta = newton if low < newton < high else 0.5 * (low + high)  # Newton inside the bracket, else bisect
        if high - low < tol * beta or abs(grad) < tol * z.size(0):
            break
    return 1.0 / beta


@torch.no_grad()
def stream_nll_at_temperatures(
    model: LanguageModel,
    stream: Tensor,
    eos_id: int,
    temperatures: Sequence[float],
    batch_size: int = 10,
    bptt: int = 70,
    device: torch.device | str | None = None,
) -> tuple[Tensor, int]:
    """Summed NLL over a split for each temperature (one pass, eval mode): ((K,) float64, tokens)."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    totals = torch.zeros(len(temperatures), dtype=torch.float64)
    tokens = 0
    state: Any = None
    was_training = model.training
    model.eval()
    try:
        for inputs, targets in stream_batches(stream, eos_id, batch_size, bptt):
            inputs, targets = inputs.to(device), targets.to(device)
            if state is None:
                state = model.init_state(inputs.size(0), device)
            output = model(inputs, state)
            state = detach_state(output.state)
            totals += nll_at_temperatures(output.logits, targets, temperatures).cpu()
            tokens += int((targets != IGNORE_INDEX).sum())
    finally:
        model.train(was_training)
    return totals, tokens


@dataclasses.dataclass
class TemperatureResult:
    temperature: float  # the validation-optimal temperature
    nll: float  # validation NLL per token at that temperature
    nll_at_one: float  # validation NLL per token at T = 1
    tokens: int


def tune_temperature(
    model: LanguageModel,
    valid_stream: Tensor,
    eos_id: int,
    batch_size: int = 10,
    bptt: int = 70,
    device: torch.device | str | None = None,
    coarse: Sequence[float] | None = None,
    fine_points: int = 21,
) -> TemperatureResult:
    """Two passes over validation: a coarse grid (default 25 points from 0.25 to 4, geometric), then
    ``fine_points`` evenly spaced between the neighbours of the best coarse point (about 1% apart)."""
    grid = list(coarse) if coarse is not None else torch.logspace(-2, 2, 25, base=2.0, dtype=torch.float64).tolist()
    if 1.0 not in grid:
        grid.append(1.0)
    grid.sort()
    totals, tokens = stream_nll_at_temperatures(model, valid_stream, eos_id, grid, batch_size, bptt, device)
    if tokens == 0:
        raise InfolmError("the validation split is empty: cannot tune the softmax temperature")
    at_one = float(totals[grid.index(1.0)]) / tokens
    best = int(torch.argmin(totals))
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    fine = torch.linspace(low, high, fine_points, dtype=torch.float64).tolist()
    fine_totals, _ = stream_nll_at_temperatures(model, valid_stream, eos_id, fine, batch_size, bptt, device)
    k = int(torch.argmin(fine_totals))
    if fine_totals[k] > totals[best]:  # keep the coarse optimum if the fine grid is no better
        return TemperatureResult(grid[best], float(totals[best]) / tokens, at_one, tokens)
    return TemperatureResult(fine[k], float(fine_totals[k]) / tokens, at_one, tokens)


def run_temperature(
    model: LanguageModel, corpus: Any, batch_size: int = 10, bptt: int = 70, device: torch.device | str | None = None
) -> dict[str, float]:
    """``infolm evaluate``: tune T on valid, report valid and test NLL per token at T and at 1."""
    eos = corpus.vocab.eos_id
    tuned = tune_temperature(model, corpus.stream("valid"), eos, batch_size, bptt, device)
    test, tokens = stream_nll_at_temperatures(
        model, corpus.stream("test"), eos, [1.0, tuned.temperature], batch_size, bptt, device
    )
    return {
        "temperature": tuned.temperature,
        "valid_nll": tuned.nll,
        "valid_nll_t1": tuned.nll_at_one,
        "test_nll": float(test[1]) / max(tokens, 1),
        "test_nll_t1": float(test[0]) / max(tokens, 1),
        "test_tokens": tokens,
    }
