"""The DIM span objective of InfoWord (Kong et al. Sec. 4, I_DIM): InfoNCE between the global
representation of a masked sentence, g_ω(x̂_{i:j}) (the state of its first token, [CLS]), and the
representation of the masked n-gram x_{i:j} encoded on its own by the same Transformer, g_ω(x_{i:j});
negatives are the n-grams of the other sentences in the batch (Sec. 5.2), f is the dot product. Under
``torchrun`` the batch is every rank's rows (``across_ranks``), as one process with all of them has it.

Choices where the paper is silent:
* An n-gram of another sentence made of exactly the positive's subwords is not a negative: S holds
  the positive and "negative n-grams from other sentences" (Sec. 4), and a copy of the positive is the
  positive's content, which the sentence does contain; counted as a negative, its encoding would be
  pushed away from the sentence. (MLM-NCE keeps such copies: see ``mlm_nce.py``.)
* How an n-gram becomes one vector (``ngram_pooling``): ``cls`` (default) encodes [CLS] n-gram [SEP]
  and takes the [CLS] state, as the global view does; ``mean`` averages the n-gram's token states.
* A sentence with several masked spans is encoded once, masked at all of them, and each of its spans
  is a positive for it; the other spans of the same sentence are not negatives.
* The query x̂_{i:j} is its own view of the sentence, every span subword [MASK] (``query_inputs``),
  not the MLM input: MLM keeps BERT's per-subword 80/10/10 (Sec. 3.2: InfoWord's MLM differs from
  the standard one only by negative sampling), which leaves ~10% of a span's subwords as they are,
  while Sec. 4 masks the sentence "at position i to j" because a query that holds the words it must
  pick makes the task trivial. SpanBERT's span-level 80/10/10 would change MLM and still show whole
  spans ("unchanged") to the query. The cost: one more encoder pass over the rows, skipped when the
  two views are equal (``task.replace_mask=1``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from infolm.data.masking import SPAN_IDS
from infolm.data.wordpiece import CLS, MASK, PAD, SEP, SPECIALS
from infolm.errors import InfolmError
from infolm.objectives.across_ranks import gather, gather_with_grad, global_rows, mean_over_ranks
from infolm.objectives.base import Batch, Objective, Terms, register_objective
from infolm.objectives.infonce import info_nce

POOLINGS = ("cls", "mean")


@dataclasses.dataclass
class DIMConfig:
    weight: float = 1.0  # λ_DIM (Kong et al. App. B: tuned in {0.4, 0.6, 0.8, 1.0})
    ngram_pooling: str = "cls"  # cls | mean: how an encoded n-gram becomes one vector (the paper is silent)

    def __post_init__(self) -> None:
        if self.ngram_pooling not in POOLINGS:
            choices = ", ".join(POOLINGS)
            raise InfolmError(f"objective.dim.ngram_pooling must be one of {choices}; got {self.ngram_pooling!r}")


@dataclasses.dataclass
class Ngrams:
    tokens: Tensor  # (S, L) [CLS] n-gram [SEP] [PAD]...
    real: Tensor  # (S, L) bool, True at the n-gram's own subwords (not [CLS], [SEP], [PAD])
    owner: Tensor  # (S,) the batch row each n-gram was masked in


def masked_ngrams(span_ids: Tensor, originals: Tensor) -> Ngrams:
    """Every masked span of the batch as its own sequence. ``span_ids`` (B, T) (-1 outside spans),
    ``originals`` (B, T) the unmasked subwords at span positions."""
    rows, positions = torch.nonzero(span_ids >= 0, as_tuple=True)  # row-major: spans in order
    k = span_ids[rows, positions]
    spans_per_row = torch.zeros(span_ids.size(0), dtype=torch.long, device=span_ids.device)
    spans_per_row.scatter_reduce_(0, rows, k + 1, reduce="amax")
    offsets = spans_per_row.cumsum(0) - spans_per_row  # first global span index of each row
    span = offsets[rows] + k  # (M,) global span index of each masked subword
    num_spans = int(spans_per_row.sum())
    lengths = torch.bincount(span, minlength=num_spans)
    starts = torch.zeros(num_spans, dtype=torch.long, device=span.device)
    starts.scatter_reduce_(0, span, positions, reduce="amin", include_self=False)
    width = int(lengths.max()) + 2 if num_spans else 2
    tokens = torch.full((num_spans, width), SPECIALS.index(PAD), dtype=torch.long, device=span.device)
    tokens[:, 0] = SPECIALS.index(CLS)
    tokens[span, 1 + positions - starts[span]] = originals[rows, positions]
    tokens[torch.arange(num_spans, device=span.device), 1 + lengths] = SPECIALS.index(SEP)
    real = torch.zeros_like(tokens, dtype=torch.bool)
    real[span, 1 + positions - starts[span]] = True
    owner = torch.repeat_interleave(torch.arange(span_ids.size(0), device=span.device), spans_per_row)
    return Ngrams(tokens, real, owner)


def query_inputs(inputs: Tensor, span_ids: Tensor) -> Tensor:
    """x̂_{i:j} of Sec. 4: the sentence with every subword of its masked spans read as [MASK]. (B, T)."""
    return inputs.masked_fill(span_ids >= 0, SPECIALS.index(MASK))


def dim_info_nce(
    query: Tensor, ngram: Tensor, positive: Tensor, owner: Tensor, content: Tensor | None = None
) -> Tensor:
    """I_DIM's loss per query: InfoNCE of a positive n-gram against its sentence's global vector, the
    n-grams of the other sentences as negatives, except those with the positive's subwords.

    ``query`` (Q, D) the global vector of the sentence of each query's positive; ``ngram`` (S, D) the
    candidate n-grams; ``positive`` (Q,) each query's column of ``ngram``; ``owner`` (S,) the sentence
    of each n-gram; ``content`` (S,) equal for n-grams of the same subwords (None: all different).
    Returns (Q,)."""
    scores = query @ ngram.t()  # (Q, S): f(x̂ of the positive's sentence, n-gram s')
    negatives = owner[None, :] != owner[positive][:, None]
    if content is not None:
        negatives &= content[None, :] != content[positive][:, None]
    return info_nce(scores, positive, negatives.to(scores.dtype))


@register_objective("dim", config=DIMConfig)
class DeepInfoMaxSpans(Objective):
    """InfoWord's I_DIM: the [CLS] state of the sentence masked at its spans against its n-grams (InfoNCE)."""

    needs = frozenset({"masked-positions", "masked-spans"})
    protocols = frozenset({"encoder"})

    def __init__(self, config: DIMConfig) -> None:
        super().__init__()
        self.config = config

    def loss_scale(self, vocab_size: int) -> float | None:
        return None  # ln of the candidates, the batch's other n-grams: known only per batch

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        ngrams = masked_ngrams(batch.extras[SPAN_IDS], batch.targets)
        # Every rank's n-grams are candidates; each rank decides from all of them, so that all ranks
        # take the same path and meet in the same collectives.
        owner, _ = gather(global_rows(ngrams.owner))  # (S,) over every rank
        if len(owner) == 0 or int(owner.max()) == int(owner.min()):
            zero = output.sentence.sum() * 0.0  # one sentence (or none) has no negatives: no signal
            return Terms(losses={"dim": zero}, metrics={"dim_ngrams": float(len(owner))})
        _, content = torch.unique(gather(ngrams.tokens, fill=SPECIALS.index(PAD))[0], dim=0, return_inverse=True)
        if len(ngrams.owner) == 0:  # this rank masked nothing: it still joins the gather and its backward
            pooled = output.sentence[:0]
        elif self.config.ngram_pooling == "cls":
            pooled = model(ngrams.tokens).sentence  # (S_r, D)
        else:
            encoded = model(ngrams.tokens)
            weights = ngrams.real.to(encoded.states.dtype)
            pooled = (encoded.states * weights[..., None]).sum(1) / weights.sum(1, keepdim=True)
        query_ids = query_inputs(batch.inputs, batch.extras[SPAN_IDS])
        # the MLM pass serves as the query only where it already reads [MASK] at every span subword
        sentence = output.sentence if torch.equal(query_ids, batch.inputs) else model(query_ids).sentence  # (B, D)
        candidates, start = gather_with_grad(pooled.float())  # (S, D)
        positive = start + torch.arange(len(ngrams.owner), device=owner.device)
        query = sentence.float()[ngrams.owner]  # (S_r, D)
        loss = mean_over_ranks(dim_info_nce(query, candidates, positive, owner, content))
        return Terms(losses={"dim": loss}, metrics={"dim_ngrams": float(len(owner))})
