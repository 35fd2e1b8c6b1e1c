"""Gradient estimators of Monte Carlo objectives: surrogates whose gradient is the estimator's.

Every estimator draws K samples from q(z|x), scores them with one batched decoder pass and
evaluates the objective Ô(h, r) of ``latent/estimators.py``; they differ in the surrogate:

- ``elbo``, ``iwae``: reparameterized z, autograd through Ô (Kingma & Welling; Burda et al.).
- ``stl``: as ``iwae`` but ln q(z|x) under stopped parameters (Roeder et al. 2017, "sticking the
  landing"); unbiased for K = 1 and for Ŝ-only objectives only in that case.
- ``dreg``: doubly reparameterized (Tucker et al. 2018); coefficients from
  :func:`~infolm.latent.estimators.dreg_coefficients`, for Û^K too.
- ``reinforce``: score function with the whole Ô as every draw's learning signal (no baseline).
- ``vimco``: score function with the leave-one-out baseline Ô_{-i} (Mnih & Rezende 2016), for Û^K too.

The surrogate's value is Ô itself (the estimator-specific part is added with zero value), so the
loss that is logged is the objective that is estimated.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor
from torch.distributions import Distribution

from infolm.latent.base import LatentDraws, LatentVariableModel, analytic_kl
from infolm.latent.estimators import (
    Objective,
    dreg_coefficients,
    leave_one_out_values,
    objective_value,
    samples_needed,
)
from infolm.latent.latents import detach_distribution

ESTIMATORS = ("elbo", "iwae", "stl", "dreg", "reinforce", "vimco")
PATHWISE = ("elbo", "iwae", "stl", "dreg")  # need reparameterized (continuous) latents
SCORE_FUNCTION = ("reinforce", "vimco")


@dataclasses.dataclass
class SurrogateOutput:
    surrogate: Tensor  # (B,): value Ô, gradient the estimator's gradient of Ô
    value: Tensor  # (B,) Ô, detached
    draws: LatentDraws  # the draws and per-draw quantities, detached


def objective_surrogate(
    model: LatentVariableModel, tokens: Tensor, lengths: Tensor, objective: Objective, estimator: str
) -> SurrogateOutput:
    """Ô for a batch and a surrogate carrying ``estimator``'s gradient (maximize it)."""
    samples = samples_needed(objective)
    q, p = model.posterior(tokens, lengths), model.prior()
    if estimator in PATHWISE:
        if not model.reparameterized:
            raise ValueError(f"the {estimator} estimator needs reparameterized latents")
        z = q.rsample((samples,))  # (K, B, *event), pathwise in φ
        if estimator == "dreg":
            return _dreg(model, tokens, lengths, objective, z, q, p)
        h = model.log_likelihood(tokens, lengths, z)  # (K, B)
        q_for_ratio = detach_distribution(q) if estimator == "stl" else q
        log_prior, log_posterior = p.log_prob(z), q_for_ratio.log_prob(z)
        kl = analytic_kl(q, p)
        value = objective_value(objective, h, log_prior - log_posterior, kl)
        return SurrogateOutput(value, value.detach(), _detached(z, h, log_prior, log_posterior, kl))
    if estimator in SCORE_FUNCTION:
        z = q.sample((samples,))  # no path through z: the score function carries φ's gradient
        h = model.log_likelihood(tokens, lengths, z)
        log_prior, log_posterior = p.log_prob(z), q.log_prob(z)  # ln q(z_i|x) keeps its φ graph
        kl = analytic_kl(q, p)
        value = objective_value(objective, h, log_prior - log_posterior, kl)  # direct terms: θ, and φ via ln q
        if estimator == "vimco":
            baseline = leave_one_out_values(objective, h.detach(), (log_prior - log_posterior).detach(), _d(kl))
        else:
            baseline = torch.zeros_like(h)  # REINFORCE: no baseline (VIMCO 1 in the thesis's figures)
        signal = (value.detach().unsqueeze(0) - baseline).detach()  # (K, B): Ô - Ô_{-i}
        score = (signal * log_posterior).sum(0)  # Σ_i signal_i ∇_φ ln q(z_i|x)
        surrogate = value + score - score.detach()
        return SurrogateOutput(surrogate, value.detach(), _detached(z, h, log_prior, log_posterior, kl))
    raise ValueError(f"unknown estimator {estimator!r}; known: {', '.join(ESTIMATORS)}")


class _GradientScale:
    """The per-draw factor (K, B) that ``_ScaleGradient`` applies; set after the forward pass, once
    the coefficients (which need ln p(x|z)'s value) are known."""

    factor: Tensor | None = None


class _ScaleGradient(torch.autograd.Function):
    """Identity on z (K, B, ...); the gradient reaching z is multiplied per draw by ``scale.factor``."""

    @staticmethod
    def forward(ctx: Any, z: Tensor, scale: _GradientScale) -> Tensor:
        ctx.scale = scale
        return z.view_as(z)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        factor = ctx.scale.factor
        if factor is None:
            raise RuntimeError("the DReG gradient scale was never set")
        return grad * factor.reshape(factor.shape + (1,) * (grad.dim() - factor.dim())), None


def _ratio_is_safe(d_h: Tensor, path_h: Tensor) -> bool:
    """path_h / d_h can rescale the decoder's gradient on z: every d_h is far from subnormal, or its
    path_h is 0 too (a draw whose weight underflowed)."""
    smallest = torch.finfo(d_h.dtype).tiny / torch.finfo(d_h.dtype).eps
    return bool(((d_h.abs() >= smallest) | (path_h == 0)).all())


def _dreg(
    model: LatentVariableModel,
    tokens: Tensor,
    lengths: Tensor,
    objective: Objective,
    z: Tensor,
    q: Distribution,
    p: Distribution,
) -> SurrogateOutput:
    """Decoder: Σ_i ∂Ô/∂h_i ln p(x|z_i) at fixed z; encoder: Σ_i (path_h ∂h_i/∂z_i + path_r ∂r_i/∂z_i) ∂z_i/∂φ.

    θ and φ need the decoder's backward under different per-draw weights (d_h = ∂Ô/∂h and path_h).
    The draws are independent rows of the folded decoder, so the gradient that its backward leaves on
    z_i is linear in draw i's weight alone: one backward weighted by d_h gives θ's gradient, and
    multiplying what reaches z_i by path_h_i / d_h_i gives the encoder's (``_ScaleGradient``). Where
    that ratio is not safe (some d_h_i zero or subnormal while path_h_i is not), nothing reaches z
    through the decoder's backward; path_h's Σ_i path_h_i ∂h_i/∂z_i comes instead from a separate
    vector-Jacobian product and re-enters the encoder's graph through <g, z>. Both give the same
    gradient (tested); the first saves a backward pass through the decoder. r is evaluated on the live
    z with q's parameters stopped.
    """
    scale = _GradientScale()
    differentiate = torch.is_grad_enabled() and z.requires_grad
    z_decoder = _ScaleGradient.apply(z, scale) if differentiate else z
    h = model.log_likelihood(tokens, lengths, z_decoder)  # (K, B): θ, and φ through z_decoder
    log_prior, log_posterior = p.log_prob(z), detach_distribution(q).log_prob(z)  # φ via z only
    log_ratio = log_prior - log_posterior
    value = objective_value(objective, h.detach(), log_ratio.detach())
    coefficients = dreg_coefficients(objective, h.detach(), log_ratio.detach())
    surrogate = (coefficients.d_h * h).sum(0) + (coefficients.path_r * log_ratio).sum(0)
    if differentiate and h.requires_grad:
        d_h, path_h = coefficients.d_h, coefficients.path_h
        if _ratio_is_safe(d_h, path_h):
            scale.factor = torch.where(d_h != 0, path_h / torch.where(d_h != 0, d_h, 1.0), 0.0)
        else:
            scale.factor = torch.zeros_like(d_h)
            (path,) = torch.autograd.grad(h, z_decoder, grad_outputs=path_h, retain_graph=True)
            surrogate = surrogate + (path.detach() * z).flatten(2).sum(-1).sum(0)  # Σ_i path_h_i ∂h_i/∂z_i · z_i
    surrogate = surrogate - surrogate.detach() + value
    return SurrogateOutput(surrogate, value, _detached(z, h, log_prior, log_posterior, analytic_kl(q, p)))


def _d(x: Tensor | None) -> Tensor | None:
    return None if x is None else x.detach()


def _detached(z: Tensor, h: Tensor, log_prior: Tensor, log_posterior: Tensor, kl: Tensor | None) -> LatentDraws:
    return LatentDraws(z.detach(), h.detach(), log_prior.detach(), log_posterior.detach(), _d(kl))
