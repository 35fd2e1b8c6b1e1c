"""A-MIM learning of a sentence latent-variable model (SentenceMIM Eq. 14, Alg. 1).

With a joint sample x_i ~ P(x), z_i ~ q(z|x_i) (reparameterized), Alg. 1 minimizes

    L_MIM = -1/N sum_i [ ln p(x_i|z_i) + 1/2 (ln q(z_i|x_i) + ln P(z_i)) ]

the tractable upper bound of Eq. 14 on the A-MIM loss (Eq. 7) without its constant 1/2 H_P(x).
P(z) = N(0, I) is the anchor: the model's ``prior()``. No KL annealing or other loss heuristic
(Sec. 4.2). The per-sentence losses are summed over the batch and divided by its scored tokens, like
every training loss of infolm (Alg. 1 divides by the N sentences instead: the two differ by the
batch's mean sentence length, a per-batch scale that Adam's normalization absorbs).
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from torch import nn

from infolm.errors import InfolmError
from infolm.latent.base import LatentVariableModel
from infolm.latent.estimators import amim_loss
from infolm.objectives.base import Batch, Objective, Terms, register_objective
from infolm.objectives.latent_mc import require_latent_model, sentence_rows


@dataclasses.dataclass
class AMIMConfig:
    weight: float = 1.0  # multiplier in the Composite
    samples: int = 1  # joint samples z ~ q(z|x) per sentence (Alg. 1: one)

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise InfolmError(f"objective.amim.samples must be at least 1, got {self.samples}")


@register_objective("amim", config=AMIMConfig)
class AMIM(Objective):
    """A-MIM (SentenceMIM Alg. 1): -ln p(x|z) - 1/2 (ln q(z|x) + ln P(z)), z ~ q(z|x) reparameterized."""

    needs = frozenset({"sentences"})
    protocols = frozenset({"latent-variable"})
    name = "amim"

    def __init__(self, config: AMIMConfig) -> None:
        super().__init__()
        self.config = config

    def setup(self, corpus: Any, model: nn.Module) -> None:
        require_latent_model(self, model, corpus)

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        model = cast(LatentVariableModel, model)
        tokens, lengths = sentence_rows(batch)
        q, anchor = model.posterior(tokens, lengths), model.prior()
        z = q.rsample((self.config.samples,))  # (K, B, D)
        log_likelihood = model.log_likelihood(tokens, lengths, z)  # (K, B)
        log_posterior, log_anchor = q.log_prob(z), anchor.log_prob(z)  # (K, B)
        tokens_scored = int(model.scored_tokens(lengths).sum())
        loss = amim_loss(log_likelihood, log_posterior, log_anchor).sum() / max(tokens_scored, 1)
        metrics = {
            "log_likelihood": float(log_likelihood.detach().mean()),
            "log_posterior": float(log_posterior.detach().mean()),
            "log_anchor": float(log_anchor.detach().mean()),
        }
        return Terms(losses={"amim": loss}, metrics=metrics, tokens=tokens_scored)
