"""The deterministic sequence auto-encoder baseline (AE of SentenceMIM Sec. 4.5).

The sVAE loss without its KL term, with z the posterior mean: -ln p(x_i | mu(x_i)) per sentence,
averaged over the batch's sentences and divided by the training sentences' mean length, a constant
(``normalize``, as the sVAE's and A-MIM's).
The model is the same latent-variable model (its variance head is unused); evaluate it with
``mean`` codes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from torch import nn

from infolm.latent.base import LatentVariableModel
from infolm.objectives.base import Batch, Terms, register_objective
from infolm.objectives.latent_sentences import (
    SentenceLatentObjective,
    check_normalization,
    normalized_loss,
    sentence_rows,
)


@dataclasses.dataclass
class AEConfig:
    weight: float = 1.0  # multiplier in the Composite
    normalize: str = "sentences"  # as objective.amim.normalize: per sentence or per token

    def __post_init__(self) -> None:
        check_normalization("ae", self.normalize)


@register_objective("ae", config=AEConfig)
class AutoEncoder(SentenceLatentObjective):
    """Deterministic auto-encoder: -ln p(x | E[q(z|x)]), no KL term (Sec. 4.5)."""

    protocols = frozenset({"latent-variable"})
    name = "ae"
    deterministic_latent = True  # its codes are the posterior means: evaluate and decode with those

    def __init__(self, config: AEConfig) -> None:
        super().__init__()
        self.config = config

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        model = cast(LatentVariableModel, model)
        tokens, lengths = sentence_rows(batch)
        z = model.posterior(tokens, lengths).mean.unsqueeze(0)  # (1, B, D)
        log_likelihood = model.log_likelihood(tokens, lengths, z)[0]  # (B,)
        tokens_scored = int(model.scored_tokens(lengths).sum())
        loss = normalized_loss(
            -log_likelihood.sum(), tokens.size(0), tokens_scored, self.mean_length, self.config.normalize
        )
        return Terms(losses={"ae": loss}, tokens=tokens_scored)
