"""Dynamic evaluation (Krause et al. 2018): adapt the weights to the text while scoring it.

After each segment s_i is scored, one gradient step is taken on it with the RMS-normalized update
and a decay towards the trained weights theta_1 (Krause et al. 2018, Eq. 8):

    theta <- theta - lr * grad / (sqrt(MS) + eps) + decay * RMS_norm * (theta_1 - theta)
    RMS_norm = sqrt(MS) / mean(sqrt(MS))

where MS is the mean squared gradient per weight collected on training data
(:func:`gradient_statistics`) and ``decay * RMS_norm`` is clipped at 1 so that no weight
overshoots theta_1. The split is walked with the evaluation stream convention
(``infolm.evaluation.perplexity.stream_batches``); the model is in eval mode (no dropout), the
gradient of a segment is that of its per-token mean loss, and the trained weights are restored
afterwards. Hyperparameters are tuned on validation by :func:`tune_dynamic_eval`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from infolm.data.batching import IGNORE_INDEX
from infolm.errors import InfolmError
from infolm.evaluation.perplexity import stream_batches
from infolm.models.base import LanguageModel, detach_state
from infolm.progress import Reporter, reporter

MIN_MS_WINDOWS = 10  # fewer training windows than this behind MS earn a warning (PTB at 1,024 x 20: 45)


@dataclasses.dataclass
class DynamicEvalConfig:
    lr: float = 1e-4  # eta of Eq. 8 (Melis et al. 2020 tune it in [1e-6, 1e-3], log scale)
    decay: float = 1e-3  # lambda, decay towards the trained weights (tuned in [1e-6, 1e-2], log scale)
    epsilon: float = 1e-5  # added to sqrt(MS) (tuned in [1e-8, 1e-2], log scale)
    bptt: int = (
        20  # segment length, max_time_steps: one update per segment (tuned in 1..20 word / 1..50 char, Table 2.6)
    )
    batch_size: int = 1  # parallel rows of the split sharing the weights (1: one stream, as in Krause et al.)
    ms_batch_size: int = 1024  # rows of the training stream per batch when collecting MS (thesis App. 2.A: 1024)
    ms_bptt: int = 20  # window length when collecting MS
    ms_max_tokens: int | None = None  # collect MS on at most this many training tokens (None: all)

    def __post_init__(self) -> None:
        for key in ("lr", "decay", "epsilon"):
            if getattr(self, key) < 0:
                raise InfolmError(f"dynamic evaluation {key} must be non-negative, got {getattr(self, key)}")
        for key in ("bptt", "batch_size", "ms_batch_size", "ms_bptt"):
            if getattr(self, key) < 1:
                raise InfolmError(f"dynamic evaluation {key} must be positive, got {getattr(self, key)}")


@dataclasses.dataclass
class DynamicEvalGrid:
    # 12 points inside Melis et al.'s ranges; a small epsilon with a large lr can diverge (rare words have MS ~ 0)
    lr: list[float] = dataclasses.field(default_factory=lambda: [1e-5, 1e-4, 1e-3])  # eta candidates
    decay: list[float] = dataclasses.field(default_factory=lambda: [1e-3, 1e-2])  # lambda candidates
    epsilon: list[float] = dataclasses.field(default_factory=lambda: [1e-5, 1e-3])  # epsilon candidates
    # max_time_steps candidates (Table 2.6 tunes it in 1..20 word-level, 1..50 character-level); empty: base's
    bptt: list[int] = dataclasses.field(default_factory=lambda: [5, 10, 20])
    max_tokens: int | None = None  # tune on the first N validation tokens (None: all of it)

    def candidates(self, base: DynamicEvalConfig) -> list[DynamicEvalConfig]:
        steps = self.bptt or [base.bptt]
        return [
            dataclasses.replace(base, lr=lr, decay=decay, epsilon=eps, bptt=bptt)
            for lr, decay, eps, bptt in itertools.product(self.lr, self.decay, self.epsilon, steps)
        ]


@dataclasses.dataclass
class DynamicEvalResult:
    nll: float  # summed negative log-likelihood (nats)
    tokens: int  # tokens predicted

    @property
    def loss(self) -> float:
        """Mean nats per token."""
        return self.nll / max(self.tokens, 1)


def _trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


@contextlib.contextmanager
def _eval_mode_with_grad(model: nn.Module, device: torch.device) -> Iterator[None]:
    """Eval mode (no dropout) with gradients; cuDNN RNNs refuse backward in eval mode, so it is off on CUDA."""
    was_training = model.training
    model.eval()
    cudnn = torch.backends.cudnn.flags(enabled=False) if device.type == "cuda" else contextlib.nullcontext()
    try:
        with torch.enable_grad(), cudnn:
            yield
    finally:
        model.train(was_training)


def _segment_nll(model: LanguageModel, inputs: Tensor, targets: Tensor, state: Any) -> tuple[Tensor, int, Any]:
    output = model(inputs, state)
    logits = output.logits.float()  # (B, T, V)
    nll = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
    return nll, int((targets != IGNORE_INDEX).sum()), output.state


def gradient_statistics(
    model: LanguageModel,
    stream: Tensor,
    eos_id: int,
    batch_size: int = 64,
    bptt: int = 20,
    max_tokens: int | None = None,
    device: torch.device | str | None = None,
) -> list[Tensor]:
    """MS: the mean over training windows of the squared gradient of the per-token mean loss,
    one tensor per trainable parameter (Krause et al. 2018, Sec. 3.2)."""
    params = _trainable(model)
    device = torch.device(device) if device is not None else params[0].device
    if max_tokens is not None:
        stream = stream[:max_tokens]
    squares = [torch.zeros_like(p, dtype=torch.float32) for p in params]
    windows = 0
    state: Any = None
    with _eval_mode_with_grad(model, device):
        for inputs, targets in stream_batches(stream, eos_id, batch_size, bptt):
            inputs, targets = inputs.to(device), targets.to(device)
            if state is None:
                state = model.init_state(inputs.size(0), device)
            nll, count, state = _segment_nll(model, inputs, targets, state)
            state = detach_state(state)
            if count == 0:
                continue
            grads = torch.autograd.grad(nll / count, params, allow_unused=True)
            for square, grad in zip(squares, grads):
                if grad is not None:
                    square.add_(grad.float().square())
            windows += 1
    if windows == 0:
        raise InfolmError("no training tokens to collect gradient statistics for dynamic evaluation")
    if windows < MIN_MS_WINDOWS:  # then MS is the square of a few averaged gradients, not a mean of squares
        print(
            f"infolm: warning: dynamic evaluation's gradient statistics come from {windows} window(s) of "
            f"{batch_size} rows x {bptt} tokens; give it more training tokens or fewer rows",
            file=sys.stderr,
        )
    return [square / windows for square in squares]


def dynamic_evaluate(
    model: LanguageModel,
    stream: Tensor,
    eos_id: int,
    ms: Sequence[Tensor],
    config: DynamicEvalConfig,
    device: torch.device | str | None = None,
) -> DynamicEvalResult:
    """Score ``stream`` with dynamic evaluation; the model's weights are restored afterwards."""
    params = _trainable(model)
    if len(ms) != len(params) or any(m.shape != p.shape for m, p in zip(ms, params)):
        raise InfolmError("gradient statistics do not match the model's parameters")
    device = torch.device(device) if device is not None else params[0].device
    trained = [p.detach().clone() for p in params]  # theta_1
    rms = [m.to(device=p.device, dtype=torch.float32).sqrt() for m, p in zip(ms, params)]
    mean_rms = sum(float(r.sum()) for r in rms) / sum(r.numel() for r in rms)
    if mean_rms <= 0:
        raise InfolmError("gradient statistics are all zero; collect them on training data first")
    decay_rates = [(config.decay * r / mean_rms).clamp_(max=1.0) for r in rms]  # lambda * RMS_norm <= 1
    denominators = [r + config.epsilon for r in rms]  # sqrt(MS) + eps
    adapt = config.lr > 0  # with lr = 0 the weights never leave theta_1 (the decay term stays 0)

    total, tokens = 0.0, 0
    state: Any = None
    try:
        with _eval_mode_with_grad(model, device):
            for inputs, targets in stream_batches(stream, eos_id, config.batch_size, config.bptt):
                inputs, targets = inputs.to(device), targets.to(device)
                if state is None:
                    state = model.init_state(inputs.size(0), device)
                if not adapt:
                    with torch.no_grad():
                        nll, count, state = _segment_nll(model, inputs, targets, state)
                    total, tokens = total + float(nll), tokens + count
                    continue
                nll, count, state = _segment_nll(model, inputs, targets, state)
                state = detach_state(state)
                total, tokens = total + float(nll.detach()), tokens + count
                if count == 0:
                    continue
                grads = torch.autograd.grad(nll / count, params, allow_unused=True)
                with torch.no_grad():  # Eq. 8, both terms from the weights that scored the segment
                    for p, grad, theta_1, rate, denominator in zip(params, grads, trained, decay_rates, denominators):
                        step = rate * (theta_1 - p.float())
                        if grad is not None:
                            step.sub_(config.lr * grad.float() / denominator)
                        p.add_(step.to(p.dtype))
    finally:
        with torch.no_grad():
            for p, theta_1 in zip(params, trained):
                p.copy_(theta_1)
    return DynamicEvalResult(total, tokens)


def tune_dynamic_eval(
    model: LanguageModel,
    valid_stream: Tensor,
    eos_id: int,
    ms: Sequence[Tensor],
    base: DynamicEvalConfig | None = None,
    grid: DynamicEvalGrid | None = None,
    device: torch.device | str | None = None,
    progress: Reporter | None = None,
    progress_offset: int = 0,
) -> tuple[DynamicEvalConfig, list[tuple[DynamicEvalConfig, float]]]:
    """Grid search of (lr, decay, epsilon, max_time_steps) on validation (Table 2.6); returns the best
    config and every trial's loss."""
    base = base or DynamicEvalConfig()
    grid = grid or DynamicEvalGrid()
    stream = valid_stream[: grid.max_tokens] if grid.max_tokens is not None else valid_stream
    trials = []
    for candidate in grid.candidates(base):
        loss = dynamic_evaluate(model, stream, eos_id, ms, candidate, device).loss
        trials.append((candidate, loss if math.isfinite(loss) else math.inf))
        if progress is not None:
            progress.update(progress_offset + len(trials), stage="tuning on valid")
    if not trials:
        raise InfolmError("the dynamic evaluation grid is empty")
    best = min(trials, key=lambda trial: trial[1])[0]
    return best, trials


def run_dynamic_eval(
    model: LanguageModel,
    corpus: Any,
    base: DynamicEvalConfig | None = None,
    grid: DynamicEvalGrid | None = None,
    device: torch.device | str | None = None,
) -> dict[str, Any]:
    """``infolm evaluate``: MS on train, grid search on valid, then valid and test with the best setting.

    Returns ``{"valid_nll", "test_nll", "valid_tokens", "test_tokens", "static_valid_nll", "static_test_nll",
    "lr", "decay", "epsilon", "bptt", "trials"}`` (per-token nats); the static losses walk the split the same
    way with the weights held (lr 0), so each is the baseline of its dynamic loss.
    """
    base = base or DynamicEvalConfig()
    grid = grid or DynamicEvalGrid()
    eos = corpus.vocab.eos_id
    passes = 1 + len(grid.candidates(base)) + 4  # statistics, the grid, static valid, valid, static test, test
    progress = reporter("evaluate (dynamic)", passes, unit="pass")
    ms = gradient_statistics(
        model, corpus.stream("train"), eos, base.ms_batch_size, base.ms_bptt, base.ms_max_tokens, device
    )
    progress.update(1, stage="gradient statistics")
    best, trials = tune_dynamic_eval(model, corpus.stream("valid"), eos, ms, base, grid, device, progress, 1)
    static = dynamic_evaluate(model, corpus.stream("valid"), eos, ms, dataclasses.replace(best, lr=0.0), device)
    progress.update(passes - 3, stage="static valid")
    valid = dynamic_evaluate(model, corpus.stream("valid"), eos, ms, best, device)
    progress.update(passes - 2, stage="valid")
    static_test = dynamic_evaluate(model, corpus.stream("test"), eos, ms, dataclasses.replace(best, lr=0.0), device)
    progress.update(passes - 1, stage="static test")
    test = dynamic_evaluate(model, corpus.stream("test"), eos, ms, best, device)
    progress.update(passes, stage="test")
    progress.close()
    return {
        "valid_nll": valid.loss,
        "test_nll": test.loss,
        "valid_tokens": valid.tokens,
        "test_tokens": test.tokens,
        "static_valid_nll": static.loss,
        "static_test_nll": static_test.loss,
        "lr": best.lr,
        "decay": best.decay,
        "epsilon": best.epsilon,
        "bptt": best.bptt,
        "ms_batch_size": base.ms_batch_size,
        "trials": [
            {"lr": c.lr, "decay": c.decay, "epsilon": c.epsilon, "bptt": c.bptt, "nll": loss} for c, loss in trials
        ],
    }
