"""Induced Model Matching (IMM): a restricted n-gram teaches the full model through its induced model.

Muneeb & Ohannessian, "Induced Model Matching". The induced model of the full model Q at a short
context sh (the ``order - 1`` previous tokens) is Q averaged over the extended contexts that co-occur
with sh in the training data (Eq. 9, 13); the IMM term is the cross-entropy of the restricted model
P̂ (a modified Kneser-Ney n-gram, Sec. 6) against it (Eq. 12), estimated with k sampled extended
contexts (Eq. 15, Alg. 1) and weighted by λ in the Composite (Eq. 11).

Choices made here (the paper leaves them open for a recurrent model):

* Which short contexts: those at ``positions_per_batch`` positions drawn uniformly from the current
  batch's inputs (the paper uses every position; the subsample bounds the cost of the k extra passes).
* How many samples: k on every j-th optimizer step (``batch.step % j == 0``), 1 otherwise (App. D.2).
* How an extended context is realized (``realization``):
    - ``state-bank`` (default): a ring buffer of detached recurrent states recorded by the primary
      pass (the state after each batch, keyed by the short context of the next input); a sample is
      one step of the model from a banked state whose short context matches. Cheap (one step per
      sample) and it is "the state set by the primary branch" (Sec. 6); the gradient flows through
      that last step only, and banked states come from slightly older parameters.
    - ``replay``: the ``context_window`` tokens of training stream that end at a sampled occurrence,
      run from a zero state; the gradient flows through the whole window. Exact for a context
      truncated to the window, but costs ``context_window`` steps (and logits) per sample.
  Measured (benchmarks/imm_overhead.py, PTB, 2x200 LSTM, batch 20x35, k=10, j=5, 1 CPU thread on a
  shared machine): state-bank with 32 positions per batch costs 1.41x an MLE step (1.13-1.25x with
  sample_chunk=10), replay with only 8 positions 2.35x. After 120 steps (--realizations) the validation
  perplexities were 682 (state-bank, P=32), 678 (replay, P=8) and 755 (MLE): no quality difference
  visible at that length, so the cheaper realization is the default. Replay is the one for models
  without a recurrent state (Transformers).
* Gradient: the k-sample estimate's gradient is computed sample by sample with the crosstalk
  decomposition of App. C.2 (memory independent of k), and the IMM loss is returned in its own clip
  group so that the trainer clips it apart from the main objective (App. D.2).
* The IMM passes run with dropout off (eval mode, restored afterwards) and never touch the primary
  branch's recurrent state (Sec. 6).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from infolm.data.contexts import encode_contexts
from infolm.errors import InfolmError
from infolm.models.base import eval_mode
from infolm.objectives.base import Batch, Objective, Terms, register_objective

IGNORE_INDEX = -100
REALIZATIONS = ("state-bank", "replay")


@dataclasses.dataclass
class IMMConfig:
    weight: float = 0.2  # λ in Eq. 11 (App. D.2: 0.2 in all language-modeling experiments)
    k: int = 10  # extended contexts sampled per short context on k-sample steps (App. D.2: k=10 for the LSTM)
    j: int = 5  # k-sample IMM every j-th step, 1-sample IMM otherwise (App. D.2: j=5)
    restricted_order: int = 2  # order n of the restricted n-gram; short context = n-1 previous tokens (Sec. 6: bigram)
    method: str = "modified-kn"  # smoothing of the restricted n-gram (Sec. 6: modified Kneser-Ney)
    clip: float = 0.25  # gradient-norm clip of the IMM gradient, applied apart from the main one (App. D.2); 0: off
    realization: str = "state-bank"  # state-bank | replay: how a sampled extended context is fed to the model
    context_window: int = 35  # replay: history tokens replayed from a zero state (the paper's unroll length)
    positions_per_batch: int = 32  # short contexts per batch, drawn from batch.inputs (paper: all positions)
    bank_size: int = 65536  # state-bank: detached states kept (ring buffer, oldest overwritten)
    sample_chunk: int = 1  # samples per crosstalk pass: memory grows with this, not k (>= k: plain autograd, faster)

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise InfolmError(f"objective.imm.weight must be non-negative, got {self.weight}")
        for key in ("k", "j", "context_window", "positions_per_batch", "bank_size", "sample_chunk"):
            if getattr(self, key) < 1:
                raise InfolmError(f"objective.imm.{key} must be at least 1, got {getattr(self, key)}")
        if self.restricted_order < 2:
            raise InfolmError(f"objective.imm.restricted_order must be at least 2, got {self.restricted_order}")
        if self.clip < 0:
            raise InfolmError(f"objective.imm.clip must be non-negative, got {self.clip}")
        if self.realization not in REALIZATIONS:
            raise InfolmError(
                f"objective.imm.realization must be one of {', '.join(REALIZATIONS)}; got {self.realization!r}"
            )


# ----------------------------------------------------------------------------------------------
# The math: k-sample induced cross-entropy (Eq. 15) and its crosstalk gradient (App. C.2)


def induced_cross_entropy(target: Tensor, sample_log_probs: Tensor) -> Tensor:
    """-Σ_y P̂(y|sh) log (1/k Σ_i Q(y|sh, x_i)), averaged over short contexts (Eq. 15).

    ``target`` (P, V) restricted-model probabilities; ``sample_log_probs`` (k, P, V) log Q per sample.
    """
    k = sample_log_probs.size(0)
    log_induced = torch.logsumexp(sample_log_probs, dim=0) - math.log(k)  # (P, V) log Q̂, Eq. 21
    return -(target * log_induced).sum(-1).mean()


SampleFn = Callable[[int], Tensor]  # chunk index -> (c, P, V) log-probabilities of c samples


class _CrosstalkInducedCrossEntropy(torch.autograd.Function):
    """Eq. 15 whose gradient is accumulated chunk by chunk with fixed crosstalk weights (App. C.2).

    ∇ -Σ_y P̂(y) log Σ_i Q_i(y) = Σ_i ∇[-Σ_y P̂(y) C_i(y) log Q_i(y)] with C_i = Q_i / Σ_j Q_j held constant.
    Forward: all chunks without a graph, keeping only log Σ_j Q_j (P, V). Backward: each chunk is
    recomputed with a graph, its surrogate differentiated and the graph freed — memory of one chunk.
    The sample function must be deterministic (the IMM passes run without dropout).
    """

    @staticmethod
    def forward(ctx: Any, sample_fn: SampleFn, num_chunks: int, target: Tensor, *params: Tensor) -> Tensor:
        log_total: Tensor | None = None
        count = 0
        for chunk in range(num_chunks):
            log_probs = sample_fn(chunk)  # (c, P, V)
            count += log_probs.size(0)
            chunk_total = torch.logsumexp(log_probs, dim=0)
            log_total = chunk_total if log_total is None else torch.logaddexp(log_total, chunk_total)
        assert log_total is not None
        ctx.sample_fn, ctx.num_chunks = sample_fn, num_chunks
        ctx.save_for_backward(target, log_total, *params)
        return -(target * (log_total - math.log(count))).sum(-1).mean()

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor) -> tuple[Tensor | None, ...]:
        target, log_total, *params = ctx.saved_tensors
        grads: list[Tensor | None] = [None] * len(params)
        for chunk in range(ctx.num_chunks):
            with torch.enable_grad():
                log_probs = ctx.sample_fn(chunk)  # (c, P, V), recomputed with a graph
                crosstalk = torch.exp(log_probs.detach() - log_total)  # C_i(y), App. C.2 (constant)
                surrogate = -(target * crosstalk * log_probs).sum(dim=(0, 2)).mean() * grad_loss
                chunk_grads = torch.autograd.grad(surrogate, params, allow_unused=True)
            for index, grad in enumerate(chunk_grads):
                if grad is not None:
                    grads[index] = grad if grads[index] is None else grads[index] + grad  # type: ignore[operator]
        return (None, None, None, *grads)


def crosstalk_induced_cross_entropy(
    sample_fn: SampleFn, num_chunks: int, target: Tensor, params: Sequence[Tensor]
) -> Tensor:
    """Eq. 15 over ``num_chunks`` chunks of samples with the memory-saving crosstalk gradient (App. C.2)."""
    loss: Tensor = _CrosstalkInducedCrossEntropy.apply(sample_fn, num_chunks, target, *params)
    return loss


# ----------------------------------------------------------------------------------------------
# Short contexts: index of their occurrences in the training stream


class ShortContextIndex:
    """For each short context (L consecutive tokens), the positions of the stream where it ends.

    Position p is an occurrence of short context s when ``stream[p-L+1 : p+1] == s`` and p has a next
    token (p <= N-2): the multiset extend(s) of the paper is the histories before those positions.
    Built with one stable argsort of context ids; ids are dense 0..C-1 in key order.
    """

    def __init__(self, stream: Tensor, vocab_size: int, context_len: int) -> None:
        tokens = stream.cpu().numpy().astype(np.int64)
        if tokens.size < context_len + 1:
            raise InfolmError(
                f"the training stream ({tokens.size} tokens) is too short for {context_len}-token contexts"
            )
        self.vocab_size, self.context_len = vocab_size, context_len
        self.stream = stream.cpu()
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], context_len)  # (N-L, L), ends at p=L-1..N-2
        position_keys = encode_contexts(windows, vocab_size)
        self.keys, context_ids = np.unique(position_keys, return_inverse=True)  # sorted unique keys (C,)
        order = np.argsort(context_ids, kind="stable")
        self.positions = torch.from_numpy(order + context_len - 1)  # (N-L,) grouped by context id
        counts = np.bincount(context_ids, minlength=len(self.keys))
        self.counts = torch.from_numpy(counts)  # (C,)
        self.offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)[:-1]]))  # (C,)

    def __len__(self) -> int:
        return len(self.keys)

    def lookup(self, contexts: Tensor) -> Tensor:
        """(..., L) token ids -> (...) context ids, -1 where the context never occurs in the stream."""
        shape = contexts.shape[:-1]
        keys = encode_contexts(contexts.reshape(-1, self.context_len).cpu().numpy(), self.vocab_size)
        where = np.searchsorted(self.keys, keys).clip(max=len(self.keys) - 1)
        ids = np.where(self.keys[where] == keys, where, -1)
        return torch.from_numpy(ids).view(shape)

    def sample(self, context_ids: Tensor, k: int) -> Tensor:
        """(P,) context ids -> (k, P) stream positions drawn uniformly (with replacement) from their occurrences."""
        counts = self.counts[context_ids].double()  # (P,)
        draws = (torch.rand(k, len(context_ids), dtype=torch.float64) * counts).long()  # (k, P)
        return self.positions[self.offsets[context_ids] + draws]


# ----------------------------------------------------------------------------------------------
# Realizations of sampled extended contexts


def _batch_dim(t: Tensor) -> int:
    return 1 if t.dim() == 3 else 0  # the convention of infolm.models.base.select_state


class StateBank:
    """A ring buffer of detached recurrent states, each keyed by the short context fed next."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.keys: Tensor | None = None  # (capacity,) context ids, -1 empty
        self.leaves: list[Tensor] = []  # per state leaf, (capacity, ...) batch-first copies
        self.spec: Any = None
        self.cursor = 0
        self._sorted: tuple[Tensor, Tensor] | None = None

    def __len__(self) -> int:
        return 0 if self.keys is None else int((self.keys >= 0).sum())

    def add(self, context_ids: Tensor, state: Any) -> None:
        """Store rows of ``state`` whose ``context_ids`` (B,) are >= 0 (copies; the state is not touched)."""
        leaves, spec = tree_flatten(state)
        rows = torch.nonzero(context_ids >= 0).squeeze(1)
        if rows.numel() == 0 or not leaves:
            return
        if self.keys is None:
            device = leaves[0].device
            self.keys = torch.full((self.capacity,), -1, dtype=torch.long, device=device)
            self.leaves = [
                torch.zeros(
                    (self.capacity,) + tuple(t.movedim(_batch_dim(t), 0).shape[1:]), dtype=t.dtype, device=device
                )
                for t in leaves
            ]
            self.spec = spec
        rows = rows[-self.capacity :]
        slots = (self.cursor + torch.arange(len(rows))) % self.capacity
        self.cursor = int((self.cursor + len(rows)) % self.capacity)
        slots, device_rows = slots.to(self.keys.device), rows.to(self.keys.device)
        self.keys[slots] = context_ids.to(self.keys.device)[device_rows]
        for store, leaf in zip(self.leaves, leaves, strict=True):
            store[slots] = leaf.detach().movedim(_batch_dim(leaf), 0)[device_rows].to(store.dtype)
        self._sorted = None

    def available(self, context_ids: Tensor) -> Tensor:
        """(P,) bool: which context ids have at least one banked state."""
        if self.keys is None:
            return torch.zeros(context_ids.shape, dtype=torch.bool)
        low, high = self._ranges(context_ids)
        return (high > low).cpu()

    def _ranges(self, context_ids: Tensor) -> tuple[Tensor, Tensor]:
        assert self.keys is not None
        if self._sorted is None:
            sorted_keys, order = torch.sort(self.keys)
            self._sorted = (sorted_keys, order)
        sorted_keys = self._sorted[0]
        query = context_ids.to(sorted_keys.device)
        return torch.searchsorted(sorted_keys, query), torch.searchsorted(sorted_keys, query, right=True)

    def sample(self, context_ids: Tensor, k: int) -> list[Tensor]:
        """(P,) context ids (each available) -> per leaf, (k*P, ...) batch-first states, sample-major."""
        assert self.keys is not None
        low, high = self._ranges(context_ids)
        draws = (torch.rand(k, len(context_ids), device=low.device, dtype=torch.float64) * (high - low)).long()
        slots = self._sorted[1][(low + draws).reshape(-1)]  # type: ignore[index]
        return [store[slots] for store in self.leaves]

    def as_state(self, leaves: list[Tensor]) -> Any:
        """Batch-first leaves -> a state pytree in the model's layout."""
        return tree_unflatten([t.movedim(0, 1) if t.dim() == 3 else t for t in leaves], self.spec)


def _at_least_fp32(logits: Tensor) -> Tensor:
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


# ----------------------------------------------------------------------------------------------


@register_objective("imm", config=IMMConfig)
class IMM(Objective):
    """Induced model matching against a restricted n-gram (Eqs. 12-15, Alg. 1)."""

    def __init__(self, config: IMMConfig, restricted: Any = None) -> None:
        super().__init__()
        self.config = config
        self.restricted = restricted  # object with next_token_distribution((N, L)) -> (N, V); built in setup if None
        self.index: ShortContextIndex | None = None
        self.bank = StateBank(config.bank_size)

    @property
    def context_len(self) -> int:
        return self.config.restricted_order - 1

    def setup(self, corpus: Any, model: nn.Module) -> None:
        stream = corpus.stream("train")
        vocab_size = len(corpus.vocab)
        self.index = ShortContextIndex(stream, vocab_size, self.context_len)
        if self.config.realization == "state-bank":
            device = next(model.parameters()).device
            if model.init_state(1, device) is None:  # type: ignore[operator]
                raise InfolmError("objective.imm.realization=state-bank needs a recurrent model; use replay")
        if self.restricted is None:
            from infolm.ngram import build_ngram

            order, method, eos = self.config.restricted_order, self.config.method, corpus.vocab.eos_id
            self.restricted = build_ngram(stream, vocab_size, order, method=method, history_id=eos)

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        if self.index is None or self.restricted is None:
            raise RuntimeError("IMM.setup(corpus, model) must run before training")
        config = self.config
        device = next(model.parameters()).device
        k = config.k if batch.step % config.j == 0 else 1
        contexts, context_ids = self._select(batch)  # (P, L), (P,)
        terms = Terms(clip_groups={"imm": config.clip})
        if len(context_ids) == 0:  # nothing to match yet (e.g. an empty state bank)
            terms.losses["imm"] = torch.zeros((), device=device, requires_grad=True)
        else:
            target = self.restricted.next_token_distribution(contexts)  # (P, V) P̂(y|sh)
            target = torch.as_tensor(target).to(
                device=device, dtype=torch.promote_types(output.logits.dtype, torch.float32)
            )
            sample_fn, num_chunks = self._sampler(model, contexts, context_ids, k, device)
            if num_chunks == 1:  # plain autograd through the log-mean (1-sample steps, or sample_chunk >= k)
                terms.losses["imm"] = induced_cross_entropy(target, sample_fn(0))
            else:
                params = [p for p in model.parameters() if p.requires_grad]
                terms.losses["imm"] = crosstalk_induced_cross_entropy(sample_fn, num_chunks, target, params)
        terms.metrics["imm_positions"] = float(len(context_ids))
        terms.metrics["imm_k"] = float(k)
        if config.realization == "state-bank":
            self._record(batch, output)
        return terms

    # -- which short contexts -------------------------------------------------------------------

    def _select(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """Up to ``positions_per_batch`` short contexts of ``batch.inputs`` that occur in training."""
        assert self.index is not None
        length = self.context_len
        inputs, targets = batch.inputs.cpu(), batch.targets.cpu()
        if inputs.size(1) < length:
            return inputs.new_zeros((0, length)), inputs.new_zeros((0,))
        contexts = inputs.unfold(1, length, 1)  # (B, T-L+1, L), context ending at t = L-1..T-1
        ids = self.index.lookup(contexts)  # (B, T-L+1)
        eligible = (ids >= 0) & (targets[:, length - 1 :] != IGNORE_INDEX)
        flat_contexts, flat_ids = contexts.reshape(-1, length)[eligible.reshape(-1)], ids[eligible]
        if self.config.realization == "state-bank":
            has_state = self.bank.available(flat_ids)
            flat_contexts, flat_ids = flat_contexts[has_state], flat_ids[has_state]
        if len(flat_ids) > self.config.positions_per_batch:
            keep = torch.randperm(len(flat_ids))[: self.config.positions_per_batch]
            flat_contexts, flat_ids = flat_contexts[keep], flat_ids[keep]
        return flat_contexts, flat_ids

    # -- how extended contexts are fed ------------------------------------------------------------

    def _sampler(
        self, model: nn.Module, contexts: Tensor, context_ids: Tensor, k: int, device: torch.device
    ) -> tuple[SampleFn, int]:
        """A deterministic function chunk -> (c, P, V) log Q(·|sh, x_i) for the k samples, and the chunk count."""
        assert self.index is not None
        chunk = min(self.config.sample_chunk, k)
        num_chunks = -(-k // chunk)
        num_positions = len(context_ids)

        if self.config.realization == "replay":
            occurrences = self.index.sample(context_ids, k)  # (k, P) stream positions
            stream = self.index.stream
            window = min(self.config.context_window, len(stream))
            start = (occurrences - window + 1).clamp(min=0)  # (k, P)
            windows = stream[start.unsqueeze(-1) + torch.arange(window)].to(device)  # (k, P, W)
            read = (occurrences - start).to(device)  # (k, P): the occurrence's place in its window

            def replay_fn(index: int) -> Tensor:
                rows = windows[index * chunk : (index + 1) * chunk]  # (c, P, W)
                flat = rows.reshape(-1, window)
                with eval_mode(model):
                    logits = model(flat, model.init_state(flat.size(0), device)).logits  # type: ignore[operator]  # (c*P, W, V)
                picked = logits[
                    torch.arange(flat.size(0), device=device), read[index * chunk : (index + 1) * chunk].reshape(-1)
                ]
                return torch.log_softmax(_at_least_fp32(picked), dim=-1).view(rows.size(0), num_positions, -1)

            return replay_fn, num_chunks

        leaves = self.bank.sample(context_ids, k)  # per leaf (k*P, ...)
        last_tokens = contexts[:, -1].to(device)  # (P,): the state precedes the short context's last token

        def bank_fn(index: int) -> Tensor:
            rows = slice(index * chunk * num_positions, min((index + 1) * chunk, k) * num_positions)
            state = self.bank.as_state([leaf[rows] for leaf in leaves])
            count = (rows.stop - rows.start) // num_positions
            tokens = last_tokens.repeat(count).unsqueeze(1)  # (c*P, 1)
            with eval_mode(model):
                logits = model(tokens, state).logits[:, 0]  # (c*P, V)
            return torch.log_softmax(_at_least_fp32(logits), dim=-1).view(count, num_positions, -1)

        return bank_fn, num_chunks

    def _record(self, batch: Batch, output: Any) -> None:
        """Bank the primary pass's final state under the short context that ends at the next input."""
        if output.state is None or self.index is None:
            return
        length = self.context_len
        inputs, targets = batch.inputs.cpu(), batch.targets.cpu()
        sequence = torch.cat([inputs, targets[:, -1:]], dim=1)  # (B, T+1); the next input is targets[:, -1]
        if sequence.size(1) < length:
            return
        ids = self.index.lookup(sequence[:, -length:])  # (B,)
        ids = torch.where(targets[:, -1] == IGNORE_INDEX, torch.full_like(ids, -1), ids)
        self.bank.add(ids, output.state)
