"""The VQ-VAE objective (van den Oord et al. 2017), the baseline of Melis's thesis App. 5.A.

Per example, with z_q(x) the nearest codes of the encoder output z_e(x) (``latent/vq.py``):

    loss = -ln p(x | z_q(x)) + β ||z_e(x) - sg[e]||²₂                       (VQ-VAE Eq. 3)

The reconstruction term reaches the encoder by the straight-through estimator (the decoder is fed
z_e + sg[z_q - z_e]: the value z_q, the gradient copied to z_e; Sec. 3.2). Eq. 3's codebook term
||sg[z_e] - e||² is replaced by exponential moving averages of the assigned encoder outputs (App. A.1),
applied in the training forward pass after z_q is read (as the authors' code does), under no_grad.
The KL term D ln K is a constant and has no gradient (Sec. 3.1); the loss leaves it out and the logged
``vq-vae_nll_bound`` adds it: -ln p(x|z_q) + D ln K, the bound the evaluation reports.
Dead codes (ones no encoder output picks) are not restarted, as in the VQ-VAE paper: they keep their
place while their count decays, and the Laplace smoothing keeps their division defined.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

from infolm.errors import InfolmError
from infolm.latent.vq import QuantizedLatentModel, commitment_loss, straight_through
from infolm.objectives.base import Batch, Terms, register_objective
from infolm.objectives.latent_sentences import (
    SentenceLatentObjective,
    check_normalization,
    normalized_loss,
    sentence_rows,
)


@dataclasses.dataclass
class VQVAEConfig:
    weight: float = 1.0  # multiplier in the Composite
    beta: float = 0.25  # β, the commitment cost (VQ-VAE Eq. 3: 0.25; thesis Table 5.2 tunes 0.01-20, log scale)
    decay: float = 0.99  # γ of the EMA codebook update (VQ-VAE App. A.1: 0.99; Table 5.2 tunes 0.9-0.99999, log)
    normalize: str = "sentences"  # as objective.mi-kl.normalize: a mean over sentences, or per scored token

    def __post_init__(self) -> None:
        check_normalization("vq-vae", self.normalize)
        if not math.isfinite(self.beta) or self.beta < 0.0:
            raise InfolmError(f"objective.vq-vae.beta must be non-negative, got {self.beta}")
        if not 0.0 < self.decay < 1.0:
            raise InfolmError(f"objective.vq-vae.decay must lie in (0, 1), got {self.decay}")


@register_objective("vq-vae", config=VQVAEConfig)
class VQVAEObjective(SentenceLatentObjective):
    """-ln p(x|z_q) + β ||z_e - sg[z_q]||² with a straight-through encoder gradient and EMA codebook updates."""

    protocols = frozenset({"vector-quantized"})
    name = "vq-vae"
    config: VQVAEConfig

    # loss_scale: ln|V| per token, as the Monte Carlo objectives' (``SentenceLatentObjective``): an untrained
    # decoder's -ln p(x|z_q) (the commitment term starts small)

    def __init__(self, config: VQVAEConfig) -> None:
        super().__init__()
        self.config = config

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        if not isinstance(model, QuantizedLatentModel):
            raise InfolmError(f"objective vq-vae needs a vector-quantized model, got {type(model).__name__}")
        tokens, lengths = sentence_rows(batch)
        quantization = model.quantize(tokens, lengths)
        z = straight_through(quantization).unsqueeze(0)  # (1, B, D, E): value z_q, gradient to z_e
        log_likelihood = model.vector_log_likelihood(tokens, lengths, z)[0]  # ln p(x|z_q), (B,)
        commitment = commitment_loss(quantization)  # (B,)
        if model.training and torch.is_grad_enabled():  # a training step, not an evaluation
            model.latent.update(quantization, self.config.decay)
        count = int(model.scored_tokens(lengths).sum())
        rate = model.latent.latents * math.log(model.latent.categories)  # KL(q || p) = D ln K for every x
        frequencies = torch.bincount(quantization.codes.flatten(), minlength=model.latent.categories).double()
        frequencies = frequencies / frequencies.sum()
        entropy = float(-(frequencies * frequencies.clamp_min(1e-300).log()).sum())
        metrics = {
            "vq-vae_nll_bound": float(-log_likelihood.detach().mean()) + rate,  # per sentence
            "vq-vae_commitment": float(commitment.detach().mean()),
            "vq-vae_code_perplexity": math.exp(entropy),  # exp H of the batch's code frequencies, at most K
        }
        total = (-log_likelihood + self.config.beta * commitment).sum()
        loss = normalized_loss(total, tokens.size(0), count, self.mean_length, self.config.normalize)
        return Terms(losses={self.name: loss}, metrics=metrics, tokens=count)
