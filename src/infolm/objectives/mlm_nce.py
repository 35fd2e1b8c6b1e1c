"""Masked language modelling as InfoNCE with negative sampling (Kong et al. Eq. 1 and I_MLM; the
"BERT-NCE" of Sec. 5): f(x̂_i, x_i) = g_ω(x̂_i)ᵀ g_ψ(x_i) (+ the output bias of x_i), where g_ω is the
encoder's MLM transform at the masked position and g_ψ the (tied) word-embedding lookup.

Negatives (the paper disagrees with itself; a setting here):
* ``batch`` (default, Sec. 5.2, the experiments): the masked subwords of the *other* sequences in the
  batch, as a multiset (a type masked twice elsewhere counts twice).
* ``unigram`` (Sec. 4): ``num_negatives`` draws from the unigram distribution of the training
  subwords (raised to ``unigram_power``), shared by all masked positions of the batch.
Either way the candidate set is the positive plus the negatives as drawn: a negative of the positive's
own type is kept (Eq. 1's estimator with samples from q), and no correction for q is applied.

Why a masked word of another row that equals the positive stays a negative here while ``dim`` drops an
n-gram equal to its positive: a candidate of MLM-NCE is a type, scored by a lookup, f(x̂_i, x_j) =
g_ω(x̂_i)ᵀ g_ψ(x_j), so the other row's copy is the positive's class drawn again from q and has exactly
the positive's score. It never pushes that score down (d loss / d f_pos = (1 + c) e^f_pos / Z - 1 <= 0
with c copies); it only bounds the attainable probability by 1 / (1 + c), as Eq. 1 with B drawn from q
(the batch's words are draws of the unigram distribution) does. Dropping it would change q to "the
unigram given not b", which the paper does not do. A DIM candidate is an encoded n-gram with a
representation of its own, which a copy counted as a negative would push away from the sentence.

Under ``torchrun`` the batch negatives are the masked subwords of every rank's rows (``across_ranks``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import Tensor, nn

from infolm.data.masking import IGNORE_INDEX
from infolm.data.subwords import EncoderData
from infolm.errors import InfolmError
from infolm.objectives.across_ranks import gather, global_rows, mean_over_ranks
from infolm.objectives.base import Batch, Objective, Terms, register_objective
from infolm.objectives.infonce import in_batch_negative_counts, info_nce
from infolm.objectives.mlm import masked_states

NEGATIVES = ("batch", "unigram")


@dataclasses.dataclass
class MLMNCEConfig:
    weight: float = 1.0  # λ_MLM (Kong et al. App. B: 1.0)
    negatives: str = "batch"  # batch (Sec. 5.2: words from other sequences of the batch) | unigram (Sec. 4)
    num_negatives: int = 1024  # unigram: draws per batch (the paper does not say; its batches hold ~70k subwords)
    unigram_power: float = 1.0  # unigram: q ∝ count^power (Sec. 4: the unigram distribution, power 1)

    def __post_init__(self) -> None:
        if self.negatives not in NEGATIVES:
            choices = ", ".join(NEGATIVES)
            raise InfolmError(f"objective.mlm-nce.negatives must be one of {choices}; got {self.negatives!r}")
        if self.num_negatives < 1:
            raise InfolmError(f"objective.mlm-nce.num_negatives must be at least 1, got {self.num_negatives}")


def unigram_candidates(draws: Tensor, positives: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Candidate types, each positive's column and the negative counts (N, U) for shared unigram draws."""
    types, inverse = torch.unique(torch.cat([positives, draws]), return_inverse=True)
    counts = torch.bincount(inverse[len(positives) :], minlength=len(types)).to(torch.float32)
    return types, inverse[: len(positives)], counts.expand(len(positives), -1)


def batch_candidates(positives: Tensor, rows: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Candidate types, each positive's column and counts (N, U) of the other rows' masked subwords.
    ``rows`` (N,) are the positives' rows in the global batch: every rank's masked subwords are
    candidates, so that P ranks see the candidates of one process with the whole batch."""
    every_positive, _ = gather(positives)
    every_row, _ = gather(rows)
    types, inverse = torch.unique(every_positive, return_inverse=True)
    num_rows = int(every_row.max()) + 1 if len(every_row) else 0
    counts = in_batch_negative_counts(every_row, inverse, len(types), num_rows, query_owner=rows)
    return types, torch.searchsorted(types, positives), counts


@register_objective("mlm-nce", config=MLMNCEConfig)
class MaskedLMNCE(Objective):
    """MLM with negative sampling as InfoNCE (Kong et al. Eq. 1, BERT-NCE)."""

    needs = frozenset({"masked-positions"})
    protocols = frozenset({"encoder"})

    def __init__(self, config: MLMNCEConfig) -> None:
        super().__init__()
        self.config = config
        self.register_buffer("proposal", torch.zeros(0), persistent=False)  # unigram q over subword types

    def setup(self, corpus: Any, model: nn.Module) -> None:
        if self.config.negatives == "unigram":
            if not isinstance(corpus, EncoderData):
                raise InfolmError("objective mlm-nce with negatives=unigram needs a task over WordPiece rows")
            self.set_unigram_counts(corpus.train.counts(corpus.vocab_size))

    def loss_scale(self, vocab_size: int) -> float | None:
        # ln of the candidates: the positive and num_negatives draws; batch: known only per batch
        return math.log(1 + self.config.num_negatives) if self.config.negatives == "unigram" else None

    def set_unigram_counts(self, counts: Tensor) -> None:
        """Subword counts of the training data (the unigram proposal q)."""
        weights = counts.double().clamp(min=0) ** self.config.unigram_power
        self.proposal = (weights / weights.sum()).float()

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        masked = batch.targets != IGNORE_INDEX  # (B, T)
        positives = batch.targets[masked]  # (N,)
        features = model.mlm_features(masked_states(model, batch, output)[masked])  # type: ignore[operator]
        if self.config.negatives == "batch":
            types, column, counts = batch_candidates(positives, global_rows(torch.nonzero(masked)[:, 0]))
        else:
            if self.proposal.numel() == 0:
                raise InfolmError("objective mlm-nce with negatives=unigram needs the task's subword counts")
            draws = torch.multinomial(self.proposal, self.config.num_negatives, replacement=True)
            types, column, counts = unigram_candidates(draws.to(positives.device), positives)
        scores = model.mlm_logits(features, types)  # type: ignore[operator]  # (N, U)
        loss = mean_over_ranks(info_nce(scores.float(), column, counts))  # the mean over every rank's masked subwords
        return Terms(losses={"mlm-nce": loss}, tokens=int(masked.sum()))
