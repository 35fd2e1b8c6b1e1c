"""Monte Carlo objectives of latent-variable models as pure functions of per-sample log-weights.

Notation of Melis's thesis, ch. 5. For K draws z_1..z_K ~ q(z|x) of one example:

    h_i = ln p(x|z_i)                  (the integrand, "log-likelihood")
    r_i = ln p(z_i) - ln q(z_i|x)      (the log density ratio)
    ln w_i = h_i + r_i                 (log importance weight)
    ln w_i^α = α h_i + r_i             (Rényi substitution p(x|z) -> p(x|z)^α, Eq. 5.17)

Tensors are ``(K, *batch)``: samples first, any batch shape after (usually ``(K, B)``). Every
objective of the chapter is a linear combination of three per-example terms, each using the first
``samples`` draws:

    Ŝ_α^n = ln 1/n Σ exp(α h_i + r_i)                 (IWAE, Eq. 5.8; α ≠ 1: Eq. 5.17)
    Û^n   = Σ_i softmax(ln w)_i h_i                    (self-normalized IS, Eq. 5.9)
    α · mean_i h_i - KL(q(z|x) || p(z))                (the ELBO, Eq. 5.2, analytic KL)

so an objective is a tuple of :class:`Term` and :func:`objective_value` evaluates it. The gradient
estimators (IWAE, STL, DReG, REINFORCE, VIMCO) differ only in how a surrogate is built from the
same quantities: :func:`dreg_coefficients` gives the doubly reparameterized coefficients of any
such objective and :func:`leave_one_out_values` the VIMCO baseline (see ``latent/gradients.py``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch
from torch import Tensor

# Term kinds.
LOG_MEAN_EXP = "log_mean_exp"  # Ŝ_α^n (Eqs. 5.8, 5.17)
SELF_NORMALIZED = "self_normalized"  # Û^n (Eq. 5.9)
MEAN_LOG_LIKELIHOOD = "mean_log_likelihood"  # α/n Σ h_i (the ELBO's reconstruction term, Eq. 5.2)
KL = "kl"  # KL(q(z|x) || p(z)), analytic where it exists (Eq. 5.2)


@dataclasses.dataclass(frozen=True)
class Term:
    """``weight`` times one per-example quantity computed from the first ``samples`` draws."""

    weight: float
    kind: str  # LOG_MEAN_EXP | SELF_NORMALIZED | MEAN_LOG_LIKELIHOOD | KL
    samples: int = 1  # draws used (the first ones); a KL term uses them only without an analytic KL
    alpha: float = 1.0  # Rényi exponent on p(x|z) (Eq. 5.17); 1 is the plain term


Objective = tuple[Term, ...]


# --------------------------------------------------------------------------------------------
# The quantities


def log_weights(log_likelihood: Tensor, log_ratio: Tensor, alpha: float = 1.0) -> Tensor:
    """ln w_i^α = α ln p(x|z_i) + ln p(z_i) - ln q(z_i|x) (Eq. 5.17; α = 1 gives ln w_i)."""
    return alpha * log_likelihood + log_ratio if alpha != 1.0 else log_likelihood + log_ratio


def log_mean_exp(log_w: Tensor) -> Tensor:
    """Ŝ^K = ln 1/K Σ_i w_i (the IWAE bound, Eq. 5.8): ``(K, *batch) -> (*batch)``."""
    return torch.logsumexp(log_w, dim=0) - math.log(log_w.size(0))


def iwae_bound(log_likelihood: Tensor, log_ratio: Tensor, alpha: float = 1.0) -> Tensor:
    """Ŝ_α^K: the IWAE lower bound on ln p(x) (α = 1, Eq. 5.8) or on ln p^α(x) (Eq. 5.17)."""
    return log_mean_exp(log_weights(log_likelihood, log_ratio, alpha))


def self_normalized_log_likelihood(log_likelihood: Tensor, log_ratio: Tensor) -> Tensor:
    """Û^K = p̂^K(x)^-1 · 1/K Σ_i w_i ln p(x|z_i) = Σ_i softmax(ln w)_i ln p(x|z_i) (Eq. 5.9)."""
    weights = torch.softmax(log_weights(log_likelihood, log_ratio), dim=0)
    return (weights * log_likelihood).sum(0)


def kl_estimate(log_likelihood: Tensor, log_ratio: Tensor) -> Tensor:
    """Û^K - Ŝ^K: the KL objective's estimate of KL(p(z|x) || p(z)) (Eq. 5.12), consistent as K grows
    (Prop. 9 i). Averaged over data it is the MI estimate of Sec. 5.7.1. Its bias has no fixed sign:
    Prop. 9(ii) says it is upward whenever Ŝ^K is a lower bound, but with K = 1 the estimate's mean is
    KL(q || p(z)), which is 0 for q equal to the prior and exceeds the KL for a q far in the tail
    (tested on a conjugate Gaussian model)."""
    return self_normalized_log_likelihood(log_likelihood, log_ratio) - iwae_bound(log_likelihood, log_ratio)


def amim_loss(log_likelihood: Tensor, log_posterior: Tensor, log_anchor: Tensor) -> Tensor:
    """SentenceMIM Alg. 1 line 3 per example, -[h + 1/2 (ln q(z|x) + ln P(z))] averaged over the draws
    (Eq. 14 without its constant 1/2 H_P(x)): (K, B) each -> (B,)."""
    return -(log_likelihood + 0.5 * (log_posterior + log_anchor)).mean(0)


def renyi_estimate(log_likelihood: Tensor, log_ratio: Tensor, alpha: float) -> Tensor:
    """(Ŝ_α^K - α Ŝ^K) / (α - 1): the Rényi objective's estimate of D_α(p(z|x) || p(z)) (Eq. 5.16)."""
    s_alpha = iwae_bound(log_likelihood, log_ratio, alpha)
    return (s_alpha - alpha * iwae_bound(log_likelihood, log_ratio)) / (alpha - 1.0)


# --------------------------------------------------------------------------------------------
# The objectives (each a linear combination of terms)


def likelihood_terms(base: str, samples: int, alpha: float = 1.0, weight: float = 1.0) -> list[Term]:
    """``weight`` × the base estimator Ŝ_α of ln p^α(x) from ``samples`` draws.

    ``base="iwae"``: ln 1/n Σ w_i^α (Eqs. 5.8, 5.17; shared by the IWAE, STL, DReG, REINFORCE and
    VIMCO gradient estimators). ``base="elbo"``: α mean_i ln p(x|z_i) - KL(q||p), the ELBO with its
    KL term computed analytically (Eq. 5.2; the single-sample Ŝ_α^1 in expectation).
    """
    if base == "elbo":
        return [Term(weight * alpha, MEAN_LOG_LIKELIHOOD, samples), Term(-weight, KL, samples)]
    return [Term(weight, LOG_MEAN_EXP, samples, alpha)]


# How the MI term of an objective with fewer (or more) MI draws than likelihood draws reads ln p(x):
# "own-draws", from the MI term's own K_mi draws (Eqs. 5.12, 5.16 with K = K_mi inside the bracket; at
# K_mi = 1 the KL term is one draw's ln q(z|x)/p(z), the representational KL of Prop. 11, which the thesis's
# Figs. 5.4 and 5.7 use for 16/1); "shared-base", from the likelihood term's K_ll draws, so that the KL
# objective is Eq. 5.11's grouping (1 - λ) Ŝ^{K_ll} + λ Û^{K_mi}. With K_ll = K_mi the two are one objective.
MI_ESTIMATES = ("own-draws", "shared-base")


def kl_objective(
    lam: float, likelihood_samples: int, mi_samples: int, base: str = "iwae", mi_estimate: str = "own-draws"
) -> Objective:
    """Ô_KL = Ŝ^{K_ll} + λ (Û^{K_mi} - Ŝ^{K_mi}) (Eq. 5.12; with K_ll = K_mi it is Eq. 5.11:
    (1 - λ) Ŝ^K + λ Û^K). Separate counts give the 16/1 and 1/16 variants of Figs. 5.4 and 5.7.

    With Gaussian latents and K_mi = 1 < K_ll, ``own-draws`` is unbounded above: a latent the decoder
    ignores, its posterior variance σ² growing, adds λ σ² ε_1²/2 through the one draw's ln q/p and costs
    Ŝ^{K_ll} only σ² min_i ε_i²/2 (the best of K_ll draws), so for λ above E[min of K_ll χ²_1] (≈ 0.0105
    at K_ll = 16) the objective grows without bound in σ². ``shared-base`` (Û^{K_mi} - Ŝ^{K_ll}) is
    (1 - λ) Ŝ^{K_ll} + λ Û^{K_mi}, bounded above for discrete x by ln p(x|z) ≤ 0 and E Ŝ ≤ ln p(x)."""
    check_mi_estimate(mi_estimate)
    base_draws = likelihood_samples if mi_estimate == "shared-base" else mi_samples
    terms = likelihood_terms(base, likelihood_samples)  # Ŝ^{K_ll} ≈ ln p(x)
    terms.append(Term(lam, SELF_NORMALIZED, mi_samples))  # λ Û^{K_mi}
    terms += likelihood_terms(base, base_draws, weight=-lam)  # -λ Ŝ^{K_mi} (own-draws) or -λ Ŝ^{K_ll}
    return tuple(terms)


def renyi_objective(
    lam: float,
    alpha: float,
    likelihood_samples: int,
    mi_samples: int,
    base: str = "iwae",
    mi_estimate: str = "own-draws",
) -> Objective:
    """Ô_R = Ŝ^{K_ll} + λ/(α-1) (Ŝ_α^{K_mi} - α Ŝ^{K_mi}) (Eq. 5.16; with K_ll = K_mi it is
    Eq. 5.15: λ/(α-1) Ŝ_α^K - (λα/(α-1) - 1) Ŝ^K). ``mi_estimate`` as for ``kl_objective``: at K_mi = 1
    the own-draws bracket is (α - 1) ln q(z_1|x)/p(z_1), the same unbounded rate."""
    check_mi_estimate(mi_estimate)
    base_draws = likelihood_samples if mi_estimate == "shared-base" else mi_samples
    terms = likelihood_terms(base, likelihood_samples)  # Ŝ^{K_ll} ≈ ln p(x)
    terms += likelihood_terms(base, mi_samples, alpha, weight=lam / (alpha - 1.0))  # λ/(α-1) Ŝ_α^{K_mi}
    terms += likelihood_terms(base, base_draws, weight=-lam * alpha / (alpha - 1.0))  # -λα/(α-1) Ŝ^{K_mi or K_ll}
    return tuple(terms)


def check_mi_estimate(mi_estimate: str) -> None:
    if mi_estimate not in MI_ESTIMATES:
        raise ValueError(f"mi_estimate must be one of {', '.join(MI_ESTIMATES)}; got {mi_estimate!r}")


def power_objective(alpha: float, samples: int, base: str = "iwae") -> Objective:
    """Ô_P = α^-1 Ŝ_α^K (Eq. 5.18): the Rényi objective with λ = (α - 1)/α."""
    return tuple(likelihood_terms(base, samples, alpha, weight=1.0 / alpha))


def beta_vae_objective(beta: float, samples: int) -> Objective:
    """O_β-VAE = E_q ln p(x|z) - β KL(q(z|x) || p(z)) (Eq. 5.19), the expectation over ``samples`` draws."""
    return (Term(1.0, MEAN_LOG_LIKELIHOOD, samples), Term(-beta, KL, samples))


def samples_needed(objective: Objective) -> int:
    """Draws an objective reads: the largest ``samples`` of its terms."""
    return max(t.samples for t in objective)


def objective_value(
    objective: Objective, log_likelihood: Tensor, log_ratio: Tensor, kl: Tensor | None = None
) -> Tensor:
    """Ô for every example: ``h, r: (K, *batch) -> (*batch)``. ``kl`` (``*batch``) is needed by KL
    terms; without it they use the estimate mean_i ln q(z_i|x)/p(z_i) of their draws."""
    total: Tensor | None = None
    for term in objective:
        h, r = log_likelihood[: term.samples], log_ratio[: term.samples]
        if term.kind == LOG_MEAN_EXP:
            value = iwae_bound(h, r, term.alpha)
        elif term.kind == SELF_NORMALIZED:
            value = self_normalized_log_likelihood(h, r)
        elif term.kind == MEAN_LOG_LIKELIHOOD:
            value = term.alpha * h.mean(0)
        elif term.kind == KL:
            value = kl if kl is not None else -r.mean(0)
        else:
            raise ValueError(f"unknown term kind {term.kind!r}")
        total = term.weight * value if total is None else total + term.weight * value
    if total is None:
        raise ValueError("an objective needs at least one term")
    return total


# --------------------------------------------------------------------------------------------
# Gradient coefficients


@dataclasses.dataclass
class Coefficients:
    """Per-sample coefficients of a surrogate whose gradient is the chosen estimator's, all ``(K, *batch)``.

    ``d_h`` = ∂Ô/∂h_i multiplies ∇_θ ln p(x|z_i) (the decoder's gradient in every estimator).
    ``path_h`` and ``path_r`` multiply ∂h_i/∂z_i and ∂r_i/∂z_i in the encoder's pathwise gradient
    Σ_i (path_h ∂h_i/∂z_i + path_r ∂r_i/∂z_i) ∂z_i/∂φ, with r_i evaluated under stopped q parameters.
    """

    d_h: Tensor
    path_h: Tensor
    path_r: Tensor


def dreg_coefficients(objective: Objective, log_likelihood: Tensor, log_ratio: Tensor) -> Coefficients:
    """Doubly reparameterized coefficients (Tucker et al. 2018) of Ô(h, r) for the encoder.

    The reparameterized gradient of Ô has a score part -Σ_i ∂Ô/∂r_i ∇_φ ln q(z_i|x) (at fixed z_i).
    By the reparameterization identity E_q[f(z) ∇_φ ln q(z)] = E_q[∂f/∂z ∂z/∂φ], applied to
    f = ∂Ô/∂r_i as a function of z_i (the other draws are independent of z_i), it is replaced by
    -Σ_i d(∂Ô/∂r_i)/dz_i ∂z_i/∂φ, so

        path_h_i = ∂Ô/∂h_i - ∂²Ô/∂r_i∂h_i,     path_r_i = ∂Ô/∂r_i - ∂²Ô/∂r_i².

    Closed forms per term (w̃ = softmax(ln w^α), the normalized weights):
      Ŝ_α (Eq. 5.17): ∂/∂h = α w̃, ∂/∂r = w̃, path_h = α w̃², path_r = w̃² (the IWAE-DReG estimator).
      Û (Eq. 5.9):    ∂/∂h = w̃ (1 + h - Û), ∂/∂r = w̃ (h - Û),
                      path_h = w̃² (1 + 2 (h - Û)), path_r = 2 w̃² (h - Û).
    This is how the gradient of Û^K is formed under DReG: the same identity as for Ŝ^K, so the KL
    objective's gradient is unbiased for the gradient of its expectation, like IWAE's. MEAN_LOG_LIKELIHOOD
    has no score part (path = ∂/∂h). KL terms are refused: the ELBO's analytic KL is differentiated
    directly (the ``elbo`` estimator), not doubly reparameterized.
    """
    d_h = torch.zeros_like(log_likelihood)
    path_h = torch.zeros_like(log_likelihood)
    path_r = torch.zeros_like(log_likelihood)
    for term in objective:
        n = term.samples
        h, r = log_likelihood[:n], log_ratio[:n]
        if term.kind == LOG_MEAN_EXP:
            w = torch.softmax(log_weights(h, r, term.alpha), dim=0)
            d_h[:n] += term.weight * term.alpha * w
            path_h[:n] += term.weight * term.alpha * w * w
            path_r[:n] += term.weight * w * w
        elif term.kind == SELF_NORMALIZED:
            w = torch.softmax(log_weights(h, r), dim=0)
            centred = h - (w * h).sum(0, keepdim=True)  # h_i - Û
            d_h[:n] += term.weight * w * (1.0 + centred)
            path_h[:n] += term.weight * w * w * (1.0 + 2.0 * centred)
            path_r[:n] += term.weight * 2.0 * w * w * centred
        elif term.kind == MEAN_LOG_LIKELIHOOD:
            d_h[:n] += term.weight * term.alpha / n
            path_h[:n] += term.weight * term.alpha / n
        else:
            raise ValueError(f"DReG coefficients of a {term.kind!r} term are not defined")
    return Coefficients(d_h=d_h, path_h=path_h, path_r=path_r)


def leave_one_out_values(
    objective: Objective, log_likelihood: Tensor, log_ratio: Tensor, kl: Tensor | None = None
) -> Tensor:
    """Ô_{-i}: the objective with draw i's (h_i, r_i) replaced by the mean over the other draws,
    ``(K, *batch) -> (K, *batch)`` (needs K >= 2).

    For Ŝ^K this is VIMCO's baseline (Mnih & Rezende 2016, Eq. 9: ln w_i replaced by the mean of
    the other log-weights, i.e. w_i by their geometric mean). Replacing h_i and r_i (not only ln w_i)
    extends it to every term: Ŝ_α sees α h̄ + r̄, the mean of the others' ln w^α, and Û sees the
    same substitution. This is how the gradient of Û^K is formed under VIMCO: each draw's learning
    signal is Ô - Ô_{-i} for the whole objective, Û included.
    """
    K = log_likelihood.size(0)
    if K < 2:
        raise ValueError("a leave-one-out baseline needs at least 2 draws")

    def replaced(x: Tensor) -> Tensor:  # (K, *batch) -> (K draws, K replaced, *batch)
        others = (x.sum(0, keepdim=True) - x) / (K - 1)  # mean of the other draws, (K, *batch)
        eye = torch.eye(K, dtype=x.dtype, device=x.device).view(K, K, *([1] * (x.dim() - 1)))
        return x.unsqueeze(1) * (1 - eye) + others.unsqueeze(0) * eye

    kl_rows = kl.unsqueeze(0) if kl is not None else None
    return objective_value(objective, replaced(log_likelihood), replaced(log_ratio), kl_rows)


def check_objective(objective: Sequence[Term]) -> None:
    """Programming errors in a hand-built objective (configs are checked where they are read)."""
    for term in objective:
        if term.kind not in (LOG_MEAN_EXP, SELF_NORMALIZED, MEAN_LOG_LIKELIHOOD, KL):
            raise ValueError(f"unknown term kind {term.kind!r}")
        if term.samples < 1:
            raise ValueError(f"a term needs at least one draw, got {term.samples}")
