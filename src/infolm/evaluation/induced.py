"""Induced n-gram evaluation (IMM paper, Table 1): how well a full model predicts from a short context.

The induced n-gram of a model Q at a short context s (the ``order - 1`` previous tokens) is Q's
next-token distribution averaged over every position of the TRAINING stream whose short context is s,
each with its full history (Eq. 9, the empirical induced model Q̂; Table 1: "averaging predictions over
all extended contexts in the training set (full word history) that share that short context").
It is scored as an n-gram model on train / valid / test, beside the restricted (Kneser-Ney) n-gram.

Protocol details:
* Histories: the training stream is cut into ``batch_size`` contiguous rows run with carried state
  from a zero state (as in perplexity evaluation), so a position's history is everything before it in
  its row. ``max_train_tokens`` keeps only the first part of every row (evenly spread segments of the
  corpus): a subsample of the extended contexts for speed.
* A short context with no processed training occurrence (unseen in train, or skipped by the subsample)
  falls back to Q's prediction from the short context alone (zero state).
* Scored tokens: every token of the split; the first token's history is ``<eos>`` (the perplexity
  convention), and the same contexts are given to the restricted n-gram.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from infolm.data.batching import IGNORE_INDEX, eval_rows
from infolm.data.contexts import encode_contexts
from infolm.errors import InfolmError
from infolm.models.base import eval_mode

MAX_TABLE_ENTRIES = 2**29  # (contexts x vocabulary) floats of the induced table: 2 GiB in float32


def split_contexts(stream: Tensor, eos_id: int, length: int) -> np.ndarray:
    """(N, L): the ``length`` tokens before each token of ``stream``, ``<eos>``-padded on the left."""
    tokens = stream.cpu().numpy().astype(np.int64)
    history = np.concatenate([np.full(length, eos_id, dtype=np.int64), tokens])
    return np.lib.stride_tricks.sliding_window_view(history[:-1], length)


class InducedNgram:
    """The empirical induced n-gram Q̂(y | s) of a model, tabulated for a set of short contexts."""

    def __init__(self, keys: np.ndarray, contexts: np.ndarray, probs: Tensor, counts: Tensor, vocab_size: int) -> None:
        self.keys = keys  # (C,) sorted context keys (see encode_contexts)
        self.contexts = contexts  # (C, L) the token ids of each context
        self.probs = probs  # (C, V) Q̂(y | s); rows sum to 1
        self.counts = counts  # (C,) training positions averaged per context (0: zero-state fallback)
        self.vocab_size = vocab_size

    def rows(self, contexts: np.ndarray) -> np.ndarray:
        """(N, L) contexts -> (N,) rows of the table (every context must be tabulated)."""
        keys = encode_contexts(contexts, self.vocab_size)
        rows = np.searchsorted(self.keys, keys).clip(max=len(self.keys) - 1)
        if not np.array_equal(self.keys[rows], keys):
            raise ValueError("a context is missing from the induced table")
        return rows

    def log_probs(self, contexts: np.ndarray, targets: Tensor) -> Tensor:
        """(N,) log Q̂(target | context)."""
        rows = torch.from_numpy(self.rows(contexts)).to(self.probs.device)
        return self.probs[rows, targets.to(self.probs.device)].double().log()


def induced_ngram(
    model: nn.Module,
    corpus: Any,
    order: int = 2,
    splits: Sequence[str] = ("train", "valid", "test"),
    batch_size: int = 64,
    bptt: int = 70,
    max_train_tokens: int | None = None,
) -> InducedNgram:
    """Tabulate the model's induced n-gram for the short contexts occurring in ``splits`` (Eq. 9)."""
    if order < 2:
        raise InfolmError(f"the induced n-gram order must be at least 2, got {order}")
    length, vocab_size, eos = order - 1, len(corpus.vocab), corpus.vocab.eos_id
    device = next(model.parameters()).device
    all_contexts = np.concatenate([split_contexts(corpus.stream(s), eos, length) for s in splits])
    keys, first = np.unique(encode_contexts(all_contexts, vocab_size), return_index=True)
    contexts = all_contexts[first]  # (C, L)
    if len(keys) * vocab_size > MAX_TABLE_ENTRIES:
        raise InfolmError(
            f"the induced {order}-gram table would hold {len(keys)} contexts x {vocab_size} types; use a lower order"
        )
    acc = torch.zeros(len(keys), vocab_size, device=device)  # Σ over occurrences of Q(y | history), Eq. 9
    counts = torch.zeros(len(keys), dtype=torch.long, device=device)

    train = corpus.stream("train")
    inputs, targets = eval_rows(train, eos, batch_size)  # (B, L): row-major over the stream
    train_keys = encode_contexts(split_contexts(train, eos, length), vocab_size)
    where = np.searchsorted(keys, train_keys).clip(max=len(keys) - 1)
    train_rows = np.where(keys[where] == train_keys, where, -1)  # (N,) table row of each training position
    rows = torch.full((inputs.numel(),), -1, dtype=torch.long)
    rows[: len(train_rows)] = torch.from_numpy(train_rows)
    rows = rows.view(inputs.shape)
    rows[targets == IGNORE_INDEX] = -1
    columns = inputs.size(1)
    if max_train_tokens is not None:
        columns = min(columns, max(1, -(-max_train_tokens // inputs.size(0))))

    with eval_mode(model), torch.no_grad():
        state = model.init_state(inputs.size(0), device)  # type: ignore[operator]
        for start in range(0, columns, bptt):
            stop = min(start + bptt, columns)
            output = model(inputs[:, start:stop].to(device), state)
            state = output.state
            window_rows = rows[:, start:stop].reshape(-1).to(device)
            keep = window_rows >= 0
            probs = torch.softmax(output.logits.float(), dim=-1).reshape(-1, vocab_size)  # (B*w, V)
            acc.index_add_(0, window_rows[keep], probs[keep])
            counts += torch.bincount(window_rows[keep], minlength=len(keys))

        unseen = torch.nonzero(counts == 0).squeeze(1)
        for chunk in unseen.split(4096):  # the short context alone, from a zero state
            tokens = torch.from_numpy(contexts[chunk.cpu().numpy()]).to(device)
            logits = model(tokens, model.init_state(len(chunk), device)).logits[:, -1]  # type: ignore[operator]
            acc[chunk] = torch.softmax(logits.float(), dim=-1)
    probs = acc / counts.clamp(min=1).unsqueeze(1).to(acc.dtype)
    return InducedNgram(keys, contexts, probs, counts, vocab_size)


def restricted_log_probs(
    restricted: Any, contexts: np.ndarray, targets: Tensor, vocab_size: int, chunk: int = 2048
) -> Tensor:
    """(N,) log P̂(target | context) from an n-gram's ``next_token_distribution``, one query per distinct context."""
    unique, first, inverse = np.unique(encode_contexts(contexts, vocab_size), return_index=True, return_inverse=True)
    inverse_t = torch.from_numpy(inverse.reshape(-1))
    targets = targets.cpu()
    out = torch.empty(len(targets), dtype=torch.float64)
    for start in range(0, len(unique), chunk):
        query = torch.from_numpy(contexts[first[start : start + chunk]])
        dist = torch.as_tensor(restricted.next_token_distribution(query)).cpu()  # (c, V)
        positions = torch.nonzero((inverse_t >= start) & (inverse_t < start + chunk)).squeeze(1)
        out[positions] = dist[inverse_t[positions] - start, targets[positions]].double().log()
    return out


def induced_ngram_report(
    model: nn.Module,
    corpus: Any,
    order: int = 2,
    splits: Sequence[str] = ("train", "valid", "test"),
    restricted: Any = None,
    method: str = "modified-kn",
    **options: Any,
) -> dict[str, dict[str, float]]:
    """Per split ``{"induced_ppl", "kn_ppl", "tokens"}``: the model's induced n-gram and the restricted n-gram.

    ``restricted``: an n-gram with ``next_token_distribution`` (default: ``build_ngram`` of the training
    stream with ``method``). ``options`` go to :func:`induced_ngram` (batch_size, bptt, max_train_tokens).
    """
    table = induced_ngram(model, corpus, order, splits, **options)
    if restricted is None:
        from infolm.ngram import build_ngram

        restricted = build_ngram(
            corpus.stream("train"), len(corpus.vocab), order, method=method, history_id=corpus.vocab.eos_id
        )
    report = {}
    for split in splits:
        stream = corpus.stream(split)
        contexts = split_contexts(stream, corpus.vocab.eos_id, order - 1)
        induced = table.log_probs(contexts, stream)
        kn = restricted_log_probs(restricted, contexts, stream, len(corpus.vocab))
        report[split] = {
            "induced_ppl": math.exp(-float(induced.mean())),
            "kn_ppl": math.exp(-float(kn.mean())),
            "tokens": float(len(stream)),
        }
    return report


def induced_ngram_perplexity(model: nn.Module, corpus: Any, split: str, order: int = 2, **options: Any) -> float:
    """Perplexity on ``split`` of the model's induced n-gram (averaged over TRAINING extended contexts)."""
    table = induced_ngram(model, corpus, order, (split,), **options)
    stream = corpus.stream(split)
    log_probs = table.log_probs(split_contexts(stream, corpus.vocab.eos_id, order - 1), stream)
    return math.exp(-float(log_probs.mean()))
