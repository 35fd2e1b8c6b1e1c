"""A-MIM learning of a sentence latent-variable model (SentenceMIM Eq. 14, Alg. 1).

With a joint sample x_i ~ P(x), z_i ~ q(z|x_i) (reparameterized), Alg. 1 minimizes

    L_MIM = -1/N sum_i [ ln p(x_i|z_i) + 1/2 (ln q(z_i|x_i) + ln P(z_i)) ]

the tractable upper bound of Eq. 14 on the A-MIM loss (Eq. 7) without its constant 1/2 H_P(x).
P(z) = N(0, I) is the anchor: the model's ``prior()``. No KL annealing or other loss heuristic
(Sec. 4.2). The loss is Alg. 1's mean over the batch's sentences, divided by the training sentences'
mean length (a constant: it reads per token, as infolm's other losses; ``normalize``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from torch import nn

from infolm.errors import InfolmError
from infolm.latent.base import LatentVariableModel
from infolm.latent.estimators import amim_loss
from infolm.objectives.base import Batch, Terms, register_objective
from infolm.objectives.latent_sentences import (
    SentenceLatentObjective,
    check_normalization,
    normalized_loss,
    sentence_rows,
)


@dataclasses.dataclass
class AMIMConfig:
    weight: float = 1.0  # multiplier in the Composite
    samples: int = 1  # joint samples z ~ q(z|x) per sentence (Alg. 1: one)
    # sentences: Alg. 1's mean over the batch's sentences (over the training sentences' mean length, a
    # constant); tokens: over the batch's scored tokens (long-sentence batches weigh less per sentence)
    normalize: str = "sentences"

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise InfolmError(f"objective.amim.samples must be at least 1, got {self.samples}")
        check_normalization("amim", self.normalize)


@register_objective("amim", config=AMIMConfig)
class AMIM(SentenceLatentObjective):
    """A-MIM (SentenceMIM Alg. 1): -ln p(x|z) - 1/2 (ln q(z|x) + ln P(z)), z ~ q(z|x) reparameterized."""

    protocols = frozenset({"latent-variable"})
    name = "amim"

    def __init__(self, config: AMIMConfig) -> None:
        super().__init__()
        self.config = config

    def loss_scale(self, vocab_size: int) -> float | None:
        return None  # -1/2 (ln q(z|x) + ln P(z)) has no scale known before training (it grows with the latent size)

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        model = cast(LatentVariableModel, model)
        tokens, lengths = sentence_rows(batch)
        q, anchor = model.posterior(tokens, lengths), model.prior()
        z = q.rsample((self.config.samples,))  # (K, B, D)
        log_likelihood = model.log_likelihood(tokens, lengths, z)  # (K, B)
        log_posterior, log_anchor = q.log_prob(z), anchor.log_prob(z)  # (K, B)
        tokens_scored = int(model.scored_tokens(lengths).sum())
        total = amim_loss(log_likelihood, log_posterior, log_anchor).sum()  # Alg. 1 line 3, summed over sentences
        loss = normalized_loss(total, tokens.size(0), tokens_scored, self.mean_length, self.config.normalize)
        metrics = {
            "log_likelihood": float(log_likelihood.detach().mean()),
            "log_posterior": float(log_posterior.detach().mean()),
            "log_anchor": float(log_anchor.detach().mean()),
        }
        return Terms(losses={"amim": loss}, metrics=metrics, tokens=tokens_scored)
