"""Everything SentenceMIM reports about a sentence latent-variable model on one split.

``bounds``: the IWAE-K bound on -ln p(x) with the model's own prior (K = 500 for test, 100 for
validation), per sentence and per token, its perplexity, the ELBO, the rate KL(q(z|x) || p(z)),
the distortion, an MI estimate (Û^K - Ŝ^K averaged over sentences) and the active units
(Var_x E_q[z_u] > 0.01), from ``infolm.latent.evaluation``. Tokens are every scored position:
the words and the ``<eos>`` that ends each sentence (``per_word`` divides the same NLL by the words
alone, the convention of the paper's tables, which remove ``<eos>``).
``reconstruction``: BLEU-1 of greedy reconstructions (``evaluation/bleu.py``).
``latent_entropy``: Kraskov kNN entropy of one code per sentence against N(0, I)'s (skipped above
300 dimensions). ``melbo``: Eq. 16, only on request, apart, with its caveat (``evaluation/melbo.py``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from infolm.data.batching import sentence_batches
from infolm.errors import InfolmError
from infolm.evaluation.knn_entropy import knn_entropy, standard_normal_entropy
from infolm.evaluation.melbo import evaluate_melbo
from infolm.evaluation.reconstruction import encode, reconstruction_bleu


@torch.no_grad()
def latent_report(
    model: Any,
    corpus: Any,
    split: str,
    samples: int = 500,
    chunk: int = 50,
    batch_size: int = 20,
    max_sentences: int | None = None,
    mode: str = "sample",
    melbo: bool = False,
    seed: int = 0,
    bleu: bool = True,
    entropy: bool = True,
) -> dict[str, Any]:
    """The report of ``model`` on ``split`` of ``corpus`` (the vocabulary's ``<eos>`` ends sentences)."""
    from infolm.latent.evaluation import evaluate_latent

    sentences = list(corpus.sentences(split))
    if max_sentences is not None:
        sentences = sentences[:max_sentences]
    if not sentences:
        raise InfolmError(f"the {split} split has no sentences")
    eos = corpus.vocab.eos_id
    was_training = model.training
    model.eval()
    try:
        torch.manual_seed(seed)
        metrics = evaluate_latent(model, sentence_batches(sentences, batch_size, pad_id=eos), samples, chunk)
        bounds = dataclasses.asdict(metrics)
        words = metrics.tokens - len(sentences) if not getattr(model.config, "length_prior", False) else metrics.tokens
        bounds["nll_per_word"] = metrics.nll * metrics.examples / max(words, 1)
        bounds["ppl_per_word"] = math.exp(min(bounds["nll_per_word"], 700.0))
        report: dict[str, Any] = {"split": split, "bounds": bounds}
        bare = [s[:-1].tolist() if int(s[-1]) == eos else s.tolist() for s in sentences]  # words, no <eos>
        if bleu:
            torch.manual_seed(seed)
            score = reconstruction_bleu(
                model, bare, corpus.vocab.itos, mode, batch_size=64, generator=torch.Generator().manual_seed(seed)
            )
            report["reconstruction"] = {"bleu1": score.bleu, "precision1": score.precision, "mode": mode}
        if entropy:
            generator = torch.Generator().manual_seed(seed)
            codes = torch.cat([encode(model, bare[i : i + 256], mode, generator) for i in range(0, len(bare), 256)])
            estimate = knn_entropy(codes.double().numpy())
            dim = codes.size(1)
            report["latent_entropy"] = {
                "entropy": None if estimate is None else estimate.entropy,
                "normal_entropy": standard_normal_entropy(dim),
                "dim": dim,
                "mode": mode,
                "note": "skipped above 300 dimensions" if estimate is None else f"Kraskov k={estimate.k}, max norm",
            }
        if melbo:
            torch.manual_seed(seed)
            result = evaluate_melbo(model, sentence_batches(sentences, batch_size, pad_id=eos), samples=1)
            report["melbo"] = dataclasses.asdict(result)
    finally:
        model.train(was_training)
    return report
