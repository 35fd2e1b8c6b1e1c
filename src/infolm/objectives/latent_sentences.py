"""What the sentence-level latent-variable objectives share (A-MIM, the ELBO, the auto-encoder, the thesis's
Monte Carlo objectives, the VQ-VAE): the model check, the constant that puts a per-sentence loss on a
per-token scale, the normalisation of a batch's loss, and the rows of a one-sentence-per-row batch.

:class:`SentenceLatentObjective` is their common setup: it checks the model (and lets it fit what it fits
to the training text) and reads the training sentences' mean and longest scored length.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import Tensor, nn

from infolm.errors import InfolmError
from infolm.latent.base import LatentVariableModel
from infolm.objectives.base import Batch, Objective

IGNORE_INDEX = -100


class SentenceLatentObjective(Objective):
    """A term on one-sentence-per-row batches of a latent-variable model, normalised per sentence over the
    training sentences' mean length (``config.normalize: sentences``) or per scored token."""

    needs = frozenset({"sentences"})

    def __init__(self) -> None:
        super().__init__()
        self.mean_length: float | None = None  # mean scored tokens per training sentence (``setup``)
        self.one_length = True  # every training sentence scores as many tokens (``setup``)

    def setup(self, corpus: Any, model: nn.Module) -> None:
        require_latent_model(self, model, corpus)
        self.mean_length = training_sentence_length(model, corpus)
        longest = training_sentence_length(model, corpus, longest=True)
        self.one_length = self.mean_length is None or longest == self.mean_length

    def loss_scale(self, vocab_size: int) -> float | None:
        """ln|V| per token, as a token-level cross-entropy: a bound on -ln p(x) per token starts near ln|V|
        for a model that has learned nothing (a uniform decoder). Per sentence over the training mean
        length, a batch of long sentences reads above its per-token loss by a factor that the task's
        truncation bounds and the objective cannot see: no fixed scale then (the run's own losses judge),
        unless every sentence has one length (the synthetic task)."""
        if getattr(self.config, "normalize", "sentences") == "tokens" or self.one_length:
            return super().loss_scale(vocab_size)
        return None


def require_latent_model(objective: Objective, model: nn.Module, corpus: Any = None) -> None:
    """One clear line when a latent-variable objective is given another kind of model (or a latent model of
    a protocol it does not train: a vector-quantized one for the Monte Carlo objectives); a model that
    fits something to the training data before training (``fit_corpus``: the sentence GRU's length
    prior p(T)) does it here."""
    name = getattr(objective, "name", type(objective).__name__)
    if not isinstance(model, LatentVariableModel):
        raise InfolmError(f"objective {name} needs a latent-variable model, got {type(model).__name__}")
    if model.protocol not in objective.protocols:  # a VQ model's point-mass posterior has no gradient to give
        raise InfolmError(
            f"objective {name} trains {', '.join(sorted(objective.protocols))} models, "
            f"got a {model.protocol} model ({type(model).__name__})"
        )
    fit = getattr(model, "fit_corpus", None)
    if fit is not None and corpus is not None:
        fit(corpus)


NORMALIZATIONS = ("sentences", "tokens")


def check_normalization(objective: str, normalize: str) -> None:
    if normalize not in NORMALIZATIONS:
        raise InfolmError(
            f"objective.{objective}.normalize must be one of {', '.join(NORMALIZATIONS)}; got {normalize!r}"
        )


def training_sentence_length(model: nn.Module, corpus: Any, longest: bool = False) -> float | None:
    """Mean scored tokens per training sentence (None without a corpus): the constant that puts a
    per-sentence mean loss on a per-token scale; with ``longest``, the longest sentence's."""
    if corpus is None or not hasattr(corpus, "sentence_offsets"):
        return None
    lengths = torch.as_tensor(corpus.sentence_offsets("train")).diff()  # each line's words and its <eos>
    if lengths.numel() == 0:
        return None
    scored = cast(LatentVariableModel, model).scored_tokens(lengths)
    return float(scored.max()) if longest else float(scored.double().mean())


def normalized_loss(total: Tensor, sentences: int, tokens: int, mean_length: float | None, normalize: str) -> Tensor:
    """A batch's loss from ``total``, the sum of its per-sentence losses.

    ``sentences``: the mean over the batch's sentences (SentenceMIM Alg. 1: -1/N sum_i), divided by the
    constant ``mean_length`` (``training_sentence_length``) so that it reads per token and the gradient is
    Alg. 1's up to that constant; without it, the batch's own mean length. ``tokens``: divided by the
    batch's scored tokens, which weights a length-bucketed batch of long sentences less per sentence."""
    if normalize == "tokens":
        return total / max(tokens, 1)
    scale = mean_length if mean_length is not None else tokens / max(sentences, 1)
    return total / (max(sentences, 1) * max(scale, 1e-12))


def sentence_rows(batch: Batch) -> tuple[Tensor, Tensor]:
    """(tokens (B, T), lengths (B,)) of one-sentence-per-row batches: the targets (the sentence and
    its <eos>), padding replaced by id 0 and excluded through ``lengths``."""
    real = batch.targets != IGNORE_INDEX
    lengths = getattr(batch, "lengths", None)
    if lengths is None:
        lengths = real.sum(1)
    return batch.targets.masked_fill(~real, 0), torch.as_tensor(lengths, device=batch.targets.device)
