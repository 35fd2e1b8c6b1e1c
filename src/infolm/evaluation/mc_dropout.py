"""Monte Carlo dropout evaluation (Gal and Ghahramani 2016; Melis et al. 2018, 2020):
the probability of each token is averaged over N dropout masks,

    p(w_t | w_<t) = 1/N sum_d p(w_t | w_<t, M^d),

with dropout on (train mode, no gradients). Each mask sample d carries its own recurrent state
along the split (a new mask is drawn per window, as dropout layers draw one per forward call).
``samples_per_pass > 1`` evaluates that many samples in one forward pass by repeating the rows;
this is exact only when the model draws dropout masks independently per row (standard and locked
dropout do; embedding dropout that drops vocabulary rows for the whole batch does not).
Melis et al. (2020) averaged 200 masks. The split follows the evaluation stream convention
(``infolm.evaluation.perplexity.stream_batches``).

Thesis Sec. 2.2.2: "Optimal softmax temperature is determined on the validation set, and in the MC
case, dropout rates are scaled". ``rate_scale`` multiplies every dropout rate of the model during the
MC passes and ``temperature`` divides the logits; :func:`run_mc_dropout` tunes both on the validation
split (a grid of rate scales; for each, all temperatures of the grid from the same passes) and
applies the best pair to test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from infolm.data.batching import IGNORE_INDEX
from infolm.errors import InfolmError
from infolm.evaluation.perplexity import stream_batches, stream_nll
from infolm.models.base import LanguageModel, detach_state
from infolm.progress import reporter


@dataclasses.dataclass
class MCDropoutConfig:
    samples: int = 200  # dropout masks averaged per token (Melis et al. 2020: 200)
    samples_per_pass: int = 1  # masks per forward pass (rows repeated); >1 needs per-row dropout masks
    batch_size: int = 10  # parallel rows of the split
    bptt: int = 70  # window length
    seed: int = 0  # seeds the masks (the global RNG is left untouched)
    rate_scale: float = 1.0  # every dropout rate x this during the MC passes (Sec. 2.2.2; tuned on valid)
    temperature: float = 1.0  # softmax temperature of each mask's prediction (Sec. 2.2.2; tuned on valid)

    def __post_init__(self) -> None:
        for key in ("samples", "samples_per_pass", "batch_size", "bptt"):
            if getattr(self, key) < 1:
                raise InfolmError(f"mc_dropout.{key} must be positive, got {getattr(self, key)}")
        if self.rate_scale < 0 or self.temperature <= 0:
            raise InfolmError(
                f"mc_dropout.rate_scale must be >= 0 and temperature > 0, got {self.rate_scale}, {self.temperature}"
            )


@dataclasses.dataclass
class MCDropoutGrid:
    """What :func:`run_mc_dropout` tries on valid (the thesis tunes both; its grid is not stated)."""

    # multipliers of the dropout rates; the converged PTB LSTM picked 0.6 when it was the grid's lowest,
    # so the grid reaches down to 0.2 (0 would be the deterministic model itself)
    rate_scales: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8, 1.0)
    temperatures: tuple[float, ...] = (0.9, 0.95, 1.0, 1.05, 1.1)  # softmax temperatures
    max_tokens: int | None = None  # tune on this prefix of valid (None: all of it)


MAX_RATE = 0.95  # a scaled rate is capped here (a rate of 1 drops everything)


def _dropout_fields(config: Any) -> list[str]:
    if not dataclasses.is_dataclass(config):
        return []
    names = [f.name for f in dataclasses.fields(config)]
    return [
        n for n in names if (n.startswith("dropout") or n == "weight_drop") and isinstance(getattr(config, n), float)
    ]


@contextlib.contextmanager
def scaled_dropout_rates(model: nn.Module, factor: float) -> Iterator[None]:
    """Every dropout rate of ``model`` x ``factor`` (capped at 0.95) inside the context, restored after:
    the ``p`` of ``nn.Dropout`` modules and the ``dropout*`` / ``weight_drop`` fields of the model's
    (and submodules') config dataclasses, which infolm's models read at each forward pass."""
    saved: list[tuple[Any, str, float]] = []
    seen: set[int] = set()
    try:
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                saved.append((module, "p", module.p))
                module.p = min(module.p * factor, MAX_RATE)
            config = getattr(module, "config", None)
            if config is not None and id(config) not in seen:
                seen.add(id(config))
                for name in _dropout_fields(config):
                    rate = getattr(config, name)
                    saved.append((config, name, rate))
                    object.__setattr__(config, name, min(rate * factor, MAX_RATE))
        yield
    finally:
        for owner, name, rate in reversed(saved):
            object.__setattr__(owner, name, rate)


@dataclasses.dataclass
class MCDropoutResult:
    nll: float  # summed negative log of the mask-averaged probabilities (nats)
    tokens: int  # tokens predicted
    samples: int  # masks averaged

    @property
    def loss(self) -> float:
        return self.nll / max(self.tokens, 1)


def _target_log_probs(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
    """log p(target) per position under softmax(logits / temperature), (R, T); padding positions get 0."""
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)  # (R, T, V)
    index = targets.clamp(min=0).unsqueeze(-1)
    return log_probs.gather(-1, index).squeeze(-1) * (targets != IGNORE_INDEX)


@torch.no_grad()
def mc_dropout_evaluate(
    model: LanguageModel,
    stream: Tensor,
    eos_id: int,
    config: MCDropoutConfig | None = None,
    device: torch.device | str | None = None,
) -> MCDropoutResult:
    """Negative log-likelihood of ``stream`` with the token probabilities averaged over dropout masks
    (rates x ``config.rate_scale``, softmax at ``config.temperature``)."""
    config = config or MCDropoutConfig()
    return mc_dropout_at_temperatures(model, stream, eos_id, config, (config.temperature,), device)[0]


@torch.no_grad()
def mc_dropout_at_temperatures(
    model: LanguageModel,
    stream: Tensor,
    eos_id: int,
    config: MCDropoutConfig,
    temperatures: Sequence[float],
    device: torch.device | str | None = None,
) -> list[MCDropoutResult]:
    """:func:`mc_dropout_evaluate` at several temperatures from the same masks (one result each)."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    per_pass = min(config.samples_per_pass, config.samples)
    groups = [min(per_pass, config.samples - start) for start in range(0, config.samples, per_pass)]
    states: list[Any] = [None] * len(groups)
    totals, tokens = [0.0] * len(temperatures), 0
    was_training = model.training
    devices = [device] if device.type == "cuda" else []
    try:
        model.train()
        with torch.random.fork_rng(devices=devices), scaled_dropout_rates(model, config.rate_scale):
            torch.manual_seed(config.seed)
            for inputs, targets in stream_batches(stream, eos_id, config.batch_size, config.bptt):
                inputs, targets = inputs.to(device), targets.to(device)
                rows = inputs.size(0)
                log_means: list[Tensor | None] = [None] * len(temperatures)  # log sum_d p_d(target), (B, T)
                for g, size in enumerate(groups):
                    if states[g] is None:
                        states[g] = model.init_state(rows * size, device)
                    output = model(inputs.repeat(size, 1), states[g])  # (size * B, T, V)
                    states[g] = detach_state(output.state)
                    for k, temperature in enumerate(temperatures):
                        log_p = _target_log_probs(output.logits, targets.repeat(size, 1), temperature)
                        group_sum = torch.logsumexp(log_p.view(size, rows, -1), dim=0)  # (B, T)
                        previous = log_means[k]
                        log_means[k] = group_sum if previous is None else torch.logaddexp(previous, group_sum)
                mask = targets != IGNORE_INDEX
                for k, log_mean in enumerate(log_means):
                    assert log_mean is not None
                    totals[k] -= float(((log_mean - math.log(config.samples)) * mask).sum())  # log of the mean
                tokens += int(mask.sum())
    finally:
        model.train(was_training)
    return [MCDropoutResult(total, tokens, config.samples) for total in totals]


def run_mc_dropout(
    model: LanguageModel,
    corpus: Any,
    config: MCDropoutConfig | None = None,
    device: torch.device | str | None = None,
    grid: MCDropoutGrid | None = None,
) -> dict[str, float]:
    """``infolm evaluate``: MC-dropout NLL per token on valid and test, with the dropout-rate scale and
    the temperature tuned on valid (Sec. 2.2.2) unless ``grid`` is empty (``MCDropoutGrid((), ())``:
    ``config``'s own values)."""
    config = config or MCDropoutConfig()
    grid = grid if grid is not None else MCDropoutGrid()
    eos = corpus.vocab.eos_id
    tuning: list[dict[str, float]] = []
    tuned = bool(grid.rate_scales and grid.temperatures)
    passes = (len(grid.rate_scales) if tuned else 0) + 2  # the grid on valid, then valid and test
    progress = reporter("evaluate (MC dropout)", passes, unit="pass")
    if tuned:
        valid_stream = corpus.stream("valid")
        if grid.max_tokens is not None:
            valid_stream = valid_stream[: grid.max_tokens]
        for scale in grid.rate_scales:
            trial = dataclasses.replace(config, rate_scale=scale)
            results = mc_dropout_at_temperatures(model, valid_stream, eos, trial, grid.temperatures, device)
            for temperature, result in zip(grid.temperatures, results, strict=True):
                tuning.append({"rate_scale": scale, "temperature": temperature, "valid_nll": result.loss})
            progress.update(len(tuning) // len(grid.temperatures), stage="tuning on valid")
        best = min(tuning, key=lambda row: row["valid_nll"])
        config = dataclasses.replace(config, rate_scale=best["rate_scale"], temperature=best["temperature"])
    valid = mc_dropout_evaluate(model, corpus.stream("valid"), eos, config, device)
    progress.update(passes - 1, stage="valid")
    test = mc_dropout_evaluate(model, corpus.stream("test"), eos, config, device)
    progress.update(passes, stage="test")
    progress.close()
    tuned_tokens = (
        float(valid.tokens if grid.max_tokens is None else min(grid.max_tokens, valid.tokens)) if tuned else 0.0
    )
    where = device if device is not None else next(model.parameters()).device
    standard_nll, standard_tokens = stream_nll(model, corpus.stream("test"), eos, config.batch_size, config.bptt, where)
    return {
        "valid_nll": valid.loss,
        "test_nll": test.loss,
        "standard_test_nll": standard_nll / max(standard_tokens, 1),
        "valid_tokens": valid.tokens,
        "test_tokens": test.tokens,
        "samples": config.samples,
        "rate_scale": config.rate_scale,
        "temperature": config.temperature,
        "tuned_on_valid_tokens": tuned_tokens,
    }
