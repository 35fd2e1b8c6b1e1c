"""The synthetic-task encoder/decoder of Melis's thesis, Sec. 5.7.1.

x is one symbol. Encoder: embedding -> two dense tanh layers -> q(z|x) (40 Gaussian latents or
8 x 10 categorical). Decoder: the mirror image with a softmax over the vocabulary; continuous
latents feed the first dense layer directly, categorical ones are first embedded and the decoder
then has one hidden layer. All embeddings and hidden layers have 128 units.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn
from torch.distributions import Distribution

from infolm.errors import InfolmError
from infolm.latent.base import LatentVariableModel
from infolm.latent.latents import CategoricalLatent, GaussianLatent
from infolm.latent.softmax import token_log_likelihood
from infolm.models.base import register_model


@dataclasses.dataclass
class LatentFamilyConfig:
    """The latents shared by the thesis's models (Secs. 5.7.1-5.7.2)."""

    latent: str = "gaussian"  # gaussian (N(0, I) prior) | categorical (uniform prior)
    latent_size: int = 40  # Gaussian latents (thesis: 40)
    variables: int = 8  # categorical latents (thesis: 8)
    categories: int = 10  # categories per categorical latent (thesis: 10)

    def check_latents(self) -> None:
        if self.latent not in ("gaussian", "categorical"):
            raise InfolmError(f"model.latent must be gaussian or categorical, got {self.latent!r}")
        for key in ("latent_size", "variables"):
            if getattr(self, key) < 1:
                raise InfolmError(f"model.{key} must be at least 1, got {getattr(self, key)}")
        if self.categories < 2:
            raise InfolmError(f"model.categories must be at least 2, got {self.categories}")


def build_latent(config: LatentFamilyConfig, in_features: int) -> GaussianLatent | CategoricalLatent:
    if config.latent == "gaussian":
        return GaussianLatent(in_features, config.latent_size)
    return CategoricalLatent(in_features, config.variables, config.categories)


@dataclasses.dataclass
class SyntheticLatentConfig(LatentFamilyConfig):
    embedding: int = 128  # symbol embedding size (Sec. 5.7.1)
    hidden: int = 128  # dense tanh layer size (Sec. 5.7.1)
    encoder_layers: int = 2  # dense tanh layers after the embedding (Sec. 5.7.1)
    decoder_layers: int | None = None  # None: 2 for Gaussian latents, 1 for categorical (Sec. 5.7.1)

    def __post_init__(self) -> None:
        self.check_latents()
        for key in ("embedding", "hidden", "encoder_layers"):
            if getattr(self, key) < 1:
                raise InfolmError(f"model.{key} must be at least 1, got {getattr(self, key)}")
        if self.decoder_layers is not None and self.decoder_layers < 1:
            raise InfolmError(f"model.decoder_layers must be at least 1, got {self.decoder_layers}")


def tanh_stack(sizes: list[int]) -> nn.Sequential:
    """Dense tanh layers sizes[0] -> sizes[1] -> ... -> sizes[-1] (Sec. 5.7.1's encoder and decoder)."""
    layers: list[nn.Module] = []
    for i, o in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(i, o), nn.Tanh()]
    return nn.Sequential(*layers)


# The model registry holds every model protocol; tasks refuse a model of the wrong protocol.
@register_model("latent-synthetic", config=SyntheticLatentConfig)  # type: ignore[arg-type]
class SyntheticLatentModel(LatentVariableModel):
    """Thesis Sec. 5.7.1: one symbol per example, dense tanh encoder and decoder."""

    def __init__(self, config: SyntheticLatentConfig, vocab_size: int) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, config.embedding)
        self.encoder = tanh_stack([config.embedding] + [config.hidden] * config.encoder_layers)
        self.latent = build_latent(config, config.hidden)
        self.reparameterized = self.latent.reparameterized
        categorical = config.latent == "categorical"
        layers = config.decoder_layers or (1 if categorical else 2)
        if categorical:  # one-hot latents are embedded (a linear map), then the hidden layers
            self.latent_embedding: nn.Module = nn.Linear(self.latent.flat_size, config.embedding, bias=False)
            first = config.embedding
        else:  # continuous latents feed the first dense layer directly
            self.latent_embedding = nn.Identity()
            first = self.latent.flat_size
        self.decoder = tanh_stack([first] + [config.hidden] * layers)
        self.softmax = nn.Linear(config.hidden, vocab_size)

    def posterior(self, tokens: Tensor, lengths: Tensor) -> Distribution:
        features = self.encoder(self.embedding(tokens[:, 0]))  # (B, H)
        return self.latent.posterior(features)

    def prior(self) -> Distribution:
        return self.latent.prior()

    def scored_tokens(self, lengths: Tensor) -> Tensor:
        """One symbol per example (a row's trailing <eos> is not modelled)."""
        return torch.ones_like(lengths)

    def log_likelihood(self, tokens: Tensor, lengths: Tensor, z: Tensor) -> Tensor:
        K, B = z.shape[:2]
        flat = self.latent.flatten(z).reshape(K * B, -1)  # (K·B, D): draws folded into the batch
        hidden = self.decoder(self.latent_embedding(flat))  # (K·B, H)
        targets = tokens[:, 0].repeat(K)  # (K·B,), draw-major like ``flat``
        return token_log_likelihood(hidden, self.softmax, targets).view(K, B)
