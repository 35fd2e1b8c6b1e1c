"""Perplexity / bits per character over a full split, in batched BPTT windows."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from infolm.data.batching import IGNORE_INDEX, eval_windows
from infolm.models.base import LanguageModel, detach_state


def stream_batches(stream: Tensor, eos_id: int, batch_size: int, bptt: int) -> Iterator[tuple[Tensor, Tensor]]:
    """Evaluation windows: every token of ``stream`` is a target once, the first predicted from <eos>."""
    return eval_windows(stream, eos_id, batch_size, bptt)


def stream_outputs(
    model: LanguageModel, stream: Tensor, eos_id: int, batch_size: int, bptt: int, device: torch.device | str
) -> Iterator[tuple[Any, Tensor]]:
    """Walk a whole split in eval mode with the recurrent state carried: yields ``(LMOutput, targets)``
    per window (targets (B, T), padding ``IGNORE_INDEX``). Call it under ``torch.no_grad()``; the
    model's train/eval mode is restored when the walk ends."""
    was_training = model.training
    model.eval()
    state: Any = None
    try:
        for inputs, targets in stream_batches(stream, eos_id, batch_size, bptt):
            inputs, targets = inputs.to(device), targets.to(device)
            if state is None:
                state = model.init_state(inputs.size(0), device)
            output = model(inputs, state)
            state = detach_state(output.state)
            yield output, targets
    finally:
        model.train(was_training)


@torch.no_grad()
def stream_nll(
    model: LanguageModel,
    stream: Tensor,
    eos_id: int,
    batch_size: int = 10,
    bptt: int = 70,
    device: torch.device | str = "cpu",
    temperature: float = 1.0,
) -> tuple[float, int]:
    """Summed negative log-likelihood (nats) and token count over a whole split.

    The split is cut into ``batch_size`` contiguous rows walked in ``bptt`` windows with the
    recurrent state carried; the model is put in eval mode and restored afterwards.
    """
    total, count = 0.0, 0
    for output, targets in stream_outputs(model, stream, eos_id, batch_size, bptt, device):
        logits = output.logits.float() / temperature
        nll = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
        )
        total += float(nll)
        count += int((targets != IGNORE_INDEX).sum())
    return total, count


def summarize(nll_sum: float, tokens: int, level: str) -> dict[str, float]:
    """``{"nll": per-token nats, "ppl": ..., "tokens": ...}`` plus ``bpc`` for character data."""
    nll = nll_sum / max(tokens, 1)
    out = {"nll": nll, "ppl": math.exp(min(nll, 700.0)), "tokens": tokens}
    if level == "char":
        out["bpc"] = nll / math.log(2)
    return out


def evaluate_split(
    model: LanguageModel,
    corpus: Any,
    split: str,
    batch_size: int = 10,
    bptt: int = 70,
    device: torch.device | str = "cpu",
) -> dict[str, float]:
    nll_sum, tokens = stream_nll(model, corpus.stream(split), corpus.vocab.eos_id, batch_size, bptt, device)
    return summarize(nll_sum, tokens, corpus.level)
