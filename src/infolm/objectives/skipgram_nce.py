"""Skip-gram with negative sampling as InfoNCE (Kong et al. Sec. 3.1; Mikolov et al. 2013): the
classical baseline of Table 1, where both views are single words encoded by lookups.

For a word x_i and a context word x_j within ``window`` positions of it in the same row,
f(x_i, x_j) = g_ω(x_i)ᵀ g_ψ(x_j), with g_ω the encoder's input word embeddings (what is learned) and
g_ψ this term's own context-embedding table. Negatives: ``negatives`` draws per pair from the unigram
distribution of the training subwords raised to ``unigram_power``.

* ``infonce`` (default, Sec. 3.1): -[f(a, b) - log Σ_{b' ∈ {b} ∪ negatives} exp f(a, b')].
* ``negative-sampling`` (Mikolov et al.'s loss, local NCE): -[log σ(f(a, b)) + Σ log σ(-f(a, b'))].

Where the paper is silent: the words are subwords (WordPiece rows of the task, specials excluded),
pairs are subsampled to ``max_pairs`` per batch.

Under ``torchrun`` the loss is the mean over every rank's pairs (``across_ranks.mean_over_ranks``): each
pair weighs the same whichever rank holds it. The negatives are draws from q for each pair, not other
pairs' words, so no candidate is gathered from other ranks; ``max_pairs`` is the whole batch's budget, each
rank drawing its share (``across_ranks.rank_share``) from its own rows.
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
from infolm.objectives.across_ranks import mean_over_ranks, rank_share
from infolm.objectives.base import Batch, Objective, Terms, register_objective
from infolm.objectives.infonce import info_nce, local_nce

FORMS = ("infonce", "negative-sampling")
FIRST_REGULAR = 5  # ids below are the WordPiece specials


@dataclasses.dataclass
class SkipGramConfig:
    weight: float = 1.0  # multiplier in the Composite
    form: str = "infonce"  # infonce (Kong et al. Sec. 3.1) | negative-sampling (Mikolov et al. 2013)
    window: int = 5  # context words on each side (Mikolov et al.: 5)
    negatives: int = 5  # unigram draws per pair (Mikolov et al.: 5-20)
    unigram_power: float = 1.0  # q ∝ count^power (Sec. 3.1: the unigram distribution; Mikolov et al.: 0.75)
    max_pairs: int = 4096  # (word, context) pairs per batch, drawn uniformly from all

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise InfolmError(f"objective.skipgram-nce.form must be one of {', '.join(FORMS)}; got {self.form!r}")
        for key in ("window", "negatives", "max_pairs"):
            if getattr(self, key) < 1:
                raise InfolmError(f"objective.skipgram-nce.{key} must be at least 1, got {getattr(self, key)}")


def context_pairs(words: Tensor, valid: Tensor, window: int) -> tuple[Tensor, Tensor]:
    """All (word, context) pairs at distance 1..window within a row. ``words``, ``valid`` (B, T). (N,), (N,)."""
    centers, contexts = [], []
    t = words.size(1)
    for offset in range(1, min(window, t - 1) + 1):
        ok = valid[:, :-offset] & valid[:, offset:]
        left, right = words[:, :-offset][ok], words[:, offset:][ok]
        centers += [left, right]
        contexts += [right, left]
    if not centers:
        return words.new_zeros(0), words.new_zeros(0)
    return torch.cat(centers), torch.cat(contexts)


@register_objective("skipgram-nce", config=SkipGramConfig)
class SkipGramNCE(Objective):
    """Skip-gram with unigram negative samples, as InfoNCE or Mikolov's negative sampling."""

    needs = frozenset({"masked-positions"})
    protocols = frozenset({"encoder"})

    def __init__(self, config: SkipGramConfig) -> None:
        super().__init__()
        self.config = config
        self.context: nn.Embedding | None = None
        self.register_buffer("proposal", torch.zeros(0), persistent=False)

    def setup(self, corpus: Any, model: nn.Module) -> None:
        if not isinstance(corpus, EncoderData):
            raise InfolmError("objective skipgram-nce needs a task over WordPiece rows (masked-lm)")
        dim = model.word_embeddings.embedding_dim  # type: ignore[union-attr]
        self.context = nn.Embedding(corpus.vocab_size, int(dim))  # type: ignore[arg-type]
        nn.init.zeros_(self.context.weight)  # word2vec: context vectors start at zero
        self.context.to(next(model.parameters()).device)
        weights = corpus.train.counts(corpus.vocab_size).double() ** self.config.unigram_power
        self.proposal = (weights / weights.sum()).float()

    def loss_scale(self, vocab_size: int) -> float | None:
        k = self.config.negatives  # at f = 0 (context vectors start at zero): ln(1 + K) or (1 + K) ln 2
        return math.log(1 + k) if self.config.form == "infonce" else (1 + k) * math.log(2)

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        if self.context is None:
            raise RuntimeError("SkipGramNCE.setup(data, model) must run before training")
        words = torch.where(batch.targets != IGNORE_INDEX, batch.targets, batch.inputs)  # the unmasked row
        valid = words >= FIRST_REGULAR
        if batch.padding_mask is not None:
            valid &= batch.padding_mask
        centers, contexts = context_pairs(words, valid, self.config.window)
        limit = rank_share(self.config.max_pairs)  # the batch's budget, split over the ranks holding its rows
        if len(centers) > limit:
            keep = torch.randperm(len(centers), device=centers.device)[:limit]
            centers, contexts = centers[keep], contexts[keep]
        num_draws = len(centers) * self.config.negatives  # none without pairs (a rank's share can have none)
        draws = torch.multinomial(self.proposal, num_draws, replacement=True) if num_draws else centers.new_zeros(0)
        draws = draws.view(len(centers), self.config.negatives).to(centers.device)  # (N, K)
        g_word = model.word_embeddings(centers)  # type: ignore[operator]  # (N, D) g_ω
        positive = (g_word * self.context(contexts)).sum(-1)  # (N,)
        negative = torch.einsum("nd,nkd->nk", g_word, self.context(draws))  # (N, K)
        if self.config.form == "infonce":
            scores = torch.cat([positive[:, None], negative], dim=1).float()
            per_pair = info_nce(scores, torch.zeros(len(scores), dtype=torch.long, device=scores.device))
        else:
            per_pair = local_nce(positive.float(), negative.float())
        loss = mean_over_ranks(per_pair, empty=0.0)  # the mean over every rank's pairs; 0 without any
        return Terms(losses={"skipgram-nce": loss}, metrics={"skipgram_pairs": float(len(centers))})
