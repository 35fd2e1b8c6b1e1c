"""Reconstruction, perturbation, interpolation and sampling with a sentence latent-variable model
(SentenceMIM Sec. 4.7, App. D), and the BLEU-1 of reconstructions (Tables 2-5, 7).

Latent codes of a sentence x (App. D.1): ``mean`` z = E[q(z|x)] (M); ``sample`` z ~ q(z|x) (R, the
paper's "reconstruction"); ``perturb`` z ~ N(mu(x), (10 sigma(x))^2) (P). A deterministic
auto-encoder has only ``mean``. Sentences are decoded greedily (top-1 token) unless asked otherwise,
except for the BLEU-1 of reconstructions, whose default samples every token from p(x|z): the paper's
reconstructions are x ~ p(x|z) (Sec. 4.6 says it *modifies* the sampling to be greedy for its answers,
and Sec. 4.7 samples), and the authors' test script decodes by sampling by default. Under a length
prior (Eq. 2) a reconstruction has the observed number of words.
Interpolation decodes z_alpha at equispaced points of the segment between two codes (Sec. 4.7).
Sampling from the model draws z ~ N(0, 0.1^2 I) by default, as App. D.3 (the A-MIM prior is an
implicit aggregated posterior with no sampler); ``std=1`` samples the anchor N(0, I).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
from torch import Tensor
from torch.distributions import Distribution

from infolm.data.batching import pad_sentences
from infolm.errors import InfolmError
from infolm.evaluation.bleu import BleuScore, bleu1

MODES = ("mean", "sample", "perturb")
DECODINGS = ("sampled", "greedy")  # how a reconstruction picks each word from p(x|z)
PERTURB_SCALE = 10.0  # App. D.1: a Gaussian with 10 times the posterior standard deviation
SAMPLE_STD = 0.1  # App. D.3: samples from N(0, 0.1^2 I)


class SentenceLatentModel(Protocol):
    latent_dim: int
    eos_id: int

    def posterior(self, tokens: Tensor, lengths: Tensor) -> Distribution: ...

    def generate(
        self,
        z: Tensor,
        max_length: int | None = None,
        greedy: bool = True,
        generator: torch.Generator | None = None,
        banned: list[int] | None = None,
        lengths: Tensor | None = None,
    ) -> list[list[int]]: ...


def latent_codes(
    q: Distribution, mode: str = "sample", scale: float = PERTURB_SCALE, generator: torch.Generator | None = None
) -> Tensor:
    """One code per sentence (B, D) from the posterior ``q`` (batch (B,), event (D,))."""
    if mode not in MODES:
        raise InfolmError(f"latent code mode must be one of {', '.join(MODES)}; got {mode!r}")
    mean = q.mean
    if mode == "mean":
        return mean
    noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
    return mean + (scale if mode == "perturb" else 1.0) * q.stddev * noise


def _with_eos(sentences: Sequence[Sequence[int]], eos_id: int) -> list[Tensor]:
    return [torch.tensor([*s, eos_id] if not s or s[-1] != eos_id else list(s), dtype=torch.long) for s in sentences]


@torch.no_grad()
def encode(
    model: SentenceLatentModel,
    sentences: Sequence[Sequence[int]],
    mode: str = "sample",
    generator: torch.Generator | None = None,
) -> Tensor:
    """Codes (S, D) of sentences given as token ids (``<eos>`` appended where missing)."""
    tokens, lengths = pad_sentences(_with_eos(sentences, model.eos_id), model.eos_id)
    return latent_codes(model.posterior(tokens, lengths), mode, generator=generator)


@torch.no_grad()
def reconstruct(
    model: SentenceLatentModel,
    sentences: Sequence[Sequence[int]],
    mode: str = "sample",
    batch_size: int = 64,
    max_length: int | None = None,
    generator: torch.Generator | None = None,
    greedy: bool = True,
    word_generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Reconstructions (ids without ``<eos>``) of ``sentences`` from codes of the given mode (drawn from
    ``generator``), greedy or with every word sampled (from ``word_generator``, default ``generator``); a
    model with a length prior writes each at its observed number of words."""
    out: list[list[int]] = []
    words_from = word_generator if word_generator is not None else generator
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start : start + batch_size]
        z = encode(model, chunk, mode, generator)
        words = torch.tensor([len(s) - (1 if s and s[-1] == model.eos_id else 0) for s in chunk])
        out.extend(model.generate(z, max_length=max_length, greedy=greedy, generator=words_from, lengths=words))
    return out


def reconstruction_bleu(
    model: SentenceLatentModel,
    sentences: Sequence[Sequence[int]],
    itos: Sequence[str],
    mode: str = "sample",
    bleu_mode: str = "corpus",
    batch_size: int = 64,
    generator: torch.Generator | None = None,
    decoding: str = "sampled",
) -> BleuScore:
    """BLEU-1 between ``sentences`` and their reconstructions (the paper's BLEU column)."""
    return reconstruction_bleu_scores(model, sentences, itos, mode, batch_size, generator, bleu_mode, decoding)[0]


def reconstruction_bleu_scores(
    model: SentenceLatentModel,
    sentences: Sequence[Sequence[int]],
    itos: Sequence[str],
    mode: str = "sample",
    batch_size: int = 64,
    generator: torch.Generator | None = None,
    bleu_mode: str = "corpus",
    decoding: str = "sampled",
    word_generator: torch.Generator | None = None,
) -> tuple[BleuScore, BleuScore]:
    """BLEU-1 of one set of reconstructions two ways: ``bleu_mode`` without ``<eos>``, and as the authors'
    test script scores it (the mean of sentence BLEU-1, ``<eos>`` kept on the references and on the
    reconstructions that emitted it). ``decoding``: ``sampled`` (every word drawn from p(x|z), the paper's
    x ~ p(x|z) and the authors' script's default; the words from ``word_generator``, default ``generator``,
    which draws the codes: seeded generators give the same score) or ``greedy`` (the top word)."""
    if not sentences:
        raise InfolmError("reconstruction BLEU of an empty set of sentences")
    if decoding not in DECODINGS:
        raise InfolmError(f"reconstruction decoding must be one of {', '.join(DECODINGS)}; got {decoding!r}")
    limit = max(len(s) for s in sentences) * 2 + 10  # a reconstruction that never ends is cut here
    greedy = decoding == "greedy"
    hypotheses = reconstruct(model, sentences, mode, batch_size, limit, generator, greedy, word_generator)
    words = [[itos[i] for i in h] for h in hypotheses]
    references = [[itos[i] for i in s] for s in sentences]
    eos = [] if getattr(getattr(model, "config", None), "length_prior", False) else ["<eos>"]  # Eq. 2: none
    ended = [[*w, *eos] if len(h) < limit else w for w, h in zip(words, hypotheses)]
    authors = bleu1(ended, [[*r, *eos] for r in references], "sentence", keep_eos=True)
    return bleu1(words, references, bleu_mode), authors


def interpolation_codes(z_start: Tensor, z_end: Tensor, steps: int) -> Tensor:
    """``steps`` equispaced points from z_start to z_end, both included. (steps, D)."""
    if steps < 2:
        raise InfolmError(f"interpolation needs at least 2 steps (the two ends), got {steps}")
    alpha = torch.linspace(0.0, 1.0, steps, dtype=z_start.dtype, device=z_start.device).unsqueeze(1)  # (S, 1)
    return (1 - alpha) * z_start.unsqueeze(0) + alpha * z_end.unsqueeze(0)


@torch.no_grad()
def interpolate(
    model: SentenceLatentModel,
    start: Sequence[int],
    end: Sequence[int],
    steps: int = 10,
    mode: str = "sample",
    max_length: int | None = None,
    generator: torch.Generator | None = None,
    greedy: bool = True,
) -> list[list[int]]:
    """Decodings (greedy, or every token sampled) of the codes between sentence ``start`` and sentence
    ``end`` (Sec. 4.7)."""
    z = encode(model, [start, end], mode, generator)
    codes = interpolation_codes(z[0], z[1], steps)
    return model.generate(codes, max_length=max_length, greedy=greedy, generator=generator)


@torch.no_grad()
def sample_sentences(
    model: SentenceLatentModel,
    count: int,
    std: float = SAMPLE_STD,
    greedy: bool = True,
    max_length: int | None = None,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Sentences decoded from z ~ N(0, std^2 I) (App. D.3: std 0.1)."""
    if count < 1:
        raise InfolmError(f"the number of samples must be positive, got {count}")
    if std <= 0:
        raise InfolmError(f"the sampling standard deviation must be positive, got {std}")
    z = std * torch.randn(count, model.latent_dim, generator=generator)
    return model.generate(z, max_length=max_length, greedy=greedy, generator=generator)
