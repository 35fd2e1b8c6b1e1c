"""``sentence-latent``: a latent-variable model of single sentences (SentenceMIM, Bowman et al.'s
sentence VAE, Melis thesis ch. 5).

Training batches are ``sentence-lm``'s: one sentence per row with its ``<eos>``, length-bucketed and
padded. The trainer runs no shared forward pass: the latent objectives (``amim``, ``elbo``, ``ae``,
``mi-kl``, ...) draw from q(z|x) and score ln p(x|z) themselves. Evaluation scores every sentence of
a split with the IWAE-K bound on -ln p(x) under the model's own prior (K = ``valid_samples`` on
validation, ``test_samples`` on test) and reports the ELBO, the rate KL(q||p), the distortion, an MI
estimate and the active units (``infolm.latent.evaluation``). Per-token values divide by the scored
tokens (the words and each sentence's ``<eos>``; the words alone under a sentence-length prior).
The selection metric (``selection``) is the per-token IWAE bound; or the training objective's own
loss on the split, which SentenceMIM's learning-rate schedule reads (Sec. 4.2, "the validation
loss"): the A-MIM loss of Alg. 1 (``amim``), the negative ELBO with β = 1 (``elbo``), or, for a
deterministic auto-encoder whose posterior variance means nothing, the reconstruction NLL at the
posterior mean (``reconstruction``); all per scored token, as the training losses.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch

from infolm.errors import InfolmError
from infolm.tasks.base import Metrics, perplexity, register_task
from infolm.tasks.sentence_lm import SentenceLM, SentenceLMConfig

SELECTIONS = ("nll", "reconstruction", "amim", "elbo")


@dataclasses.dataclass
class SentenceLatentConfig(SentenceLMConfig):
    valid_samples: int = 100  # K of the IWAE bound on validation (Melis thesis ch. 5: 100; costly on CPU)
    test_samples: int = 500  # K of the IWAE bound on test (Melis thesis ch. 5: 500)
    chunk: int = 50  # draws per decoder pass in evaluation (memory: chunk x batch x length x vocabulary)
    # nll: the IWAE-K bound per token | amim: the A-MIM loss (Alg. 1 line 3) | elbo: -ELBO (β = 1) |
    # reconstruction: -ln p(x | E[q(z|x)]) (AE); all per scored token
    selection: str = "nll"
    # > 0: each validation also scores the first N training sentences (corpus order) with the same IWAE-K,
    # logged as train_loss, train_mi, train_mi_per_token, train_kl: the training frontier of Melis thesis
    # Figs. 5.8-5.9 at every checkpoint (the thesis scores the whole training set; N caps the cost). 0: off
    train_eval_sentences: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("valid_samples", "test_samples", "chunk"):
            if getattr(self, key) < 1:
                raise InfolmError(f"task.{key} must be at least 1, got {getattr(self, key)}")
        if self.train_eval_sentences < 0:
            raise InfolmError(f"task.train_eval_sentences must be >= 0 (0: off), got {self.train_eval_sentences}")
        if self.selection not in SELECTIONS:
            raise InfolmError(f"task.selection must be one of {', '.join(SELECTIONS)}; got {self.selection!r}")


@register_task("sentence-latent", config=SentenceLatentConfig)
class SentenceLatent(SentenceLM):
    """Latent-variable sentence model: sentence batches, IWAE-K / ELBO / KL / MI / active units evaluation."""

    carries_state = False
    shared_forward = False
    provides = frozenset({"sentences"})
    serves = frozenset({"latent-variable", "vector-quantized"})  # both have the latent-model contract
    scores_tokens = False  # a latent model's likelihood of a token is a bound over z, not a next-token probability
    config: SentenceLatentConfig

    def evaluate(self, model: Any, split: str, device: torch.device | str = "cpu") -> Metrics:
        # The task contract: evaluation is deterministic. The draws come from the run's seed on a
        # forked generator, so evaluating also leaves the training random stream where it was.
        cuda = [torch.device(device).index or 0] if torch.device(device).type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(self.seed)
            return self._evaluate(model, split, device)

    @torch.no_grad()
    def _score(self, model: Any, sentences: Any, index: np.ndarray, samples: int, device: Any) -> tuple[Any, float]:
        """The IWAE-``samples`` bounds of the sentences ``index`` of a split (``LatentMetrics``) and, with
        ``selection: reconstruction``, their summed reconstruction NLL at the posterior mean."""
        from infolm.latent.evaluation import LatentAccumulator, latent_bounds

        assert self.corpus is not None
        eos_id = self.corpus.vocab.eos_id
        order = index[np.argsort(-sentences.lengths[index], kind="stable")]  # longest first: little padding
        accumulator = LatentAccumulator(samples)
        reconstruction = 0.0
        was_training = model.training
        model.eval()
        try:
            for start in range(0, len(order), self.data.eval_batch_size):
                batch = sentences.batch(order[start : start + self.data.eval_batch_size], eos_id).to(device)
                assert batch.lengths is not None and batch.padding_mask is not None
                tokens = batch.targets.masked_fill(~batch.padding_mask, eos_id)  # the sentences, <eos> last
                bounds = latent_bounds(model, tokens, batch.lengths, samples, self.config.chunk)
                accumulator.add(bounds, int(model.scored_tokens(batch.lengths).sum()))
                if self.config.selection == "reconstruction":
                    mean = model.posterior(tokens, batch.lengths).mean.unsqueeze(0)
                    reconstruction -= float(model.log_likelihood(tokens, batch.lengths, mean).sum())
        finally:
            model.train(was_training)
        return accumulator.metrics(), reconstruction

    def _evaluate(self, model: Any, split: str, device: torch.device | str = "cpu") -> Metrics:
        sentences = self.sentences(split)
        samples = self.config.test_samples if split == "test" else self.config.valid_samples
        metrics, reconstruction = self._score(model, sentences, np.arange(len(sentences)), samples, device)
        values = {
            "nll": metrics.nll_per_token,
            "ppl": metrics.ppl,
            "sentence_nll": metrics.nll,
            "elbo": metrics.elbo,
            "kl": metrics.rate,
            "distortion": metrics.distortion,
            "mi": metrics.mutual_information,
            # per scored token, the unit of "nll" (the thesis reports NLL and KL per token on PTB, ch. 5)
            "mi_per_token": metrics.mutual_information * metrics.examples / max(metrics.tokens, 1),
            "active_units": float(metrics.active_units),
            "tokens": float(metrics.tokens),
            "sentences": float(metrics.examples),
            "samples": float(samples),
        }
        log_names = {
            "nll": "loss",
            "ppl": "ppl",
            "kl": "kl",
            "mi": "mi",
            "mi_per_token": "mi_per_token",
            "active_units": "active_units",
        }
        selection = "nll"
        if self.config.selection == "amim":
            values["amim_loss"] = metrics.amim_per_token
            log_names["amim_loss"] = "amim_loss"
            selection = "amim_loss"
        if self.config.selection == "elbo":
            values["neg_elbo"] = -metrics.elbo_per_token
            log_names["neg_elbo"] = "neg_elbo"
            selection = "neg_elbo"
        if self.config.selection == "reconstruction":
            values["reconstruction_nll"] = reconstruction / max(metrics.tokens, 1)
            values["reconstruction_ppl"] = perplexity(values["reconstruction_nll"])
            log_names["reconstruction_nll"] = "reconstruction_nll"
            selection = "reconstruction_nll"
        if split == "valid" and self.config.train_eval_sentences:
            train = self.sentences("train")
            first = np.arange(min(self.config.train_eval_sentences, len(train)))
            torch.manual_seed(self.seed)  # the draws of an evaluation of those sentences alone
            fit, _ = self._score(model, train, first, samples, device)
            values["train_nll"] = fit.nll_per_token
            values["train_kl"] = fit.rate
            values["train_mi"] = fit.mutual_information
            values["train_mi_per_token"] = fit.mutual_information * fit.examples / max(fit.tokens, 1)
            values["train_sentences"] = float(fit.examples)
            log_names.update({k: k for k in ("train_kl", "train_mi", "train_mi_per_token")}, train_nll="train_loss")
        notes = [
            f"nll: the IWAE-{samples} bound on -ln p(x) per scored token, with the model's prior",
            "tokens: the words and each sentence's <eos> (the words alone under a length prior)",
            "mi: per sentence; mi_per_token: the same estimate per scored token, nll's unit",
        ]
        if "train_nll" in values:
            notes.append(f"train_*: the same estimates on the first {values['train_sentences']:.0f} training sentences")
        if not math.isfinite(values["nll"]):
            notes.append("the bound is not finite: the model diverged")
        return Metrics(values, selection=selection, log_names=log_names, notes=notes)

    def generate(self, model: Any, prompt: list[int], settings: Any, generator: torch.Generator) -> list[list[int]]:
        raise InfolmError("a latent-variable run samples with `infolm latent sample RUN` (z ~ N(0, 0.1^2 I))")
