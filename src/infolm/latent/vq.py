"""Vector-quantized latents (VQ-VAE, van den Oord et al. 2017) in the latent-model contract.

The encoder's output z_e(x) is D vectors of size E; each is replaced by its nearest of K codebook
vectors e_1..e_K (Eq. 1 of the VQ-VAE paper), one codebook shared by the D latents. As a latent
variable, z is the D chosen categories, one-hot ``(D, K)`` like ``CategoricalLatent``'s:

    q(z|x) = 1[z = argmin_k ||z_e(x) - e_k||]   (a point mass, ln q = 0 at its code)
    p(z)   = uniform over the K^D codes         (ln p(z) = -D ln K)

so KL(q(z|x) || p(z)) = D ln K for every x (the fixed KL cost of Sec. 3.1 of the VQ-VAE paper) and
the existing evaluation (``latent/evaluation.py``) needs nothing special: every one of the K draws
is the same code, so the IWAE-K bound is ln p(x|z_q(x)) - D ln K, for any K, and the MI estimate
Û^K - Ŝ^K is exactly D ln K (see :class:`VectorQuantizedLatent`). The decoder reads the code as
z_q, its D codebook vectors (``vectors``).

The codebook is not a parameter: it follows the encoder outputs assigned to it by exponential
moving averages (the paper's App. A.1), :func:`ema_codebook_update`, applied by the VQ-VAE
objective (``objectives/vq_vae.py``) during training.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributions import Distribution, Independent, OneHotCategorical

from infolm.latent.base import LatentVariableModel

LAPLACE_EPSILON = 1e-5  # ε of the Laplace smoothing of the cluster counts (the VQ-VAE authors' Sonnet code)


@dataclasses.dataclass
class Quantization:
    """A batch's encoder outputs and their nearest codes."""

    encoded: Tensor  # z_e(x), (B, D, E), in the encoder's graph
    codes: Tensor  # argmin_k ||z_e - e_k||, (B, D) ids in [0, K)
    quantized: Tensor  # z_q(x) = e_codes, (B, D, E), detached (the codebook has no gradient)


def nearest_codes(encoded: Tensor, codebook: Tensor) -> Tensor:
    """argmin_k ||z_e - e_k||² for every vector (VQ-VAE Eq. 1): (..., E), (K, E) -> (...) ids."""
    flat = encoded.detach().reshape(-1, encoded.size(-1))  # (N, E)
    distances = (
        flat.pow(2).sum(1, keepdim=True) - 2.0 * flat @ codebook.t() + codebook.pow(2).sum(1)
    )  # (N, K) squared distances
    return distances.argmin(1).view(encoded.shape[:-1])


def straight_through(quantization: Quantization) -> Tensor:
    """z_e + sg[z_q - z_e]: the value z_q, the gradient of z_e (VQ-VAE Sec. 3.2, the decoder's gradient
    w.r.t. z_q is copied to the encoder output). (B, D, E)."""
    encoded = quantization.encoded
    return encoded + (quantization.quantized - encoded).detach()


def commitment_loss(quantization: Quantization) -> Tensor:
    """||z_e(x) - sg[e]||²₂ per example (VQ-VAE Eq. 3's third term, without β), summed over the E
    components and the D latents, as ln p(x|z) is one term per example: (B,)."""
    return (quantization.encoded - quantization.quantized).pow(2).flatten(1).sum(1)


def ema_codebook_update(
    count: Tensor, total: Tensor, encoded: Tensor, codes: Tensor, decay: float, epsilon: float = LAPLACE_EPSILON
) -> tuple[Tensor, Tensor, Tensor]:
    """One EMA step of the codebook (VQ-VAE App. A.1), for count N (K,), sum m (K, E), a batch's
    encoder outputs z_e (..., E) and their codes (...):

        N_i <- γ N_i + (1 - γ) n_i                      (Eq. 6; n_i: vectors assigned to code i)
        m_i <- γ m_i + (1 - γ) Σ_{j: code j = i} z_e,j   (Eq. 7)
        e_i  = m_i / Ñ_i,   Ñ_i = (N_i + ε) / (Σ_k N_k + K ε) · Σ_k N_k   (Eq. 8, Laplace-smoothed N)

    The smoothing keeps the division defined for a code that has received nothing for long (its N
    decays towards zero): the VQ-VAE authors' code does it; the paper does not mention it.
    Returns (N, m, codebook)."""
    categories = count.size(0)
    one_hot = F.one_hot(codes.reshape(-1), categories).to(encoded.dtype)  # (N, K)
    assigned = one_hot.sum(0)  # n_i, (K,)
    sums = one_hot.t() @ encoded.detach().reshape(-1, encoded.size(-1))  # Σ z_e per code, (K, E)
    count = decay * count + (1.0 - decay) * assigned
    total = decay * total + (1.0 - decay) * sums
    mass = count.sum()
    smoothed = (count + epsilon) / (mass + categories * epsilon) * mass
    return count, total, total / smoothed.unsqueeze(1)


def point_mass(codes: Tensor, categories: int) -> Distribution:
    """q(z|x) = 1[z = codes] over one-hot ``(D, K)`` events: logits 0 at the code and -inf elsewhere, so
    ln q = 0 exactly at the code, its draws are the code, and KL(q || uniform) = D ln K in closed form."""
    logits = torch.full((*codes.shape, categories), -math.inf, device=codes.device)
    return Independent(OneHotCategorical(logits=logits.scatter(-1, codes.unsqueeze(-1), 0.0)), 1)


class VectorQuantizedLatent(nn.Module):
    """D latents of K categories: an affine map of the encoder features to z_e (D·E, as the Gaussian
    family's mean f(o)), the nearest of K shared codebook vectors, and their EMA statistics.

    The evaluation's MI estimate Û^K - Ŝ^K with this point-mass proposal is D ln K for every x
    (every draw is the code: Û = ln p(x|z_q), Ŝ = ln p(x|z_q) - D ln K), which is KL(q(z|x) || p(z)),
    the rate. It upper-bounds the model's own I_p(X, Z) = E_x KL(p(z|x) || p(z)), which with a uniform
    p(z) cannot exceed ln K^D; the gap is Ŝ's, -ln p(z_q|x) per example (tested on an enumerable model).
    It is the MI that App. 5.A of the thesis sets by choosing D and K ("the KL cost in VQ-VAEs is
    determined by the latent space and is fixed during training").
    """

    reparameterized = False  # no rsample: trained through the straight-through estimator instead
    codebook: Tensor
    ema_count: Tensor
    ema_total: Tensor
    zero: Tensor

    def __init__(self, in_features: int, latents: int, categories: int, dim: int) -> None:
        super().__init__()
        self.latents, self.categories, self.dim = latents, categories, dim
        self.project = nn.Linear(in_features, latents * dim)  # z_e(x) from the encoder features
        # Our choice (neither paper gives one): codebook ~ U(-1/K, 1/K), small against z_e, so that at
        # the start the nearest code depends on z_e's direction, not on which code has the smallest norm.
        codebook = torch.empty(categories, dim).uniform_(-1.0 / categories, 1.0 / categories)
        self.register_buffer("codebook", codebook)
        # EMA state as if each code had been assigned its own initial vector once (N = 1, m = e): a code
        # that receives nothing keeps its place instead of jumping to 0 (Eqs. 6-8 need some N, m at t = 0).
        self.register_buffer("ema_count", torch.ones(categories))
        self.register_buffer("ema_total", codebook.clone())
        self.register_buffer("zero", torch.zeros(latents, categories), persistent=False)

    @property
    def flat_size(self) -> int:
        return self.latents * self.dim

    def quantize(self, features: Tensor) -> Quantization:
        """features (B, F) -> z_e (B, D, E), its codes (B, D) and z_q (B, D, E)."""
        encoded = self.project(features).view(-1, self.latents, self.dim)
        codes = nearest_codes(encoded, self.codebook)
        return Quantization(encoded=encoded, codes=codes, quantized=self.codebook[codes].detach())

    def posterior(self, features: Tensor) -> Distribution:
        """The point mass on the nearest code: batch shape (B,), event shape (D, K) (one-hot)."""
        return point_mass(self.quantize(features).codes, self.categories)

    def prior(self) -> Distribution:
        return Independent(OneHotCategorical(logits=self.zero), 1)  # uniform over the K^D codes

    def vectors(self, z: Tensor) -> Tensor:
        """One-hot codes (..., D, K) -> their codebook vectors z_q (..., D, E)."""
        return z.to(self.codebook.dtype) @ self.codebook

    @torch.no_grad()
    def update(self, quantization: Quantization, decay: float, epsilon: float = LAPLACE_EPSILON) -> None:
        """Move the codebook by one EMA step towards the batch's encoder outputs (App. A.1)."""
        count, total, codebook = ema_codebook_update(
            self.ema_count, self.ema_total, quantization.encoded, quantization.codes, decay, epsilon
        )
        self.ema_count.copy_(count)
        self.ema_total.copy_(total)
        self.codebook.copy_(codebook)


class QuantizedLatentModel(LatentVariableModel):
    """A latent-variable model whose latent is a :class:`VectorQuantizedLatent`: the contract the VQ-VAE
    objective trains. Its posterior is a point mass with no gradient to the encoder, so the Monte Carlo
    objectives cannot train it (a protocol of its own keeps them apart when the config is read)."""

    protocol = "vector-quantized"
    reparameterized = False
    latent: VectorQuantizedLatent

    def quantize(self, tokens: Tensor, lengths: Tensor) -> Quantization:  # pragma: no cover - abstract
        """z_e(x), its codes and z_q(x) for a batch, z_e in the encoder's graph."""
        raise NotImplementedError

    def vector_log_likelihood(
        self, tokens: Tensor, lengths: Tensor, vectors: Tensor
    ) -> Tensor:  # pragma: no cover - abstract
        """ln p(x|z) with the decoder fed codebook-space vectors (K, B, D, E) -> (K, B); z_q gives ln p(x|z_q),
        the straight-through z_e + sg[z_q - z_e] the same value with the encoder in the graph."""
        raise NotImplementedError

    def log_likelihood(self, tokens: Tensor, lengths: Tensor, z: Tensor) -> Tensor:
        """ln p(x|z) of one-hot codes z (K, B, D, K_categories): the decoder fed their codebook vectors."""
        return self.vector_log_likelihood(tokens, lengths, self.latent.vectors(z))
