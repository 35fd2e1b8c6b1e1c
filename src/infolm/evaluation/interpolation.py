"""Linear interpolation of a language model with an n-gram at evaluation time, the weight tuned on valid.

    p(y | h) = (1 - alpha) p_model(y | h) + alpha p_ngram(y | last n-1 tokens of h)

The classic way of using a small count model beside a neural one ("some of the earliest attempts ...
interpolated the output of the smaller model with modern larger models", IMM paper, Sec. 1): the
baseline beside IMM and noising, which put the n-gram into training instead.

alpha maximizes the validation log-likelihood

    L(alpha) = sum_i log m_i,   m_i = (1 - alpha) p_i + alpha q_i,
    L'(alpha) = sum_i (q_i - p_i) / m_i,   L''(alpha) = -sum_i ((q_i - p_i) / m_i)^2 <= 0,

a concave function of alpha on [0, 1] (a sum of logs of affine functions): its maximum is an end point
or the root of the decreasing L', found by Newton's method kept inside a shrinking bracket. The tuned
alpha is then applied to the split being scored.

Pairing: ``p_i`` and ``q_i`` are the two models' probabilities of the same token in the same place of
the text. The n-gram's history is the text before the token within its segment (a stream LM's whole
running text, across the windows and rows the model is batched in; a sentence LM's sentence from its
``<eos>``, the history the sentence LM itself sees), ``<eos>`` before the first token.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from infolm.errors import InfolmError
from infolm.evaluation.perplexity import TokenScores


def mix_log_probs(model_log_probs: Tensor, ngram_log_probs: Tensor, alpha: float) -> Tensor:
    """ln((1 - alpha) p + alpha q) from ln p and ln q, elementwise (any shape, broadcast), in float64.

    alpha = 0 gives ln p exactly and alpha = 1 gives ln q exactly."""
    if not 0.0 <= alpha <= 1.0:
        raise InfolmError(f"the interpolation weight must lie in [0, 1], got {alpha}")
    log_p, log_q = model_log_probs.double(), ngram_log_probs.double()
    if alpha == 0.0:
        return log_p.clone()
    if alpha == 1.0:
        return log_q.clone()
    return torch.logaddexp(log_p + math.log1p(-alpha), log_q + math.log(alpha))


def _slope_and_curvature(log_p: Tensor, log_q: Tensor, alpha: float) -> tuple[float, float]:
    """L'(alpha) and L''(alpha) of the summed log-likelihood (see the module docstring)."""
    log_m = mix_log_probs(log_p, log_q, alpha)
    ratio = torch.exp(log_q - log_m) - torch.exp(log_p - log_m)  # (q_i - p_i) / m_i
    return float(ratio.sum()), -float(ratio.square().sum())


def tune_alpha(model_log_probs: Tensor, ngram_log_probs: Tensor, tol: float = 1e-10, max_steps: int = 100) -> float:
    """The alpha in [0, 1] that maximizes sum_i ln((1 - alpha) p_i + alpha q_i), from per-token ln p and ln q."""
    log_p, log_q = model_log_probs.double().flatten(), ngram_log_probs.double().flatten()
    if log_p.numel() == 0 or log_p.shape != log_q.shape:
        raise InfolmError(
            f"tuning alpha needs as many n-gram as model scores, at least one; got {log_p.numel()} and {log_q.numel()}"
        )
    if bool(log_p.isnan().any() or log_q.isnan().any()):
        raise InfolmError("a token has no score (NaN): the model and n-gram scores must cover every token")
    if _slope_and_curvature(log_p, log_q, 0.0)[0] <= 0:  # L decreasing from 0: the model alone is best
        return 0.0
    if _slope_and_curvature(log_p, log_q, 1.0)[0] >= 0:  # L increasing up to 1: the n-gram alone is best
        return 1.0
    low, high, alpha = 0.0, 1.0, 0.5  # L'(low) > 0 > L'(high)
    for _ in range(max_steps):
        slope, curvature = _slope_and_curvature(log_p, log_q, alpha)
        if slope > 0:
            low = alpha
        else:
            high = alpha
        newton = alpha - slope / curvature if curvature < 0 else math.nan
        step_to = newton if low < newton < high else 0.5 * (low + high)  # Newton inside the bracket, else bisect
        if abs(step_to - alpha) < tol or high - low < tol:
            return step_to
        alpha = step_to
    return alpha


def _ppl(nll: float) -> float:
    return math.exp(min(nll, 700.0))


def interpolation_report(
    valid_model: Tensor, valid_ngram: Tensor, model_log_probs: Tensor, ngram_log_probs: Tensor
) -> dict[str, Any]:
    """alpha tuned on the validation scores, applied to the scored split's: the model's, the n-gram's and the
    mixture's per-token NLL (nats) and perplexity on both."""
    alpha = tune_alpha(valid_model, valid_ngram)
    out: dict[str, Any] = {"alpha": alpha}
    for prefix, log_p, log_q in (("", model_log_probs, ngram_log_probs), ("valid_", valid_model, valid_ngram)):
        nll = {
            "model": -float(log_p.double().mean()),
            "ngram": -float(log_q.double().mean()),
            "mixed": -float(mix_log_probs(log_p, log_q, alpha).mean()),
        }
        for name, value in nll.items():
            out[f"{prefix}{name}_nll"] = value
            out[f"{prefix}{name}_ppl"] = _ppl(value)
        out[f"{prefix}tokens"] = int(log_p.numel())
    return out


def interpolate_with_ngram(ngram: Any, valid: TokenScores, scored: TokenScores) -> dict[str, Any]:
    """:func:`interpolation_report` of a model's token scores on valid and on the scored split with an
    n-gram read onto the run's vocabulary (:class:`infolm.ngram.remap.RemappedNgram`)."""

    def ngram_scores(scores: TokenScores) -> Tensor:
        return torch.from_numpy(ngram.segment_log_probs(scores.tokens, scores.starts, scores.lengths))

    valid_ngram = ngram_scores(valid)
    scored_ngram = valid_ngram if scored is valid else ngram_scores(scored)
    report = interpolation_report(valid.log_probs, valid_ngram, scored.log_probs, scored_ngram)
    return {"order": ngram.order, **report, "words_read_as_unk": len(ngram.missing)}
