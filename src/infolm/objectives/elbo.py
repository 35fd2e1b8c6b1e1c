"""The sentence VAE's ELBO with optional KL annealing (sVAE of SentenceMIM Sec. 4.2, after Bowman et al.).

    L = -1/N sum_i [ 1/K sum_k ln p(x_i|z_ik) - beta(step) KL(q(z|x_i) || p(z)) ],  z_ik ~ q(z|x_i)

with the KL in closed form (Gaussian posterior and prior) and reparameterized draws: the ``elbo``
estimator of the shared latent core (``beta_vae_objective`` with beta from the schedule). beta = 1
is the plain ELBO (the paper's PTB rows); ``anneal: logistic`` or ``linear`` gives the "+ kl" rows
(``objectives/kl_annealing.py``). The mean over the batch's sentences (the -1/N sum_i above), divided
by the training sentences' mean length, a constant, so that it reads per token (``normalize``; the
sentence-level ELBO is logged as ``elbo_sentence``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from torch import nn

from infolm.errors import InfolmError
from infolm.latent.base import LatentVariableModel
from infolm.latent.estimators import beta_vae_objective
from infolm.latent.gradients import objective_surrogate
from infolm.objectives.base import Batch, Terms, register_objective
from infolm.objectives.kl_annealing import SCHEDULES, kl_weight
from infolm.objectives.latent_sentences import (
    SentenceLatentObjective,
    check_normalization,
    normalized_loss,
    sentence_rows,
)


@dataclasses.dataclass
class ELBOConfig:
    weight: float = 1.0  # multiplier in the Composite
    samples: int = 1  # draws z ~ q(z|x) per sentence (one, as the VAE)
    anneal: str = "none"  # none | logistic | linear: the KL weight schedule (PTB rows of Table 2: none)
    k: float = 0.0025  # logistic slope (the authors' public code)
    x0: int = 10_000  # logistic midpoint in optimizer steps (the authors' public code)
    anneal_steps: int = 10_000  # linear: steps from weight 0 to 1 (Sec. 4.2: 10k mini-batches)
    normalize: str = "sentences"  # as objective.amim.normalize: per sentence (the formula above) or per token

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise InfolmError(f"objective.elbo.samples must be at least 1, got {self.samples}")
        if self.anneal not in SCHEDULES:
            raise InfolmError(f"objective.elbo.anneal must be one of {', '.join(SCHEDULES)}; got {self.anneal!r}")
        if self.anneal_steps < 1:
            raise InfolmError(f"objective.elbo.anneal_steps must be positive, got {self.anneal_steps}")
        check_normalization("elbo", self.normalize)


@register_objective("elbo", config=ELBOConfig)
class ELBO(SentenceLatentObjective):
    """Negative ELBO of a latent-variable model, analytic KL, optional KL annealing (sVAE)."""

    protocols = frozenset({"latent-variable"})
    name = "elbo"

    def __init__(self, config: ELBOConfig) -> None:
        super().__init__()
        self.config = config

    def kl_weight(self, step: int) -> float:
        c = self.config
        return kl_weight(step, c.anneal, c.k, c.x0, c.anneal_steps)

    def loss_scale(self, vocab_size: int) -> float | None:
        # Per token without annealing, -ELBO starts near ln|V| (q = p) and a healthy run lowers it. Per
        # sentence over the training mean length, a batch of long sentences reads higher; annealing raises
        # the KL's weight over a KL that grew while it was low: the run's own losses are the reference.
        if self.config.normalize == "tokens" and self.config.anneal == "none":
            return super().loss_scale(vocab_size)
        return None

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        model = cast(LatentVariableModel, model)
        tokens, lengths = sentence_rows(batch)
        beta = self.kl_weight(batch.step)
        out = objective_surrogate(model, tokens, lengths, beta_vae_objective(beta, self.config.samples), "elbo")
        draws = out.draws
        kl = draws.kl if draws.kl is not None else -draws.log_ratio.mean(0)
        tokens_scored = int(model.scored_tokens(lengths).sum())
        metrics = {
            "kl": float(kl.mean()),
            "kl_weight": beta,
            "log_likelihood": float(draws.log_likelihood.mean()),
            "elbo_sentence": float(out.value.mean()),
        }
        loss = normalized_loss(
            -out.surrogate.sum(), tokens.size(0), tokens_scored, self.mean_length, self.config.normalize
        )
        return Terms(losses={"elbo": loss}, metrics=metrics, tokens=tokens_scored)
