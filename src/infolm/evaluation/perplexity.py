"""Perplexity / bits per character over a full split, in batched BPTT windows; per-token scores."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
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


@dataclasses.dataclass
class TokenScores:
    """A model's log-probability of every target of a split, in text order, and the segments of text
    it was scored in: a token's history is ``<eos>`` and the tokens before it in its segment (a stream is
    one segment, the running text; a sentence LM's segments are its sentences)."""

    log_probs: Tensor  # (N,) float64 ln p_model(token | history)
    tokens: Tensor  # (N,) int64 the targets
    starts: np.ndarray  # (S,) int64 first position of each segment
    lengths: np.ndarray  # (S,) int64 tokens of each segment

    def nll(self) -> float:
        """Per-token NLL in nats."""
        return -float(self.log_probs.sum()) / max(len(self.log_probs), 1)


@torch.no_grad()
def stream_token_scores(
    model: LanguageModel,
    stream: Tensor,
    eos_id: int,
    batch_size: int = 10,
    bptt: int = 70,
    device: torch.device | str = "cpu",
) -> TokenScores:
    """ln p(token | history) of every token of ``stream``, walked as :func:`stream_nll` walks it
    (``batch_size`` rows, ``bptt`` windows, state carried), put back in stream order."""
    n = stream.numel()
    # the same layout over the positions 0..n-1: the stream position of each target, window by window
    positions = eval_windows(torch.arange(n), eos_id, batch_size, bptt)
    log_probs = torch.full((n,), math.nan, dtype=torch.float64)
    for (output, targets), (_, where) in zip(
        stream_outputs(model, stream, eos_id, batch_size, bptt, device), positions
    ):
        logits = output.logits.float()
        nll = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="none"
        )  # (B*T,), 0 at padding
        where = where.reshape(-1)
        keep = where != IGNORE_INDEX
        log_probs[where[keep]] = -nll.cpu()[keep].double()
    whole = np.array([0], dtype=np.int64)
    return TokenScores(log_probs, stream.cpu().long(), whole, np.array([n], dtype=np.int64))


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
