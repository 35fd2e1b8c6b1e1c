"""Mutual-information constrained Monte Carlo objectives of latent-variable models (Melis thesis ch. 5).

``mi-kl`` (Eq. 5.12), ``mi-renyi`` (Eq. 5.16), ``mi-power`` (Eq. 5.18) and ``beta-vae`` (Eq. 5.19),
each with a base/gradient estimator: ``elbo``, ``iwae``, ``stl``, ``dreg`` (reparameterized,
continuous latents) or ``reinforce``, ``vimco`` (score function, any latents). The math is in
``infolm.latent.estimators``; the surrogates in ``infolm.latent.gradients``. The loss is -Ô per
sentence (one latent vector per sentence), averaged over the batch's sentences as Eq. 5.5's
expectation over p_D(x) and divided by the constant mean length of a training sentence so that it
reads per token (``normalize: sentences``, the default); ``normalize: tokens`` divides the batch's
sum by its scored tokens instead, which with length-bucketed batches weighs a sentence of a
short-sentence batch up to several times more than one of a long-sentence batch, in the likelihood
and in the MI term alike.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from torch import nn

from infolm.errors import InfolmError
from infolm.latent.base import LatentVariableModel
from infolm.latent.estimators import (
    MI_ESTIMATES,
    beta_vae_objective,
    iwae_bound,
    kl_estimate,
    kl_objective,
    power_objective,
    renyi_objective,
)
from infolm.latent.estimators import (
    Objective as TermList,
)
from infolm.latent.gradients import ESTIMATORS, PATHWISE, objective_surrogate
from infolm.objectives.base import Batch, Terms, register_objective
from infolm.objectives.latent_sentences import (
    SentenceLatentObjective,
    check_normalization,
    normalized_loss,
    sentence_rows,
)


@dataclasses.dataclass
class MonteCarloConfig:
    weight: float = 1.0  # multiplier of this term in the Composite
    estimator: str = "dreg"  # elbo | iwae | stl | dreg (continuous latents) | reinforce | vimco (any latents)
    samples: int = 16  # K: draws for the ln p(x) term (thesis: 1, 16, 64)
    normalize: str = "sentences"  # Eq. 5.5: a mean over sentences (read per token); tokens: per scored token
    mi_samples: int | None = None  # draws for the MI term (None: the same K draws; Figs. 5.4, 5.7: 16/1, 1/16).
    # Fewer MI draws than likelihood draws (16/1) with Gaussian latents makes mi-kl unbounded above for
    # λ > ~0.0105: as one posterior variance grows, one draw's ln q/p outgrows the 16-draw IWAE penalty
    # (docs/notebook/thesis-ch5.md, Fig. 5.4 at CPU scale). mi_estimate: shared-base is the bounded reading.
    mi_estimate: str = "own-draws"  # own-draws: Û^M - Ŝ^M (the thesis's 16/1, 1/16) | shared-base: Û^M - Ŝ^K

    def check(self, where: str) -> None:
        check_normalization(where.removeprefix("objective."), self.normalize)
        if self.estimator not in ESTIMATORS:
            raise InfolmError(f"{where}.estimator must be one of {', '.join(ESTIMATORS)}; got {self.estimator!r}")
        if self.samples < 1:
            raise InfolmError(f"{where}.samples must be at least 1, got {self.samples}")
        if self.mi_samples is not None and self.mi_samples < 1:
            raise InfolmError(f"{where}.mi_samples must be at least 1, got {self.mi_samples}")
        if self.mi_estimate not in MI_ESTIMATES:
            raise InfolmError(f"{where}.mi_estimate must be one of {', '.join(MI_ESTIMATES)}; got {self.mi_estimate!r}")
        if self.estimator == "vimco" and max(self.samples, self.mi_samples or 0) < 2:
            raise InfolmError(
                f"{where}.estimator=vimco needs at least 2 samples (its baseline leaves one out); use reinforce for 1"
            )

    @property
    def base(self) -> str:
        return "elbo" if self.estimator == "elbo" else "iwae"

    @property
    def mi_draws(self) -> int:
        return self.samples if self.mi_samples is None else self.mi_samples


def _check_lambda(where: str, lam: float) -> None:
    if not math.isfinite(lam) or lam >= 1.0:
        raise InfolmError(
            f"{where}.lam must be below 1 (at 1 the ln p(x) term vanishes; the thesis tunes it in "
            f"[-0.05, 0.9999]), got {lam}"
        )


@dataclasses.dataclass
class KLObjectiveConfig(MonteCarloConfig):
    lam: float = 0.5  # λ, weight of the MI term (Eq. 5.12; Table 5.2 tunes it in [-0.05, 0.9999])

    def __post_init__(self) -> None:
        self.check("objective.mi-kl")
        _check_lambda("objective.mi-kl", self.lam)


@dataclasses.dataclass
class RenyiObjectiveConfig(MonteCarloConfig):
    lam: float = 0.5  # λ, weight of the MI term (Eq. 5.16; Table 5.2 tunes it in [-0.05, 0.9999])
    alpha: float = 2.0  # α of the Rényi divergence D_α (Eq. 5.13); α > 0, α ≠ 1 (the thesis does not fix one)

    def __post_init__(self) -> None:
        self.check("objective.mi-renyi")
        _check_lambda("objective.mi-renyi", self.lam)
        if not math.isfinite(self.alpha) or self.alpha <= 0.0 or self.alpha == 1.0:
            raise InfolmError(
                f"objective.mi-renyi.alpha must be positive and not 1 (D_α divides by α - 1), got {self.alpha}"
            )


@dataclasses.dataclass
class PowerObjectiveConfig(MonteCarloConfig):
    alpha: float = 2.0  # α of ln p^α(x) (Eq. 5.18): λ = (α - 1)/α; Table 5.2 tunes it in [0.86, 16] (log)

    def __post_init__(self) -> None:
        self.check("objective.mi-power")
        if (self.mi_samples is not None and self.mi_samples != self.samples) or self.mi_estimate != "own-draws":
            raise InfolmError("objective.mi-power has one term: set samples, not mi_samples or mi_estimate")
        if not math.isfinite(self.alpha) or self.alpha <= 0.0:
            raise InfolmError(f"objective.mi-power.alpha must be positive, got {self.alpha}")


@dataclasses.dataclass
class BetaVAEConfig(MonteCarloConfig):
    estimator: str = "elbo"  # the β-VAE's reparameterized ELBO estimator (Higgins et al. 2017)
    samples: int = 1  # draws for E_q ln p(x|z)
    beta: float = 1.0  # β of Eq. 5.19 (equals the KL objective with λ = 1 - β, Prop. 13)

    def __post_init__(self) -> None:
        self.check("objective.beta-vae")
        if self.mi_samples is not None or self.mi_estimate != "own-draws":
            raise InfolmError("objective.beta-vae has no separate MI term: set samples, not mi_samples or mi_estimate")
        if self.estimator == "dreg" or self.estimator == "stl":
            raise InfolmError(f"objective.beta-vae uses an analytic KL: estimator {self.estimator} does not apply")
        if not math.isfinite(self.beta) or self.beta < 0.0:
            raise InfolmError(f"objective.beta-vae.beta must be non-negative, got {self.beta}")


class MonteCarloObjective(SentenceLatentObjective):
    """-Ô averaged over a batch's sentences per training-sentence token (or -Σ Ô / tokens); logs Ô, the
    K-draw ln p(x) bound and MI estimate per sentence."""

    protocols = frozenset({"latent-variable"})
    config: MonteCarloConfig
    name = "latent"

    def __init__(self, config: MonteCarloConfig, terms: TermList) -> None:
        super().__init__()
        self.config = config
        self.terms = terms

    # loss_scale: ln|V| per token (``SentenceLatentObjective``): for a model that has learned nothing (q = p, a
    # uniform decoder) every bound of these objectives is exact, so the loss starts there whatever λ, α or β

    def setup(self, corpus: Any, model: nn.Module) -> None:
        super().setup(corpus, model)
        if self.config.estimator in PATHWISE and not model.reparameterized:
            raise InfolmError(
                f"objective {self.name}: estimator {self.config.estimator} needs reparameterized (Gaussian) "
                "latents; with categorical latents use reinforce or vimco"
            )

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        assert isinstance(model, LatentVariableModel)
        tokens, lengths = sentence_rows(batch)
        out = objective_surrogate(model, tokens, lengths, self.terms, self.config.estimator)
        h, r = out.draws.log_likelihood, out.draws.log_ratio
        count = int(model.scored_tokens(lengths).sum())
        metrics = {
            f"{self.name}_objective": float(out.value.mean()),
            f"{self.name}_nll_bound": float(-iwae_bound(h, r).mean()),  # per sentence, from the training draws
            f"{self.name}_mi": float(kl_estimate(h, r).mean()) if h.size(0) > 1 else float(-r.mean()),
        }
        loss = normalized_loss(-out.surrogate.sum(), tokens.size(0), count, self.mean_length, self.config.normalize)
        return Terms(losses={self.name: loss}, metrics=metrics, tokens=count)


@register_objective("mi-kl", config=KLObjectiveConfig)
class KLObjective(MonteCarloObjective):
    """KL objective: Ŝ^K + λ (Û^K - Ŝ^K) (Melis thesis Eq. 5.12)."""

    name = "mi-kl"

    def __init__(self, config: KLObjectiveConfig) -> None:
        terms = kl_objective(config.lam, config.samples, config.mi_draws, config.base, config.mi_estimate)
        super().__init__(config, terms)


@register_objective("mi-renyi", config=RenyiObjectiveConfig)
class RenyiObjective(MonteCarloObjective):
    """Rényi objective: Ŝ^K + λ/(α-1) (Ŝ_α^K - α Ŝ^K) (Melis thesis Eq. 5.16)."""

    name = "mi-renyi"

    def __init__(self, config: RenyiObjectiveConfig) -> None:
        terms = renyi_objective(
            config.lam, config.alpha, config.samples, config.mi_draws, config.base, config.mi_estimate
        )
        super().__init__(config, terms)


@register_objective("mi-power", config=PowerObjectiveConfig)
class PowerObjective(MonteCarloObjective):
    """Power objective: α^-1 Ŝ_α^K (Melis thesis Eq. 5.18)."""

    name = "mi-power"

    def __init__(self, config: PowerObjectiveConfig) -> None:
        super().__init__(config, power_objective(config.alpha, config.samples, config.base))


@register_objective("beta-vae", config=BetaVAEConfig)
class BetaVAEObjective(MonteCarloObjective):
    """β-VAE: E_q ln p(x|z) - β KL(q(z|x) || p(z)) (Higgins et al. 2017; Melis thesis Eq. 5.19)."""

    name = "beta-vae"

    def __init__(self, config: BetaVAEConfig) -> None:
        super().__init__(config, beta_vae_objective(config.beta, config.samples))
