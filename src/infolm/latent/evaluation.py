"""Evaluation of any latent-variable model: IWAE-K NLL bound, ELBO, rate, distortion, MI, active units.

The same estimator functions as training (``latent/estimators.py``). Per batch,
:func:`latent_bounds` returns per-example tensors; :class:`LatentAccumulator` sums them over a
split into :class:`LatentMetrics`. K draws are decoded ``chunk`` at a time to bound memory.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor
from torch.distributions import Distribution

from infolm.latent.base import LatentDraws, LatentVariableModel, draw
from infolm.latent.estimators import amim_loss, iwae_bound, kl_estimate
from infolm.latent.latents import posterior_mean

ACTIVE_UNIT_THRESHOLD = 0.01  # Burda et al. 2015: a unit is active if Var_x E_q[z_u] > 0.01


@dataclasses.dataclass
class LatentBounds:
    """Per-example quantities of one batch, all (B,) except ``posterior_mean`` (B, D)."""

    log_likelihood_bound: Tensor  # Ŝ^K, the IWAE-K lower bound on ln p(x) (Eq. 5.8)
    elbo: Tensor  # E_q ln p(x|z) - KL(q || p), analytic KL where it exists (Eq. 5.2)
    rate: Tensor  # KL(q(z|x) || p(z)), analytic where it exists, else the K-draw estimate
    distortion: Tensor  # -E_q ln p(x|z), K-draw estimate
    mutual_information: Tensor  # Û^K - Ŝ^K (Eq. 5.12): averaged over data, the MI estimate of Sec. 5.7.1
    posterior_mean: Tensor  # E_q[z] flattened, for active units
    amim: Tensor  # the A-MIM loss of SentenceMIM Alg. 1 line 3, K-draw average (its validation loss)
    # the IWAE-K bound with each sentence's <eos> term left out of every draw's ln p(x|z) (the same draws):
    # the NLL of the words alone, as SentenceMIM Sec. 4.3 evaluates; None for a model without that term
    words_bound: Tensor | None = None


@torch.no_grad()
def latent_bounds(
    model: LatentVariableModel, tokens: Tensor, lengths: Tensor, samples: int = 100, chunk: int = 0
) -> LatentBounds:
    """Bounds of one batch from ``samples`` draws per example (the thesis: 100 valid, 500 test)."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    q = model.posterior(tokens, lengths)
    return bounds_of_draws(q, draw(model, tokens, lengths, samples, chunk, posterior=q))


def bounds_of_draws(q: Distribution, draws: LatentDraws) -> LatentBounds:
    """The bounds of one batch from its posterior ``q`` and the K ``draws`` made from it."""
    h, r = draws.log_likelihood, draws.log_ratio
    rate = draws.kl if draws.kl is not None else -r.mean(0)
    distortion = -h.mean(0)
    return LatentBounds(
        log_likelihood_bound=iwae_bound(h, r),
        elbo=-distortion - rate,
        rate=rate,
        distortion=distortion,
        mutual_information=kl_estimate(h, r),
        posterior_mean=posterior_mean(q),
        amim=amim_loss(h, draws.log_posterior, draws.log_prior),
        words_bound=None if draws.log_likelihood_end is None else iwae_bound(h - draws.log_likelihood_end, r),
    )


@dataclasses.dataclass
class LatentMetrics:
    """Split averages. Sentence-level values are per example; ``*_per_token`` divide by ``tokens``."""

    nll: float  # -Ŝ^K per example (nats)
    nll_per_token: float
    ppl: float  # exp(nll_per_token)
    elbo: float
    elbo_per_token: float
    rate: float  # KL(q || p) per example
    rate_per_token: float
    distortion: float
    mutual_information: float  # mean of Û^K - Ŝ^K per example
    mutual_information_per_token: float
    active_units: int
    amim: float  # the A-MIM loss per example (SentenceMIM Alg. 1 line 3, K-draw average)
    amim_per_token: float
    examples: int
    tokens: int
    samples: int
    nll_words: float | None = None  # -Ŝ^K per example with <eos> left out (SentenceMIM Sec. 4.3's convention)

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in dataclasses.asdict(self).items()}


class LatentAccumulator:
    """Sums per-example bounds over batches (streaming mean and variance of posterior means)."""

    def __init__(self, samples: int) -> None:
        self.samples = samples
        self.sums: dict[str, float] = {}
        self.examples = 0
        self.tokens = 0
        self.mean_sum: Tensor | None = None
        self.mean_square_sum: Tensor | None = None

    def add(self, bounds: LatentBounds, tokens: int) -> None:
        for name in ("log_likelihood_bound", "elbo", "rate", "distortion", "mutual_information", "amim"):
            self.sums[name] = self.sums.get(name, 0.0) + float(getattr(bounds, name).double().sum())
        if bounds.words_bound is not None:  # every batch of a model has it, or none
            self.sums["words_bound"] = self.sums.get("words_bound", 0.0) + float(bounds.words_bound.double().sum())
        mean = bounds.posterior_mean.double()
        self.mean_sum = mean.sum(0) if self.mean_sum is None else self.mean_sum + mean.sum(0)
        squares = (mean * mean).sum(0)
        self.mean_square_sum = squares if self.mean_square_sum is None else self.mean_square_sum + squares
        self.examples += bounds.posterior_mean.size(0)
        self.tokens += tokens

    def state(self) -> dict[str, Any]:
        """The sums as plain JSON values (a shard's share of a split, see ``merge``)."""
        return {
            "samples": self.samples,
            "sums": dict(self.sums),
            "examples": self.examples,
            "tokens": self.tokens,
            "mean_sum": None if self.mean_sum is None else self.mean_sum.tolist(),
            "mean_square_sum": None if self.mean_square_sum is None else self.mean_square_sum.tolist(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> LatentAccumulator:
        accumulator = cls(int(state["samples"]))
        accumulator.sums = {k: float(v) for k, v in state["sums"].items()}
        accumulator.examples, accumulator.tokens = int(state["examples"]), int(state["tokens"])
        for key in ("mean_sum", "mean_square_sum"):
            if state[key] is not None:
                setattr(accumulator, key, torch.tensor(state[key], dtype=torch.float64))
        return accumulator

    def merge(self, other: LatentAccumulator) -> None:
        """Add another accumulator's sums (the same model and K, other examples): the sums of both."""
        if other.samples != self.samples:
            raise ValueError(f"accumulators of {self.samples} and {other.samples} draws do not add up")
        if other.examples == 0:
            return
        if self.examples and ("words_bound" in self.sums) != ("words_bound" in other.sums):
            raise ValueError("one accumulator has the bound without <eos> and the other has not")
        for name, value in other.sums.items():
            self.sums[name] = self.sums.get(name, 0.0) + value
        for key in ("mean_sum", "mean_square_sum"):
            mine, theirs = getattr(self, key), getattr(other, key)
            setattr(self, key, theirs.clone() if mine is None else mine + theirs)
        self.examples += other.examples
        self.tokens += other.tokens

    def metrics(self) -> LatentMetrics:
        if self.examples == 0 or self.mean_sum is None or self.mean_square_sum is None:
            raise ValueError("no examples were evaluated")
        n, t = self.examples, max(self.tokens, 1)
        variance = self.mean_square_sum / n - (self.mean_sum / n) ** 2  # Var_x E_q[z_u]
        nll = -self.sums["log_likelihood_bound"]
        return LatentMetrics(
            nll=nll / n,
            nll_per_token=nll / t,
            ppl=math.exp(min(nll / t, 700.0)),
            elbo=self.sums["elbo"] / n,
            elbo_per_token=self.sums["elbo"] / t,
            rate=self.sums["rate"] / n,
            rate_per_token=self.sums["rate"] / t,
            distortion=self.sums["distortion"] / n,
            mutual_information=self.sums["mutual_information"] / n,
            mutual_information_per_token=self.sums["mutual_information"] / t,
            active_units=int((variance > ACTIVE_UNIT_THRESHOLD).sum()),
            amim=self.sums["amim"] / n,
            amim_per_token=self.sums["amim"] / t,
            examples=n,
            tokens=self.tokens,
            samples=self.samples,
            nll_words=-self.sums["words_bound"] / n if "words_bound" in self.sums else None,
        )


def evaluate_latent(
    model: LatentVariableModel, batches: Iterable[tuple[Tensor, Tensor]], samples: int = 100, chunk: int = 0
) -> LatentMetrics:
    """Metrics over ``(tokens, lengths)`` batches; per-token values divide by ``model.scored_tokens``."""
    was_training = model.training
    model.eval()
    try:
        accumulator = LatentAccumulator(samples)
        for tokens, lengths in batches:
            bounds = latent_bounds(model, tokens, lengths, samples, chunk)
            accumulator.add(bounds, int(model.scored_tokens(lengths).sum()))
        return accumulator.metrics()
    finally:
        model.train(was_training)
