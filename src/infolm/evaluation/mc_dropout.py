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
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import Tensor

from infolm.data.batching import IGNORE_INDEX
from infolm.errors import InfolmError
from infolm.evaluation.perplexity import stream_batches
from infolm.models.base import LanguageModel, detach_state


@dataclasses.dataclass
class MCDropoutConfig:
    samples: int = 200  # dropout masks averaged per token (Melis et al. 2020: 200)
    samples_per_pass: int = 1  # masks per forward pass (rows repeated); >1 needs per-row dropout masks
    batch_size: int = 10  # parallel rows of the split
    bptt: int = 70  # window length
    seed: int = 0  # seeds the masks (the global RNG is left untouched)

    def __post_init__(self) -> None:
        for key in ("samples", "samples_per_pass", "batch_size", "bptt"):
            if getattr(self, key) < 1:
                raise InfolmError(f"mc_dropout.{key} must be positive, got {getattr(self, key)}")


@dataclasses.dataclass
class MCDropoutResult:
    nll: float  # summed negative log of the mask-averaged probabilities (nats)
    tokens: int  # tokens predicted
    samples: int  # masks averaged

    @property
    def loss(self) -> float:
        return self.nll / max(self.tokens, 1)


def _target_log_probs(logits: Tensor, targets: Tensor) -> Tensor:
    """log p(target) per position, (R, T); padding positions get 0."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # (R, T, V)
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
    """Negative log-likelihood of ``stream`` with the token probabilities averaged over dropout masks."""
    config = config or MCDropoutConfig()
    device = torch.device(device) if device is not None else next(model.parameters()).device
    per_pass = min(config.samples_per_pass, config.samples)
    groups = [min(per_pass, config.samples - start) for start in range(0, config.samples, per_pass)]
    states: list[Any] = [None] * len(groups)
    total, tokens = 0.0, 0
    was_training = model.training
    devices = [device] if device.type == "cuda" else []
    try:
        model.train()
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(config.seed)
            for inputs, targets in stream_batches(stream, eos_id, config.batch_size, config.bptt):
                inputs, targets = inputs.to(device), targets.to(device)
                rows = inputs.size(0)
                log_mean: Tensor | None = None  # log sum_d p_d(target), (B, T)
                for g, size in enumerate(groups):
                    if states[g] is None:
                        states[g] = model.init_state(rows * size, device)
                    output = model(inputs.repeat(size, 1), states[g])  # (size * B, T, V)
                    states[g] = detach_state(output.state)
                    log_p = _target_log_probs(output.logits, targets.repeat(size, 1)).view(size, rows, -1)
                    group_sum = torch.logsumexp(log_p, dim=0)  # (B, T)
                    log_mean = group_sum if log_mean is None else torch.logaddexp(log_mean, group_sum)
                assert log_mean is not None
                mask = targets != IGNORE_INDEX
                total -= float(((log_mean - math.log(config.samples)) * mask).sum())  # log of the mean
                tokens += int(mask.sum())
    finally:
        model.train(was_training)
    return MCDropoutResult(total, tokens, config.samples)


def run_mc_dropout(
    model: LanguageModel, corpus: Any, config: MCDropoutConfig | None = None, device: torch.device | str | None = None
) -> dict[str, float]:
    """``infolm evaluate``: MC-dropout NLL per token on valid and test."""
    config = config or MCDropoutConfig()
    eos = corpus.vocab.eos_id
    valid = mc_dropout_evaluate(model, corpus.stream("valid"), eos, config, device)
    test = mc_dropout_evaluate(model, corpus.stream("test"), eos, config, device)
    return {
        "valid_nll": valid.loss,
        "test_nll": test.loss,
        "valid_tokens": valid.tokens,
        "test_tokens": test.tokens,
        "samples": config.samples,
    }
