"""The deterministic sequence auto-encoder baseline (AE of SentenceMIM Sec. 4.5).

The sVAE loss without its KL term, with z the posterior mean: -ln p(x_i | mu(x_i)) per sentence,
summed over the batch and divided by its scored tokens.
The model is the same latent-variable model (its variance head is unused); evaluate it with
``mean`` codes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from torch import nn

from infolm.latent.base import LatentVariableModel
from infolm.objectives.base import Batch, Objective, Terms, register_objective
from infolm.objectives.latent_mc import require_latent_model, sentence_rows


@dataclasses.dataclass
class AEConfig:
    weight: float = 1.0  # multiplier in the Composite


@register_objective("ae", config=AEConfig)
class AutoEncoder(Objective):
    """Deterministic auto-encoder: -ln p(x | E[q(z|x)]), no KL term (Sec. 4.5)."""

    needs = frozenset({"sentences"})
    protocols = frozenset({"latent-variable"})
    name = "ae"
    deterministic_latent = True  # its codes are the posterior means: evaluate and decode with those

    def __init__(self, config: AEConfig) -> None:
        super().__init__()
        self.config = config

    def setup(self, corpus: Any, model: nn.Module) -> None:
        require_latent_model(self, model, corpus)

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        model = cast(LatentVariableModel, model)
        tokens, lengths = sentence_rows(batch)
        z = model.posterior(tokens, lengths).mean.unsqueeze(0)  # (1, B, D)
        log_likelihood = model.log_likelihood(tokens, lengths, z)[0]  # (B,)
        tokens_scored = int(model.scored_tokens(lengths).sum())
        return Terms(losses={"ae": -log_likelihood.sum() / max(tokens_scored, 1)}, tokens=tokens_scored)
