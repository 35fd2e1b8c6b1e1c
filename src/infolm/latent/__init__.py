"""Latent-variable models (thesis ch. 5, SentenceMIM): the model contract, latent families,
Monte Carlo estimators and their gradient surrogates, and evaluation. Importing this package
registers its models in ``infolm.models.MODELS``."""

from infolm.latent import sentence_gru, sentence_lstm, synthetic, synthetic_vq  # noqa: F401  (registration)
from infolm.latent.base import LatentDraws, LatentVariableModel, analytic_kl, draw, fold_samples
from infolm.latent.evaluation import LatentAccumulator, LatentBounds, LatentMetrics, evaluate_latent, latent_bounds
from infolm.latent.gradients import ESTIMATORS, PATHWISE, SCORE_FUNCTION, SurrogateOutput, objective_surrogate
from infolm.latent.latents import CategoricalLatent, GaussianLatent, detach_distribution, posterior_mean

__all__ = [
    "ESTIMATORS",
    "PATHWISE",
    "SCORE_FUNCTION",
    "CategoricalLatent",
    "GaussianLatent",
    "LatentAccumulator",
    "LatentBounds",
    "LatentDraws",
    "LatentMetrics",
    "LatentVariableModel",
    "SurrogateOutput",
    "analytic_kl",
    "detach_distribution",
    "draw",
    "evaluate_latent",
    "fold_samples",
    "latent_bounds",
    "objective_surrogate",
    "posterior_mean",
]
