"""Induced Model Matching (IMM): a restricted n-gram teaches the full model through its induced model.

Muneeb & Ohannessian, "Induced Model Matching". The induced model of the full model Q at a short
context sh (the ``order - 1`` previous tokens) is Q averaged over the extended contexts that co-occur
with sh in the training data (Eq. 9, 13); the IMM term is the cross-entropy of the restricted model
P̂ (a modified Kneser-Ney n-gram, Sec. 6) against it (Eq. 12), estimated with k sampled extended
contexts (Eq. 15, Alg. 1) and weighted by λ in the Composite (Eq. 11).

Choices made here (the paper leaves them open for a recurrent model):

* How many samples: k on every j-th optimizer step (``batch.step % j == 0``), 1 otherwise (App. D.2).
  ``one_sample=released`` (opt-in) makes the 1-sample steps those of the authors' released code: each
  position's own prediction against (1 − γ(x))·onehot(y) + γ(x)·P̂(y), a soft target (Sec. 5.2's link
  to noising) rather than one sample of Eq. 15, at every eligible position (``positions_per_batch``
  then applies to the k-sample steps only, as the released code uses every position on both).
* How an extended context is realized (``realization``):
    - ``replay`` (default, faithful to Eq. 15): fresh samples through the current parameters, as the
      authors' released code draws them: each sample is the ``context_window`` tokens of training
      stream that end at a uniformly drawn occurrence of the short context (its extended context
      truncated to the paper's unroll of 35), run from a zero state; the gradient flows through the
      whole window. The released code differs in how a window is fed (it runs only the window's
      last i+1 tokens, i the position within the unroll, from the batch row's carried state) and
      in its 1-sample steps; docs/notebook/imm.md ("The authors' released code, read against ours")
      lists every difference.
    - ``carried-state`` (opt-in, the authors' released code): fresh samples through the current
      parameters, drawn per position (k each, uniformly with replacement); for the position at offset
      i of its row, the last i+1 tokens of the sampled window are run from that row's carried state
      (``batch.state``), so at i = 0 every draw is the position itself. Draws per position, not per
      short context: at every position it costs 2.4 times the replay (docs/notebook/imm.md).
    - ``in-batch`` (opt-in approximation): the batch's own positions that share a short context are
      draws from extend(sh) already computed by the primary pass: up to k of them (uniformly, without
      replacement) form the induced estimate of Eq. 15, and the gradient flows through the primary
      pass (full BPTT, current parameters). No extra forward pass; the costs are fewer samples where
      the batch holds few occurrences of a context (one, the position itself, for a rare context),
      samples drawn from the batch rather than the whole stream (correlated, as the rows of one
      batch), and the primary pass's dropout on the samples.
    - ``state-bank`` (opt-in approximation): a ring buffer of detached recurrent states recorded by
      the primary pass (the state after each batch, keyed by the short context of the next input);
      a sample is one step of the model from a banked state whose short context matches. Cheap, but
      banked states come from older parameters (up to ``bank_size`` / batch rows steps stale), only
      batch-end positions are banked (frequent contexts are over-represented among the matched
      positions) and the gradient passes one recurrent step.
  ``benchmarks/imm_overhead.py`` measures the cost of each against an MLE step (docs/notebook/imm.md).
* When: from the first step by default (the paper is silent); ``start_step`` and
  ``start_below_ppl`` delay the term, and ``start_lr`` resets the learning rate when it starts, as
  the authors' released code does (IMM once the validation perplexity is below 90, lr reset to 0.5).
* Gradient: the k-sample estimate's gradient is computed sample by sample with the crosstalk
  decomposition of App. C.2 (memory independent of k), and the IMM loss is returned in its own clip
  group so that the trainer clips it apart from the main objective (App. D.2).
* The IMM passes run with dropout off (eval mode, restored afterwards) and never touch the primary
  branch's recurrent state (Sec. 6).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from infolm.errors import InfolmError
from infolm.models.base import eval_mode, select_state
from infolm.objectives.base import Batch, Objective, Terms, register_objective
from infolm.objectives.imm.contexts import ShortContextIndex, batch_positions, select_contexts
from infolm.objectives.imm.crosstalk import (
    SampleFn,
    crosstalk_induced_cross_entropy,
    induced_cross_entropy,
    weighted_mean,
)
from infolm.objectives.imm.state_bank import StateBank, record

REALIZATIONS = ("replay", "state-bank", "in-batch", "carried-state")
ONE_SAMPLE = ("eq15", "released")


@dataclasses.dataclass
class IMMConfig:
    weight: float = 0.2  # λ in Eq. 11 (App. D.2: 0.2 in all language-modeling experiments)
    k: int = 10  # extended contexts sampled per short context on k-sample steps (App. D.2: k=10 for the LSTM)
    j: int = 5  # k-sample IMM every j-th step, 1-sample IMM otherwise (App. D.2: j=5)
    restricted_order: int = 2  # order n of the restricted n-gram; short context = n-1 previous tokens (Sec. 6: bigram)
    method: str = "modified-kn"  # smoothing of the restricted n-gram (Sec. 6: modified Kneser-Ney)
    clip: float = 0.25  # norm clip of ∇IMM apart from the main gradient, before λ scales it (App. D.2, Alg. 1); 0: off
    # replay (fresh samples, Eq. 15) | carried-state (fresh samples fed as the released code feeds them) |
    # state-bank | in-batch (opt-in approximations)
    realization: str = "replay"
    context_window: int = 35  # replay: history tokens replayed from a zero state (the paper's unroll length)
    positions_per_batch: int = 0  # 0: every position (Eq. 10); P > 0: P drawn uniformly (same mean before the clip)
    start_step: int = 0  # first optimizer step with IMM (paper silent: from the start)
    start_below_ppl: float = 0.0  # > 0: start once the validation perplexity is below this (released code: 90)
    start_lr: float = 0.0  # > 0: learning rate set when IMM starts (released code: 0.5 on its summed loss)
    bank_size: int = 65536  # state-bank: detached states kept (ring buffer, oldest overwritten)
    sample_chunk: int = 1  # samples per crosstalk pass: memory grows with this, not k (>= k: plain autograd, faster)
    # 1-sample steps: eq15 (Eq. 15 with k = 1: one sample per short context against P̂(·|sh)) | released (the
    # authors' released code: each position's own prediction against (1 − γ(x))·onehot(y) + γ(x)·P̂(y), with
    # γ(x) the restricted bigram's back-off mass after the previous word x and P̂(y) its unigram; bigram only)
    one_sample: str = "eq15"

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise InfolmError(f"objective.imm.weight must be non-negative, got {self.weight}")
        for key in ("k", "j", "context_window", "bank_size", "sample_chunk"):
            if getattr(self, key) < 1:
                raise InfolmError(f"objective.imm.{key} must be at least 1, got {getattr(self, key)}")
        for key in ("positions_per_batch", "start_step", "start_below_ppl", "start_lr"):
            if getattr(self, key) < 0:
                raise InfolmError(f"objective.imm.{key} must be non-negative, got {getattr(self, key)}")
        if self.restricted_order < 2:
            raise InfolmError(f"objective.imm.restricted_order must be at least 2, got {self.restricted_order}")
        if self.clip < 0:
            raise InfolmError(f"objective.imm.clip must be non-negative, got {self.clip}")
        if self.one_sample not in ONE_SAMPLE:
            raise InfolmError(
                f"objective.imm.one_sample must be one of {', '.join(ONE_SAMPLE)}; got {self.one_sample!r}"
            )
        if self.one_sample == "released" and self.restricted_order != 2:
            raise InfolmError(
                f"objective.imm.one_sample=released needs restricted_order 2 (a bigram), got {self.restricted_order}"
            )
        if self.realization not in REALIZATIONS:
            raise InfolmError(
                f"objective.imm.realization must be one of {', '.join(REALIZATIONS)}; got {self.realization!r}"
            )


# ----------------------------------------------------------------------------------------------
# Realizations of sampled extended contexts


def _at_least_fp32(logits: Tensor) -> Tensor:
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


# ----------------------------------------------------------------------------------------------


def _last_log_probs(model: nn.Module, windows: Tensor, lengths: Tensor, initial: Any = None) -> Tensor:
    """(N, W) token windows, (N,) used lengths -> (N, V) log Q(· | windows[n, :lengths[n]]), each row
    from the model's initial state or, with ``initial``, from its row of that state (N rows).

    The history before the last token goes through ``state_after`` (no softmax layer), the last token
    through the model: logits are computed only where they are read. Rows are grouped by length
    (all rows are full-length except samples near the start of the stream).
    """
    device = windows.device
    out: Tensor | None = None
    for length in torch.unique(lengths).tolist():
        rows = torch.nonzero(lengths == length).squeeze(1)
        tokens = windows[rows, :length]  # (n, length)
        if initial is None:
            state = model.init_state(len(rows), device)  # type: ignore[operator]
        else:
            state = select_state(initial, rows)
        if length > 1:
            state = model.state_after(tokens[:, :-1], state)  # type: ignore[operator]
        logits = model(tokens[:, -1:], state).logits[:, 0]  # (n, V)
        log_probs = torch.log_softmax(_at_least_fp32(logits), dim=-1)
        if out is None:
            if len(rows) == len(windows):
                return log_probs
            out = log_probs.new_empty((len(windows), log_probs.size(-1)))
        out = out.index_copy(0, rows, log_probs)
    assert out is not None
    return out


@register_objective("imm", config=IMMConfig)
class IMM(Objective):
    """Induced model matching against a restricted n-gram (Eqs. 12-15, Alg. 1)."""

    @classmethod
    def extra_input_length(cls, config: IMMConfig) -> int | None:
        # replayed histories; a bank token; carried-state replays at most the batch's own length
        lengths = {"replay": config.context_window, "state-bank": 1, "in-batch": 0, "carried-state": 0}
        return lengths[config.realization]

    started: Tensor  # bool buffer: the term is active (start_step / start_below_ppl reached)

    def __init__(self, config: IMMConfig, restricted: Any = None) -> None:
        super().__init__()
        self.config = config
        self.restricted = restricted  # object with next_token_distribution((N, L)) -> (N, V); built in setup if None
        self.index: ShortContextIndex | None = None
        self.bank = StateBank(config.bank_size)
        delayed = config.start_step > 0 or config.start_below_ppl > 0
        self.register_buffer("started", torch.tensor(not delayed))  # saved with the objective's state
        self._lr_reset: float | None = None
        self._backoff_cache: dict[tuple[str, torch.dtype], tuple[Tensor, Tensor]] = {}

    @property
    def context_len(self) -> int:
        return self.config.restricted_order - 1

    def setup(self, corpus: Any, model: nn.Module) -> None:
        stream = corpus.stream("train")
        vocab_size = len(corpus.vocab)
        self.index = ShortContextIndex(stream, vocab_size, self.context_len)
        if self.config.realization in ("state-bank", "carried-state"):
            device = next(model.parameters()).device
            if model.init_state(1, device) is None:  # type: ignore[operator]
                raise InfolmError(
                    f"objective.imm.realization={self.config.realization} needs a recurrent model; use replay"
                )
        if self.restricted is None:
            from infolm.ngram import build_ngram

            order, method, eos = self.config.restricted_order, self.config.method, corpus.vocab.eos_id
            self.restricted = build_ngram(stream, vocab_size, order, method=method, history_id=eos)

    # -- when -----------------------------------------------------------------------------------

    def _start(self) -> None:
        if bool(self.started):
            return
        self.started.fill_(True)
        if self.config.start_lr > 0:
            self._lr_reset = self.config.start_lr

    def on_step_end(self, step: int, metrics: Mapping[str, float]) -> None:
        if self.config.start_step > 0 and step >= self.config.start_step:
            self._start()

    def on_evaluation(self, step: int, valid_loss: float) -> None:
        threshold = self.config.start_below_ppl
        if threshold > 0 and valid_loss < math.log(threshold):
            self._start()

    def pop_lr_reset(self) -> float | None:
        reset, self._lr_reset = self._lr_reset, None
        return reset

    # -- the term -------------------------------------------------------------------------------

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        if self.index is None or self.restricted is None:
            raise RuntimeError("IMM.setup(corpus, model) must run before training")
        config = self.config
        device = next(model.parameters()).device
        terms = Terms(clip_groups={"imm": config.clip})
        terms.metrics["imm_active"] = float(bool(self.started))
        if not bool(self.started):  # before start_step / start_below_ppl: no compute, no RNG use
            terms.losses["imm"] = torch.zeros((), device=device, requires_grad=True)
            return terms
        k = config.k if batch.step % config.j == 0 else 1
        # every position's short context, its id, whether it counts
        positions = batch_positions(self.index, batch, self.context_len)
        if k == 1 and config.one_sample == "released":  # every eligible position (positions_per_batch: k-steps)
            terms.losses["imm"], terms.metrics["imm_contexts"] = self._released_one_sample(batch, output, positions)
            terms.metrics["imm_k"] = 1.0
            if config.realization == "state-bank":
                self._record(batch, output)
            return terms
        carried = None
        if config.realization == "carried-state":  # one entry per position: its own row state and offset
            contexts, context_ids, weights, carried = self._select_positions(model, batch, positions)
        else:
            contexts, context_ids, weights = self._select(batch, positions)  # (P, L), (P,), (P,)
        if len(context_ids) == 0:  # nothing to match (e.g. an empty state bank)
            terms.losses["imm"] = torch.zeros((), device=device, requires_grad=True)
        else:
            target = self.restricted.next_token_distribution(contexts)  # (P, V) P̂(y|sh)
            dtype = torch.promote_types(output.logits.dtype, torch.float32)
            target = torch.as_tensor(target).to(device=device, dtype=dtype)
            weights = weights.to(device=device, dtype=dtype)
            if config.realization == "in-batch":
                log_induced = self._in_batch_log_induced(positions, output, context_ids, k)  # (P, V)
                terms.losses["imm"] = weighted_mean(-(target * log_induced).sum(-1), weights)  # Eqs. 12, 15
            else:
                terms.losses["imm"] = self._sampled_loss(model, contexts, context_ids, k, target, weights, carried)
        terms.metrics["imm_contexts"] = float(len(context_ids))
        terms.metrics["imm_k"] = float(k)
        if config.realization == "state-bank":
            self._record(batch, output)
        return terms

    def _sampled_loss(
        self,
        model: nn.Module,
        contexts: Tensor,
        context_ids: Tensor,
        k: int,
        target: Tensor,
        weights: Tensor,
        carried: tuple[Any, Tensor] | None = None,
    ) -> Tensor:
        """Eq. 15 over k extended contexts fed through the model (replay, carried state or state bank)."""
        sample_fn, num_chunks = self._sampler(model, contexts, context_ids, k, target.device, carried)
        if num_chunks == 1:  # plain autograd through the log-mean (1-sample steps, or sample_chunk >= k)
            return induced_cross_entropy(target, sample_fn(0), weights)
        params = [p for p in model.parameters() if p.requires_grad]
        return crosstalk_induced_cross_entropy(sample_fn, num_chunks, target, params, weights)

    def _released_one_sample(
        self, batch: Batch, output: Any, positions: tuple[Tensor, Tensor, Tensor]
    ) -> tuple[Tensor, float]:
        """The 1-sample steps of the authors' released code: at every eligible position t (previous word
        x, next word y), -[(1 − γ(x)) ln Q(y|·) + γ(x) Σ_v P̂(v) ln Q(v|·)] with the primary pass's
        prediction Q, averaged over the positions. Averaged over the positions of one short context,
        the target (1 − γ(x))·onehot(y) + γ(x)·P̂ is close to the interpolated KN bigram, whose
        back-off mass γ(x) and lower order P̂ it uses. Returns the loss and the number of positions.
        Clipped apart like every IMM gradient (App. D.2; the released code leaves it unclipped)."""
        _, _, eligible = positions
        logits = output.logits[:, self.context_len - 1 :]  # (B, T, V)
        device = logits.device
        mask = eligible.to(device)
        if not bool(mask.any()):  # nothing to score (every target padding)
            return logits.sum() * 0.0, 0.0
        log_q = torch.log_softmax(_at_least_fp32(logits[mask]), dim=-1)  # (N, V)
        previous = batch.inputs[:, self.context_len - 1 :].to(device)[mask]  # (N,) x
        targets = batch.targets[:, self.context_len - 1 :].to(device)[mask]  # (N,) y
        backoff, lower = self._bigram_backoff(device, log_q.dtype)  # (V,) γ per previous word, (V,) P̂
        gamma = backoff[previous]  # (N,)
        true_word = log_q.gather(1, targets.unsqueeze(1)).squeeze(1)
        return -((1 - gamma) * true_word + gamma * (log_q @ lower)).mean(), float(len(targets))

    def _bigram_backoff(self, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The restricted bigram's back-off mass γ(x) per word and its unigram P̂, as tensors (made once)."""
        key = (str(device), dtype)
        if key not in self._backoff_cache:
            unigram = self.restricted.tables[0]  # order 1: P̂(v) and, per word as a history, γ
            self._backoff_cache[key] = (
                torch.as_tensor(unigram.backoff, device=device, dtype=dtype),
                torch.as_tensor(unigram.prob, device=device, dtype=dtype),
            )
        return self._backoff_cache[key]

    # -- which short contexts -------------------------------------------------------------------

    def _select(
        self, batch: Batch, positions: tuple[Tensor, Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The distinct short contexts of the selected positions, their ids and weights (Eq. 12;
        ``contexts.select_contexts``); for the state bank, only those with a banked state."""
        has_state = self.bank.available if self.config.realization == "state-bank" else None
        return select_contexts(
            self.index, batch, self.context_len, self.config.positions_per_batch, positions, has_state
        )

    def _select_positions(
        self, model: nn.Module, batch: Batch, positions: tuple[Tensor, Tensor, Tensor]
    ) -> tuple[Tensor, Tensor, Tensor, tuple[Any, Tensor] | None]:
        """carried-state: every eligible position (or ``positions_per_batch`` of them) as its own entry:
        its short context (P, L), context id (P,), a uniform weight (P,), and (each entry's row state
        (P rows), its offset i in the row (P,))."""
        contexts, ids, eligible = positions
        flat = torch.nonzero(eligible.reshape(-1)).squeeze(1)  # (N,) flat positions of (B, T-L+1)
        if 0 < self.config.positions_per_batch < len(flat):
            flat = flat[torch.randperm(len(flat))[: self.config.positions_per_batch]]
        if len(flat) == 0:
            return contexts.reshape(-1, self.context_len)[:0], ids.reshape(-1)[:0], torch.zeros(0), None
        width = eligible.size(1)
        rows, offsets = flat // width, flat % width + self.context_len - 1  # offset of the context's last token
        device = next(model.parameters()).device
        state = batch.state if batch.state is not None else model.init_state(batch.inputs.size(0), device)  # type: ignore[operator]
        row_states = select_state(state, rows.to(device))
        weights = torch.full((len(flat),), 1.0 / len(flat), dtype=torch.float64)
        return contexts.reshape(-1, self.context_len)[flat], ids.reshape(-1)[flat], weights, (row_states, offsets)

    # -- how extended contexts are fed ------------------------------------------------------------

    def _in_batch_log_induced(
        self, positions: tuple[Tensor, Tensor, Tensor], output: Any, context_ids: Tensor, k: int
    ) -> Tensor:
        """(P,) context ids -> (P, V) log Q̂(·|sh) from up to k of the batch's positions with that context.

        The primary pass's prediction at such a position is Q(·|sh, x) for its extended context x, a
        draw from extend(sh): the k-sample estimate of Eq. 15 (log of the mean, Eq. 21) without a pass
        of its own. Draws are uniform without replacement among the batch's eligible positions.
        """
        _, ids, eligible = positions
        rows = torch.nonzero(eligible.reshape(-1)).squeeze(1)  # (N,) flat positions of (B, T-L+1)
        pool_ids = ids.reshape(-1)[rows]
        group = torch.searchsorted(context_ids, pool_ids).clamp(max=len(context_ids) - 1)
        member = context_ids[group] == pool_ids  # the pool's positions of a selected context
        rows, group = rows[member], group[member]
        shuffle = torch.randperm(len(rows))  # a uniform order, then stable-grouped: the first k draw
        rows, group = rows[shuffle], group[shuffle]
        order = torch.argsort(group, stable=True)
        rows, group = rows[order], group[order]
        counts = torch.bincount(group, minlength=len(context_ids))  # (P,) each >= 1: the selection's own
        starts = torch.cumsum(counts, 0) - counts
        keep = torch.arange(len(group)) - starts[group] < k
        rows, group = rows[keep], group[keep]
        device = output.logits.device
        logits = output.logits[:, self.context_len - 1 :]  # (B, T-L+1, V): predictions after each context
        sampled = logits.reshape(-1, logits.size(-1))[rows.to(device)]  # (M, V), M <= k * P
        probs = torch.softmax(_at_least_fp32(sampled), dim=-1)  # Q(·|sh, x_i)
        group, samples = group.to(device), counts.clamp(max=k).to(device=device, dtype=probs.dtype)
        total = probs.new_zeros((len(context_ids), probs.size(-1))).index_add(0, group, probs)  # (P, V) Σ_i Q_i
        # the floor is reached only where every sample gives y a probability below ~1e-38 (log < -87)
        total = total.clamp(min=torch.finfo(total.dtype).tiny)
        return torch.log(total) - torch.log(samples).unsqueeze(1)  # log (1/m Σ_i Q_i), m = min(k, count)

    def _sampler(
        self,
        model: nn.Module,
        contexts: Tensor,
        context_ids: Tensor,
        k: int,
        device: torch.device,
        carried: tuple[Any, Tensor] | None = None,
    ) -> tuple[SampleFn, int]:
        """A deterministic function chunk -> (c, P, V) log Q(·|sh, x_i) for the k samples, and the chunk count."""
        assert self.index is not None
        chunk = min(self.config.sample_chunk, k)
        num_chunks = -(-k // chunk)
        num_positions = len(context_ids)

        if carried is not None:  # the released code: the last i+1 tokens of each window, from the row's state
            row_states, offsets = carried
            occurrences = self.index.sample(context_ids, k)  # (k, P), drawn with replacement
            stream = self.index.stream
            need = (offsets + 1).unsqueeze(0)  # (1, P) tokens fed for a position at offset i
            start = (occurrences - need + 1).clamp(min=0)  # (k, P)
            width = int(need.max())
            index = (start.unsqueeze(-1) + torch.arange(width)).clamp(max=len(stream) - 1)
            windows = stream[index].to(device)  # (k, P, W); only the first lengths[j, p] tokens are read
            lengths = (occurrences - start + 1).to(device)  # (k, P)

            def carried_fn(index: int) -> Tensor:
                rows = windows[index * chunk : (index + 1) * chunk]  # (c, P, W)
                count = rows.size(0)
                repeat = torch.arange(num_positions, device=device).repeat(count)  # sample-major entries
                with eval_mode(model):
                    log_probs = _last_log_probs(
                        model,
                        rows.reshape(-1, width),
                        lengths[index * chunk : (index + 1) * chunk].reshape(-1),
                        initial=select_state(row_states, repeat),
                    )  # (c*P, V)
                return log_probs.view(count, num_positions, -1)

            return carried_fn, num_chunks

        if self.config.realization == "replay":
            occurrences = self.index.sample(context_ids, k)  # (k, P) stream positions, fresh each call
            stream = self.index.stream
            window = min(self.config.context_window, len(stream))
            start = (occurrences - window + 1).clamp(min=0)  # (k, P)
            windows = stream[start.unsqueeze(-1) + torch.arange(window)].to(device)  # (k, P, W)
            lengths = (occurrences - start + 1).to(device)  # (k, P): tokens up to and including the occurrence

            def replay_fn(index: int) -> Tensor:
                rows = windows[index * chunk : (index + 1) * chunk]  # (c, P, W)
                with eval_mode(model):
                    log_probs = _last_log_probs(
                        model, rows.reshape(-1, window), lengths[index * chunk : (index + 1) * chunk].reshape(-1)
                    )  # (c*P, V)
                return log_probs.view(rows.size(0), num_positions, -1)

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
        record(self.bank, self.index, batch, output, self.context_len)
