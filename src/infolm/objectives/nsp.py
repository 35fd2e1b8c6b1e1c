"""Next-sentence prediction as contrastive learning (Kong et al. App. A).

A row is ``[CLS] A [SEP] B [SEP]`` with B the true continuation of A (``task.pairs=true``). Negatives
pair the same A with text of another row of the batch ("negative sentences sampled from the corpus"):
row i takes, from row i + k (k = 1..K), whole words as many subwords as its own B, so that a negative
row is as long as its positive (where the text allows) and the length of a pair says nothing of it.
The score is f = ψᵀ g_ω([a, b]) + c, with g_ω the final state of the first token (App. A) and ψ, c
this term's own parameters.

* ``local`` (BERT's NSP, "local" NCE): a logistic discriminator d = σ(f) tells real pairs from noise,
  -[log d(a, b) + Σ_k log(1 - d(a, b_k))].
* ``global`` (InfoNCE): -[f(a, b) - log Σ_{b' ∈ {b, b_1..b_K}} exp f(a, b')].

Where the paper is silent: negatives come from the batch (not a separate corpus draw); their second
sentence is cut at word boundaries (``extras["word_starts"]``; without it every subword starts a word).
Under ``torchrun`` the rows are those of the global batch, every rank's (``across_ranks``): the B of row
i + k may be another rank's, and P ranks pair sentences as one process with the whole batch does.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import Tensor, nn

from infolm.data.masking import WORD_STARTS
from infolm.data.wordpiece import PAD, SEP, SPECIALS
from infolm.errors import InfolmError
from infolm.objectives.across_ranks import gather_batch, mean_over_ranks
from infolm.objectives.base import Batch, Objective, Terms, register_objective
from infolm.objectives.infonce import info_nce, local_nce

FORMS = ("local", "global")
PAD_ID, SEP_ID = SPECIALS.index(PAD), SPECIALS.index(SEP)
PARTNERS = 16  # rows a negative looks through for words as long as its B (a bound on the passes)


@dataclasses.dataclass
class NSPConfig:
    weight: float = 1.0  # multiplier in the Composite (BERT adds NSP to MLM with weight 1)
    form: str = "local"  # local (BERT's binary NSP, local NCE) | global (InfoNCE, App. A)
    negatives: int = 1  # negative second sentences per real pair (BERT: one, a 50/50 mix)

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise InfolmError(f"objective.nsp.form must be one of {', '.join(FORMS)}; got {self.form!r}")
        if self.negatives < 1:
            raise InfolmError(f"objective.nsp.negatives must be at least 1, got {self.negatives}")


def pair_text(tokens: Tensor, word_start: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Rows [CLS] A [SEP] B [SEP] [PAD]... as running text A ++ B: the text (R, W), its word boundaries
    (R, W + 1: before subword q, or at the text's end), |A| (R,) and |A| + |B| (R,)."""
    width = tokens.size(1)
    a_len = (tokens == SEP_ID).long().argmax(1) - 1  # (R,) subwords of A
    total = (tokens != PAD_ID).sum(1) - 3  # (R,) subwords of A and B
    q = torch.arange(width, device=tokens.device)[None, :]  # (1, W) position in the text
    source = (q + 1 + (q >= a_len[:, None]).long()).clamp(max=width - 1)  # its position in the row
    text = tokens.gather(1, source)
    starts = torch.ones_like(text, dtype=torch.bool) if word_start is None else word_start.gather(1, source)
    boundary = torch.cat([starts & (q < total[:, None]), torch.zeros_like(starts[:, :1])], 1)
    boundary[torch.arange(len(tokens), device=tokens.device), total] = True  # the text's end
    return text, boundary, a_len, total


def last_whole_piece(boundary: Tensor, total: Tensor, length: Tensor) -> tuple[Tensor, Tensor]:
    """The last piece of each row's text that is whole words and ``length`` (R,) subwords long: whether
    one exists (R,) bool and its start (R,), from the boundaries (R, W + 1) and text lengths (R,)."""
    t = torch.arange(boundary.size(1), device=boundary.device)[None, :]  # (1, W + 1) candidate starts
    end = t + length[:, None]
    whole = boundary & boundary.gather(1, end.clamp(max=boundary.size(1) - 1)) & (end <= total[:, None])
    whole &= length[:, None] >= 1
    return whole.any(1), torch.where(whole, t, -1).amax(1).clamp(min=0)


def swap_second_sentences(tokens: Tensor, shift: int, word_start: Tensor | None = None) -> Tensor:
    """Negative rows ``[CLS] A_i [SEP] B' [SEP]`` from rows ``[CLS] A [SEP] B [SEP] [PAD]...``: B' is whole
    words of another row's text A_j ++ B_j, as many subwords as B_i, so that a negative fills its row
    exactly as its positive does. j = (i + shift) mod R, else the next row that has such a piece (up to
    ``PARTNERS`` rows); of a row's pieces the last is taken (B_j itself when as long). Where none has
    one, the longest shorter piece of row (i + shift) mod R, else (no whole word fits) its first
    subwords. Without ``word_start`` (R, T) every subword starts a word. (R, W'), W' at most T."""
    n = tokens.size(0)
    rows = torch.arange(n, device=tokens.device)
    text, boundary, a_len, total = pair_text(tokens, word_start)
    room = total - a_len  # (R,) |B_i|: the length a negative's B' must have
    partner, start = (rows + shift) % n, torch.zeros_like(room)
    pending = torch.ones_like(room, dtype=torch.bool)
    offsets = [d % n for d in range(shift, shift + n) if d % n != 0] or [0]  # never row i itself
    for offset in offsets[:PARTNERS]:
        other = (rows + offset) % n
        found, at = last_whole_piece(boundary[other], total[other], room)
        found &= pending
        partner, start = torch.where(found, other, partner), torch.where(found, at, start)
        pending &= ~found
        if not bool(pending.any()):
            break
    length = torch.where(pending, room - 1, room)
    while bool((pending & (length >= 1)).any()):  # shorter pieces of the first partner
        found, at = last_whole_piece(boundary[partner], total[partner], length)
        found &= pending
        start = torch.where(found, at, start)
        pending &= ~found
        length = torch.where(pending, length - 1, length)
    length = torch.where(pending, torch.minimum(room, total[partner]), length)  # no whole word fits
    total_out = a_len + length + 3  # [CLS] A [SEP] B' [SEP]
    p = torch.arange(int(total_out.max()), device=tokens.device)[None, :]  # (1, W')
    from_b = (start[:, None] + p - a_len[:, None] - 2).clamp(min=0, max=text.size(1) - 1)
    second = text[partner].gather(1, from_b)  # (R, W') B' placed after A_i [SEP]
    out = torch.where(p <= a_len[:, None] + 1, tokens[:, : p.size(1)], second)  # [CLS] A_i [SEP] of row i
    out = out.masked_fill(p >= total_out[:, None], PAD_ID)
    return out.scatter(1, (total_out - 1)[:, None], SEP_ID)


@register_objective("nsp", config=NSPConfig)
class NextSentencePrediction(Objective):
    """NSP as local NCE (BERT) or global InfoNCE (Kong et al. App. A)."""

    needs = frozenset({"sentence-pairs"})
    protocols = frozenset({"encoder"})

    def __init__(self, config: NSPConfig) -> None:
        super().__init__()
        self.config = config
        self.score: nn.Linear | None = None

    def setup(self, corpus: Any, model: nn.Module) -> None:
        self.score = nn.Linear(model.config.dim, 1)  # type: ignore[union-attr, arg-type]  # ψ and c
        nn.init.normal_(self.score.weight, std=0.02)
        nn.init.zeros_(self.score.bias)
        self.score.to(next(model.parameters()).device)

    def loss_scale(self, vocab_size: int) -> float | None:
        k = self.config.negatives  # at f = 0: local, 1 + K binary cross-entropies; global, ln of 1 + K candidates
        return (1 + k) * math.log(2) if self.config.form == "local" else math.log(1 + k)

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        if self.score is None:
            raise RuntimeError("NextSentencePrediction.setup(data, model) must run before training")
        if bool(((batch.inputs == SEP_ID).sum(1) < 2).any()):
            raise InfolmError("objective nsp needs rows of two sentences: set task.pairs=true")
        positive = self.score(output.sentence).squeeze(-1)  # (B,)
        global_batch, own = gather_batch(batch.inputs, fill=PAD_ID)  # (N, T); (B,) this rank's rows in it
        word_starts = batch.extras.get(WORD_STARTS)  # (B, T) bool, gathered as bytes
        global_starts = None if word_starts is None else gather_batch(word_starts.to(torch.uint8))[0].bool()
        negatives = []
        for shift in range(1, self.config.negatives + 1):
            swapped = swap_second_sentences(global_batch, shift, global_starts)[own]
            swapped = swapped[:, : int((swapped != PAD_ID).sum(1).max())]  # (B, W) without other ranks' padding
            negatives.append(self.score(model(swapped).sentence).squeeze(-1))
        negative = torch.stack(negatives, dim=1).float()  # (B, K)
        if self.config.form == "local":
            loss = mean_over_ranks(local_nce(positive.float(), negative))
        else:
            scores = torch.cat([positive.float()[:, None], negative], dim=1)
            loss = mean_over_ranks(info_nce(scores, torch.zeros(len(scores), dtype=torch.long, device=scores.device)))
        accuracy = float(mean_over_ranks((positive[:, None] > negative).float().mean(1)))  # every rank's pairs
        return Terms(losses={"nsp": loss}, metrics={"nsp_accuracy": accuracy})
