"""The synthetic-task model of Melis's thesis with VQ-VAE latents (App. 5.A, Fig. 5.15).

Sec. 5.7.1's network with the latent replaced by vector quantization (``latent/vq.py``): embedding
-> dense tanh layers -> an affine map to z_e(x), D vectors of E -> the nearest of K codebook vectors
z_q(x) -> dense tanh layers -> softmax. The codebook vectors are the decoder's embedding of the
categorical code, so the decoder has one hidden layer, as Sec. 5.7.1's decoder of embedded
categorical latents. The thesis tunes D in 1-8 and K in 2-20 (Table 5.2) to set the MI, D ln K.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn
from torch.distributions import Distribution

from infolm.errors import InfolmError
from infolm.latent.softmax import token_log_likelihood
from infolm.latent.synthetic import tanh_stack
from infolm.latent.vq import Quantization, QuantizedLatentModel, VectorQuantizedLatent
from infolm.models.base import register_model


@dataclasses.dataclass
class SyntheticVQConfig:
    """Sec. 5.7.1's sizes; the VQ latent's D, K and E."""

    vq_latents: int = 2  # D, latent vectors per symbol (Table 5.2 tunes 1-8)
    vq_categories: int = 10  # K, codebook size (Table 5.2 tunes 2-20); the MI is D ln K (2 ln 10 = 4.61 nats)
    vq_dim: int = 16  # E, size of a codebook vector (the thesis does not state it; ours)
    embedding: int = 128  # symbol embedding size (Sec. 5.7.1)
    hidden: int = 128  # dense tanh layer size (Sec. 5.7.1)
    encoder_layers: int = 2  # dense tanh layers after the embedding (Sec. 5.7.1)
    decoder_layers: int = 1  # dense tanh layers on z_q: 1, as for embedded categorical latents (Sec. 5.7.1)

    def __post_init__(self) -> None:
        for key in ("vq_latents", "vq_dim", "embedding", "hidden", "encoder_layers", "decoder_layers"):
            if getattr(self, key) < 1:
                raise InfolmError(f"model.{key} must be at least 1, got {getattr(self, key)}")
        if self.vq_categories < 2:
            raise InfolmError(f"model.vq_categories must be at least 2, got {self.vq_categories}")


@register_model("latent-synthetic-vq", config=SyntheticVQConfig)  # type: ignore[arg-type]
class SyntheticVQModel(QuantizedLatentModel):
    """Thesis App. 5.A: one symbol per example, dense tanh encoder and decoder, VQ latents."""

    def __init__(self, config: SyntheticVQConfig, vocab_size: int) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, config.embedding)
        self.encoder = tanh_stack([config.embedding] + [config.hidden] * config.encoder_layers)
        self.latent = VectorQuantizedLatent(config.hidden, config.vq_latents, config.vq_categories, config.vq_dim)
        self.decoder = tanh_stack([self.latent.flat_size] + [config.hidden] * config.decoder_layers)
        self.softmax = nn.Linear(config.hidden, vocab_size)

    def features(self, tokens: Tensor) -> Tensor:
        return self.encoder(self.embedding(tokens[:, 0]))  # (B, H)

    def quantize(self, tokens: Tensor, lengths: Tensor) -> Quantization:
        return self.latent.quantize(self.features(tokens))

    def posterior(self, tokens: Tensor, lengths: Tensor) -> Distribution:
        return self.latent.posterior(self.features(tokens))

    def prior(self) -> Distribution:
        return self.latent.prior()

    def scored_tokens(self, lengths: Tensor) -> Tensor:
        """One symbol per example (a row's trailing <eos> is not modelled)."""
        return torch.ones_like(lengths)

    def vector_log_likelihood(self, tokens: Tensor, lengths: Tensor, vectors: Tensor) -> Tensor:
        K, B = vectors.shape[:2]
        hidden = self.decoder(vectors.reshape(K * B, -1))  # (K·B, D·E) -> (K·B, H): draws folded into the batch
        targets = tokens[:, 0].repeat(K)  # (K·B,), draw-major like the vectors
        return token_log_likelihood(hidden, self.softmax, targets).view(K, B)
