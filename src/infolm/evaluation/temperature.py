"""Softmax temperature chosen to maximize the validation likelihood (Melis et al. 2018), applied to test.

With temperature T the next-token distribution is p^(1/T) / sum p^(1/T) (thesis Sec. 1.5), i.e.
``softmax(logits / T)``; since ``log_softmax`` of the logits is the log-distribution, this holds for
mixture-of-softmaxes models too. The per-token NLL is convex in beta = 1/T:

    h(beta) = logsumexp(beta z) - beta z_y,  h'(beta) = E_p_beta[z] - z_y,  h''(beta) = Var_p_beta[z] >= 0,

so the optimum is the root of h', found by Newton's method on beta safeguarded by a bracket:
:func:`fit_temperature` on stored logits, :func:`tune_temperature` by re-running the model (one
pass over the split per Newton step).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from infolm.data.batching import IGNORE_INDEX
from infolm.errors import InfolmError
from infolm.evaluation.perplexity import stream_outputs
from infolm.models.base import LanguageModel

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


def _beta_statistics(z: Tensor, y: Tensor, beta: float, dtype: torch.dtype = torch.float64) -> Tensor:
    """Sums over rows of h(beta), h'(beta), h''(beta): a float64 tensor (3,) on the logits' device."""
    out = torch.zeros(3, dtype=torch.float64, device=z.device)
    for start in range(0, z.size(0), _CHUNK):
        zc = z[start : start + _CHUNK].to(dtype)  # (n, V)
        target = zc.gather(1, y[start : start + _CHUNK, None]).squeeze(1)  # (n,)
        scaled = beta * zc
        log_norm = torch.logsumexp(scaled, dim=1)  # (n,)
        p = torch.exp(scaled - log_norm[:, None])  # softmax(beta z)
        mean = (p * zc).sum(1)  # E_p[z]
        variance = ((p * zc.square()).sum(1) - mean.square()).clamp(min=0)  # Var_p[z]
        out[0] += (log_norm - beta * target).sum().double()
        out[1] += (mean - target).sum().double()
        out[2] += variance.sum().double()
    return out


def _minimize_over_beta(
    statistics: Callable[[float], Tensor], bounds: tuple[float, float], tol: float, max_evaluations: int
) -> tuple[float, float, dict[float, float]]:
    """Safeguarded Newton on the convex h(beta) from beta = 1 inside ``bounds`` (temperatures).

    Returns the best evaluated beta, its h, and h at every evaluated beta."""
    if not 0 < bounds[0] < bounds[1]:
        raise InfolmError(f"temperature bounds must satisfy 0 < low < high, got {bounds}")
    low, high = 1.0 / bounds[1], 1.0 / bounds[0]  # beta bracket
    beta = min(max(1.0, low), high)
    seen: dict[float, float] = {}
    for _ in range(max_evaluations):
        h, grad, curvature = statistics(beta).tolist()
        seen[beta] = h
        if grad > 0:
            high = beta
        else:
            low = beta
        newton = beta - grad / curvature if curvature > 0 else math.nan
        step_to = newton if low <= newton <= high else 0.5 * (low + high)  # Newton inside the bracket, else bisect
        if abs(step_to - beta) < tol * beta or high - low < tol * beta:
            break
        beta = step_to
    best = min(seen, key=lambda b: seen[b])
    return best, seen[best], seen


def fit_temperature(
    logits: Tensor, targets: Tensor, bounds: tuple[float, float] = (0.05, 20.0), tol: float = 1e-7
) -> float:
    """The temperature in ``bounds`` that minimizes the NLL of stored ``logits`` (..., V) for ``targets`` (...)."""
    z, y = _flatten(logits, targets)
    if z.numel() == 0:
        raise InfolmError("no targets to fit a temperature on")
    beta, _, _ = _minimize_over_beta(lambda b: _beta_statistics(z, y, b), bounds, tol, 200)
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
    for output, targets in stream_outputs(model, stream, eos_id, batch_size, bptt, device):
        totals += nll_at_temperatures(output.logits, targets, temperatures).cpu()
        tokens += int((targets != IGNORE_INDEX).sum())
    return totals, tokens


@torch.no_grad()
def _stream_beta_statistics(
    model: LanguageModel, stream: Tensor, eos_id: int, beta: float, batch_size: int, bptt: int, device: torch.device
) -> tuple[Tensor, int]:
    """One pass (eval mode): sums of h, h', h'' at ``beta`` over the split, and the token count."""
    totals = torch.zeros(3, dtype=torch.float64, device=device)
    tokens = 0
    for output, targets in stream_outputs(model, stream, eos_id, batch_size, bptt, device):
        z, y = _flatten(output.logits, targets)
        totals += _beta_statistics(z, y, beta, dtype=torch.float32)
        tokens += y.numel()
    return totals.cpu(), tokens


@dataclasses.dataclass
class TemperatureResult:
    temperature: float  # the validation-optimal temperature
    nll: float  # validation NLL per token at that temperature
    nll_at_one: float  # validation NLL per token at T = 1
    tokens: int
    passes: int  # passes over the validation split


def tune_temperature(
    model: LanguageModel,
    valid_stream: Tensor,
    eos_id: int,
    batch_size: int = 10,
    bptt: int = 70,
    device: torch.device | str | None = None,
    bounds: tuple[float, float] = (0.2, 5.0),
    tol: float = 1e-4,
    max_passes: int = 12,
) -> TemperatureResult:
    """Newton's method on beta = 1/T by re-running the model: each pass over validation gives the
    NLL and its first two derivatives at one beta; it starts at T = 1 and usually needs 3-5 passes."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    counts: list[int] = []

    def statistics(beta: float) -> Tensor:
        totals, tokens = _stream_beta_statistics(model, valid_stream, eos_id, beta, batch_size, bptt, device)
        if tokens == 0:
            raise InfolmError("the validation split is empty: cannot tune the softmax temperature")
        counts.append(tokens)
        return totals

    beta, h, seen = _minimize_over_beta(statistics, bounds, tol, max_passes)
    tokens = counts[0]
    at_one = seen[1.0] / tokens if 1.0 in seen else math.nan
    return TemperatureResult(1.0 / beta, h / tokens, at_one, tokens, len(counts))


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
