"""Next-sentence prediction as contrastive learning (Kong et al. App. A).

A row is ``[CLS] A [SEP] B [SEP]`` with B the true continuation of A (``task.pairs=true``). Negatives
pair the same A with the B of another row of the batch (row i takes the B of row i + k, k = 1..K,
"negative sentences sampled from the corpus"). The score is f = ψᵀ g_ω([a, b]) + c, with g_ω the final
state of the first token (App. A) and ψ, c this term's own parameters.

* ``local`` (BERT's NSP, "local" NCE): a logistic discriminator d = σ(f) tells real pairs from noise,
  -[log d(a, b) + Σ_k log(1 - d(a, b_k))].
* ``global`` (InfoNCE): -[f(a, b) - log Σ_{b' ∈ {b, b_1..b_K}} exp f(a, b')].

Where the paper is silent: negatives come from the batch (not a separate corpus draw), a negative row
longer than the model's positions keeps its first ``max_len - 1`` tokens and its final [SEP]. Under
``torchrun`` the rows are those of the global batch, every rank's (``across_ranks``): the B of row
i + k may be another rank's, and P ranks pair sentences as one process with the whole batch does.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import Tensor, nn

from infolm.data.wordpiece import PAD, SEP, SPECIALS
from infolm.errors import InfolmError
from infolm.objectives.across_ranks import gather_batch, mean_over_ranks
from infolm.objectives.base import Batch, Objective, Terms, register_objective
from infolm.objectives.infonce import info_nce, local_nce

FORMS = ("local", "global")
PAD_ID, SEP_ID = SPECIALS.index(PAD), SPECIALS.index(SEP)


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


def swap_second_sentences(tokens: Tensor, shift: int, max_len: int) -> Tensor:
    """Rows ``[CLS] A_i [SEP] B_j [SEP]`` with j = (i + shift) mod B, from rows [CLS] A [SEP] B [SEP] [PAD]. (B, W)."""
    n = tokens.size(0)
    is_sep = tokens == SEP_ID
    first_sep = is_sep.long().argmax(1)  # (B,)
    length = (tokens != PAD_ID).sum(1)  # (B,) [CLS] .. final [SEP]
    a_len = first_sep + 1  # [CLS] A [SEP]
    b_len = length - a_len  # B [SEP]
    partner = (torch.arange(n, device=tokens.device) + shift) % n
    total = (a_len + b_len[partner]).clamp(max=max_len)  # (B,)
    width = int(total.max())
    p = torch.arange(width, device=tokens.device)[None, :]  # (1, W)
    from_b = (p - a_len[:, None] + a_len[partner][:, None]).clamp(min=0, max=tokens.size(1) - 1)
    own = tokens.gather(1, p.clamp(max=tokens.size(1) - 1).expand(n, -1))  # (B, W) A_i at the front
    other = tokens[partner].gather(1, from_b)  # (B, W) B_j shifted to follow A_i
    rows = torch.where(p < a_len[:, None], own, other)
    rows = rows.masked_fill(p >= total[:, None], PAD_ID)
    return rows.scatter(1, (total - 1)[:, None], SEP_ID)


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
        negatives = []
        for shift in range(1, self.config.negatives + 1):
            swapped = swap_second_sentences(global_batch, shift, model.config.max_len)[own]  # type: ignore[union-attr, arg-type]
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
