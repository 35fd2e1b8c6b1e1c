"""The IMM term: its settings and the ``imm`` objective that puts the pieces together (Eqs. 11-15, Alg. 1).

Choices made here (the paper leaves them open for a recurrent model):

* How many samples: k on every step by default, the consistent objective (Eq. 15; Sec. 5.1). ``j > 1``
  takes the k-sample estimate on every j-th optimizer step (``batch.step % j == 0``) only and a 1-sample
  step otherwise, as App. D.2's experiments do (j = 5): ``one_sample=eq18`` is the single-sample
  objective of Eq. 18, an upper bound on the IMM risk whose minimizer can miss the true model
  (Prop. 5.1; ``tests/test_imm_consistency.py`` on App. B.2's example); ``one_sample=released`` makes
  those steps the authors' released code's (``released_one_sample.py``).
* Which short contexts and how an extended context is realized: ``contexts.py`` and
  ``realizations.py``.
* When: from the first step by default (the paper is silent); ``start_step`` and
  ``start_below_ppl`` delay the term, and ``start_lr`` resets the learning rate when it starts, as
  the authors' released code does (IMM once the validation perplexity is below 90, lr reset to 0.5).
* Gradient: the k-sample estimate's gradient is computed sample by sample with the crosstalk
  decomposition of App. C.2 (memory independent of k; ``crosstalk.py``), and the IMM loss is returned
  in its own clip group so that the trainer clips it apart from the main objective (App. D.2); λ
  weighs it in the Composite (Eq. 11).
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
from infolm.objectives.base import Batch, Objective, Terms, register_objective
from infolm.objectives.imm.contexts import ShortContextIndex, batch_positions, select_contexts
from infolm.objectives.imm.crosstalk import (
    SampleFn,
    crosstalk_induced_cross_entropy,
    induced_cross_entropy,
    weighted_mean,
)
from infolm.objectives.imm.realizations import (
    carried_state_positions,
    carried_state_sampler,
    in_batch_log_induced,
    replay_sampler,
    state_bank_sampler,
)
from infolm.objectives.imm.released_one_sample import BackoffCache, released_one_sample_loss
from infolm.objectives.imm.state_bank import StateBank, record

REALIZATIONS = ("replay", "state-bank", "in-batch", "carried-state")
ONE_SAMPLE = ("eq18", "released")


@dataclasses.dataclass
class IMMConfig:
    weight: float = 0.2  # λ in Eq. 11 (App. D.2: 0.2 in all language-modeling experiments)
    k: int = 10  # extended contexts sampled per short context on k-sample steps (App. D.2: k=10 for the LSTM)
    # k-sample IMM (Eq. 15) every j-th step, a 1-sample step (``one_sample``) otherwise. 1: Eq. 15 on every
    # step, the consistent objective; App. D.2 trains with j=5, whose 1-sample steps are Eq. 18 (Prop. 5.1)
    j: int = 1
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
    # 1-sample steps (j > 1): eq18 (Eq. 15 with k = 1, which is Eq. 18: one sample per short context against
    # P̂(·|sh), the log outside the expectation) | released (the
    # authors' released code: each position's own prediction against (1 − γ(x))·onehot(y) + γ(x)·P̂(y), with
    # γ(x) the restricted bigram's back-off mass after the previous word x and P̂(y) its unigram; bigram only)
    one_sample: str = "eq18"

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
        self._backoff_cache: BackoffCache = {}

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
            terms.losses["imm"], terms.metrics["imm_contexts"] = released_one_sample_loss(
                batch, output, positions[2], self.context_len, self.restricted, self._backoff_cache
            )
            terms.metrics["imm_k"] = 1.0
            if config.realization == "state-bank":
                self._record(batch, output)
            return terms
        carried = None
        if config.realization == "carried-state":  # one entry per position: its own row state and offset
            contexts, context_ids, weights, carried = carried_state_positions(
                model, batch, positions, self.context_len, config.positions_per_batch
            )
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
                log_induced = in_batch_log_induced(positions, output, context_ids, k, self.context_len)  # (P, V)
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

    def _select(
        self, batch: Batch, positions: tuple[Tensor, Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The distinct short contexts of the selected positions, their ids and weights (Eq. 12;
        ``contexts.select_contexts``); for the state bank, only those with a banked state."""
        has_state = self.bank.available if self.config.realization == "state-bank" else None
        return select_contexts(
            self.index, batch, self.context_len, self.config.positions_per_batch, positions, has_state
        )

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
        if carried is not None:  # the released code: the last i+1 tokens of each window, from the row's state
            return carried_state_sampler(model, self.index, context_ids, k, chunk, carried, device), num_chunks
        if self.config.realization == "replay":
            window = self.config.context_window
            return replay_sampler(model, self.index, context_ids, k, chunk, window, device), num_chunks
        return state_bank_sampler(model, self.bank, contexts, context_ids, k, chunk, device), num_chunks

    def _record(self, batch: Batch, output: Any) -> None:
        """Bank the primary pass's final state under the short context that ends at the next input."""
        record(self.bank, self.index, batch, output, self.context_len)
