"""Latent families: a head from encoder features to q(z|x), the fixed prior p(z), and detaching.

``GaussianLatent``: q(z|x) = N(f(o), diag(exp(g(o)))) with f, g affine (thesis Sec. 5.7.1), prior
N(0, I); samples are ``(K, B, D)``. ``CategoricalLatent``: n variables of C categories each,
q(z|x) ∝ exp(o) per variable, uniform prior; samples are one-hot ``(K, B, n, C)``.
Both are ``torch.distributions`` objects whose ``log_prob`` sums over the event.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.distributions import Categorical, Distribution, Independent, Normal, OneHotCategorical


class GaussianLatent(nn.Module):
    """D real latents: mean and log-variance from two affine maps of the encoder output."""

    reparameterized = True
    zero: Tensor

    def __init__(self, in_features: int, size: int) -> None:
        super().__init__()
        self.size = size
        self.mean = nn.Linear(in_features, size)  # f(o)
        self.log_variance = nn.Linear(in_features, size)  # g(o): the variance is exp(g(o)) (Sec. 5.7.1)
        self.register_buffer("zero", torch.zeros(size), persistent=False)

    @property
    def flat_size(self) -> int:
        return self.size

    def posterior(self, features: Tensor) -> Distribution:
        """features: (B, F) -> q(z|x) with batch shape (B,) and event shape (D,)."""
        scale = torch.exp(0.5 * self.log_variance(features))  # (B, D)
        return Independent(Normal(self.mean(features), scale), 1)

    def prior(self) -> Distribution:
        return Independent(Normal(self.zero, torch.ones_like(self.zero)), 1)

    def flatten(self, z: Tensor) -> Tensor:
        return z  # (..., D)


class CategoricalLatent(nn.Module):
    """n categorical latents with C categories each; q's logits are an affine map of the encoder output.

    The thesis writes q ∝ exp(o) for the last encoder layer's output o; we read o as the output of an
    affine layer of n·C units (as f and g are for the Gaussian), so a hard posterior is reachable.
    """

    reparameterized = False
    zero: Tensor

    def __init__(self, in_features: int, variables: int, categories: int) -> None:
        super().__init__()
        self.variables, self.categories = variables, categories
        self.logits = nn.Linear(in_features, variables * categories)
        self.register_buffer("zero", torch.zeros(variables, categories), persistent=False)

    @property
    def flat_size(self) -> int:
        return self.variables * self.categories

    def posterior(self, features: Tensor) -> Distribution:
        """features: (B, F) -> q(z|x) with batch shape (B,) and event shape (n, C) (one-hot)."""
        logits = self.logits(features).view(-1, self.variables, self.categories)  # (B, n, C)
        return Independent(OneHotCategorical(logits=logits), 1)

    def prior(self) -> Distribution:
        return Independent(OneHotCategorical(logits=self.zero), 1)  # uniform over C per variable

    def flatten(self, z: Tensor) -> Tensor:
        return z.flatten(-2)  # (..., n, C) -> (..., n·C)


def detach_distribution(dist: Distribution) -> Distribution:
    """The same distribution with its parameters cut from the graph (STL / DReG evaluate ln q(z|x)
    with stopped parameters so that only the path through z carries gradient)."""
    if isinstance(dist, Independent):
        return Independent(detach_distribution(dist.base_dist), dist.reinterpreted_batch_ndims)
    if isinstance(dist, Normal):
        return Normal(dist.loc.detach(), dist.scale.detach())
    if isinstance(dist, OneHotCategorical):
        return OneHotCategorical(logits=dist.logits.detach())
    if isinstance(dist, Categorical):
        return Categorical(logits=dist.logits.detach())
    raise TypeError(f"cannot detach a {type(dist).__name__}")


def posterior_mean(dist: Distribution) -> Tensor:
    """E_q[z] flattened per example, (B, D) or (B, n·C): the statistic behind active units."""
    return dist.mean.flatten(1)
