"""The latent-variable model contract: p(x, z) = p(x|z) p(z) with an amortized proposal q(z|x).

Estimators (``latent/estimators.py``), gradient surrogates (``latent/gradients.py``), training
objectives and evaluation rely only on these three methods. K draws per example are folded into
the batch dimension, so one decoder pass scores all of them.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn
from torch.distributions import Distribution, kl_divergence


class LatentVariableModel(nn.Module):
    """Base class of latent-variable models over token sequences.

    ``tokens``: (B, T) ids, right-padded; ``lengths``: (B,) tokens per example (padding is ignored).
    ``z``: (K, B, *event): event ``(D,)`` for Gaussian latents, one-hot ``(n, C)`` for categorical ones.
    """

    reparameterized: bool = True  # whether q(z|x) has rsample (pathwise estimators need it)
    protocol: str = "latent-variable"  # the model protocol tasks declare they serve
    vocab_size: int

    @classmethod
    def max_input_length(cls, config: object) -> int | None:
        """The longest input row a model built from ``config`` reads (None: no limit)."""
        return None

    def forward(self, tokens: Tensor, state: object = None) -> None:
        """No shared forward pass: the latent objectives draw from q(z|x) and score ln p(x|z) themselves."""
        return None

    def posterior(self, tokens: Tensor, lengths: Tensor) -> Distribution:  # pragma: no cover - abstract
        """q(z|x): batch shape (B,)."""
        raise NotImplementedError

    def prior(self) -> Distribution:  # pragma: no cover - abstract
        """p(z): batch shape () (broadcast over samples and examples)."""
        raise NotImplementedError

    def log_likelihood(self, tokens: Tensor, lengths: Tensor, z: Tensor) -> Tensor:  # pragma: no cover - abstract
        """ln p(x|z) for every draw: z (K, B, *event) -> (K, B), in one batched pass."""
        raise NotImplementedError

    def log_likelihood_terms(self, tokens: Tensor, lengths: Tensor, z: Tensor) -> tuple[Tensor, Tensor | None]:
        """ln p(x|z) (K, B) and, for a model whose examples end in a scored end-of-sentence token, that
        token's own term (K, B) from the same pass (None otherwise): evaluation subtracts it to report the
        NLL of the words alone, the convention of papers that remove ``<eos>`` when they evaluate."""
        return self.log_likelihood(tokens, lengths, z), None

    def scored_tokens(self, lengths: Tensor) -> Tensor:
        """Tokens ln p(x|z) scores per example (per-token metrics divide by their sum): ``lengths``."""
        return lengths


@dataclasses.dataclass
class LatentDraws:
    """K draws from q(z|x) for a batch, with the per-draw quantities every estimator reads."""

    z: Tensor  # (K, B, *event)
    log_likelihood: Tensor  # h = ln p(x|z), (K, B)
    log_prior: Tensor  # ln p(z), (K, B)
    log_posterior: Tensor  # ln q(z|x), (K, B)
    kl: Tensor | None  # analytic KL(q(z|x) || p(z)), (B,), where torch.distributions has it
    log_likelihood_end: Tensor | None = None  # the end-of-sentence token's term of h, (K, B), where scored

    @property
    def log_ratio(self) -> Tensor:
        """r = ln p(z) - ln q(z|x), (K, B)."""
        return self.log_prior - self.log_posterior


def analytic_kl(posterior: Distribution, prior: Distribution) -> Tensor | None:
    """KL(q(z|x) || p(z)) per example when torch.distributions knows it in closed form, else None."""
    try:
        return kl_divergence(posterior, prior)
    except NotImplementedError:
        return None


def fold_samples(x: Tensor, samples: int) -> Tensor:
    """Repeat a batch tensor for K draws, folded into the batch: (B, ...) -> (K·B, ...), draw-major."""
    return x.unsqueeze(0).expand(samples, *x.shape).reshape(samples * x.size(0), *x.shape[1:])


@torch.no_grad()
def draw(
    model: LatentVariableModel,
    tokens: Tensor,
    lengths: Tensor,
    samples: int,
    chunk: int = 0,
    posterior: Distribution | None = None,
) -> LatentDraws:
    """K draws without gradients (evaluation); the decoder sees ``chunk`` draws at a time (0: all).
    ``posterior``: q(z|x) of this batch when the caller already has it."""
    q = model.posterior(tokens, lengths) if posterior is None else posterior
    p = model.prior()
    z = q.sample((samples,))  # (K, B, *event)
    step = chunk if chunk > 0 else samples
    parts = [model.log_likelihood_terms(tokens, lengths, z[i : i + step]) for i in range(0, samples, step)]
    h = torch.cat([whole for whole, _ in parts])
    ends = [end for _, end in parts if end is not None]
    end = torch.cat(ends) if len(ends) == len(parts) else None
    return LatentDraws(z, h, p.log_prob(z), q.log_prob(z), analytic_kl(q, p), end)
