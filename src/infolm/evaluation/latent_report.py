"""Everything SentenceMIM reports about a sentence latent-variable model on one split.

``bounds``: the IWAE-K bound on -ln p(x) with the model's own prior (K = 500 for test, 100 for
validation), per sentence and per token, its perplexity, the ELBO, the rate KL(q(z|x) || p(z)),
the distortion, an MI estimate (Û^K - Ŝ^K averaged over sentences) and the active units
(Var_x E_q[z_u] > 0.01), from ``infolm.latent.evaluation``. Tokens are every scored position:
the words and the ``<eos>`` that ends each sentence. ``nll_words`` is the IWAE-K bound from the same
draws with each sentence's ``<eos>`` term left out (``nll_words_per_word``: per word): the paper
removes ``<eos>`` when it evaluates (Sec. 4.3). No field divides an NLL that scores ``<eos>`` by the
words alone.
``reconstruction_sampled``: BLEU-1 of reconstructions with every word sampled from p(x|z), the paper's
protocol (the default); ``reconstruction``: of greedy ones (each section names its ``decoding``;
``evaluation/bleu.py``, ``evaluation/reconstruction.py``).
``aggregate_prior`` (on request): the IWAE-K bound with sMIM's own prior, the aggregated posterior of the
training split (Eq. 9), beside the bound with N(0, I), which for sMIM is the anchor's (Eq. 8)
(``evaluation/aggregate_prior.py``).
``latent_entropy``: Kraskov kNN entropy of one code per sentence against N(0, I)'s exact entropy and
the same estimator's reading of as many N(0, I) samples (its bias at this N and d; skipped above
``MAX_DIM`` dimensions). ``melbo``: Eq. 16, only on request, apart, with its caveat (``evaluation/melbo.py``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from infolm.data.batching import sentence_batches
from infolm.errors import InfolmError
from infolm.evaluation.knn_entropy import MAX_DIM, knn_entropy, standard_normal_entropy
from infolm.evaluation.melbo import evaluate_melbo
from infolm.evaluation.reconstruction import encode, reconstruction_bleu_scores

ENTROPY_K = 3  # neighbours of the Kraskov estimate of the latent entropy
# the report's section of each decoding of the reconstructions (older reports hold greedy BLEU-1 under
# ``reconstruction``, so that name keeps that meaning)
RECONSTRUCTION_SECTIONS = {"sampled": "reconstruction_sampled", "greedy": "reconstruction"}


@torch.no_grad()
def widened_proposal_bound(
    model: Any,
    sentences: list[Any],
    floor: float,
    eos_id: int,
    samples: int = 100,
    chunk: int = 20,
    batch_size: int = 20,
    seed: int = 0,
) -> dict[str, float]:
    """The IWAE-``samples`` bound of the same model with its proposal's log-variance floor raised to
    ``floor`` (the model's own floor gives its usual bound). The bound holds for any proposal, and a
    sentence model whose posteriors sit at a low floor (sMIM: -10) samples p(z|x) poorly: a wider
    proposal can bound the same -ln p(x) much more tightly. p(x|z) and p(z) are untouched; the model's
    floor is restored afterwards. Returns NLL and perplexity as ``evaluate_latent`` reports them, the rate and
    the MI estimate Û - Ŝ under the widened proposal."""
    from infolm.latent.evaluation import evaluate_latent

    widened = widened_floor(model, floor)
    own = model.config.min_log_var
    was_training = model.training
    model.eval()
    try:
        model.config.min_log_var = widened
        torch.manual_seed(seed)
        metrics = evaluate_latent(model, sentence_batches(sentences, batch_size, pad_id=eos_id), samples, chunk)
    finally:
        model.config.min_log_var = own
        model.train(was_training)
    # the MI estimate Û - Ŝ under the widened proposal: under a clamp-sharp one it is about the rate (the
    # self-normalized weights sit on one draw), not I(x; z)
    result = {"floor": widened, "nll": metrics.nll, "ppl": metrics.ppl, "rate": metrics.rate}
    result["mi"] = metrics.mutual_information
    if metrics.nll_words is not None:
        result["nll_words"] = metrics.nll_words  # the same bound with <eos> left out (Sec. 4.3)
    return result


def widened_floor(model: Any, floor: float) -> float:
    """The log-variance floor a proposal widened to ``floor`` has: never narrower than the model's own."""
    if not hasattr(getattr(model, "config", None), "min_log_var"):
        raise InfolmError(f"{type(model).__name__} has no log-variance floor to widen its proposal by")
    return max(float(model.config.min_log_var), floor)


@torch.no_grad()
def proposal_floor_binds(model: Any, sentences: list[Any], floor: float, eos_id: int, batch_size: int = 20) -> bool:
    """Whether raising the posterior log-variance floor to ``floor`` changes q(z|x) of any of ``sentences``.
    If it binds on none, the widened proposal is q itself and :func:`widened_proposal_bound` is the
    model's usual IWAE bound (the same estimator; with the same seed and batches, the same number)."""
    was_training = model.training
    model.eval()
    try:
        for tokens, lengths in sentence_batches(sentences, batch_size, pad_id=eos_id):
            # a log-variance within rounding of the floor counts as binding: the full bound is then computed
            if bool((model.posterior(tokens, lengths).variance.log() < floor + 1e-6).any()):
                return True
    finally:
        model.train(was_training)
    return False


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
    deterministic: bool = False,
    decodings: tuple[str, ...] = ("sampled",),
    aggregate_prior: bool = False,
    aggregate_components: int | None = None,
    bounds: dict[str, Any] | None = None,
    aggregate_neighbors: tuple[int, int] = (0, 1),
) -> dict[str, Any]:
    """The report of ``model`` on ``split`` of ``corpus`` (the vocabulary's ``<eos>`` ends sentences).

    ``deterministic`` (an auto-encoder's run): its code is the posterior mean and its variance head was
    never trained, so no likelihood bound, rate, MI or MELBO is reported; ``bounds`` holds the
    reconstruction NLL at the mean and the active units instead. ``decodings``: the BLEU-1 sections to
    score (``sampled``, ``greedy``). ``aggregate_prior``: also the bound under the training split's
    aggregated posterior, of at most ``aggregate_components`` training sentences (None: all), its proposal
    with ``aggregate_neighbors`` (M, D) D draws from each of the M nearest training components. ``bounds``:
    the own-proposal bounds already computed for these sentences, samples and seed (``evaluation/latent_passes.py``,
    in shards), used instead of a pass of its own.
    """
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
        if deterministic:
            bounds = reconstruction_at_mean(model, sentence_batches(sentences, batch_size, pad_id=eos))
        elif bounds is not None:
            bounds = dict(bounds)
        else:
            metrics = evaluate_latent(model, sentence_batches(sentences, batch_size, pad_id=eos), samples, chunk)
            bounds = dataclasses.asdict(metrics)
        prior = getattr(model.config, "length_prior", False)
        # a model of single symbols scores no <eos>: its tokens are its words
        words = bounds["tokens"] - len(sentences) if not prior and hasattr(model, "eos_id") else bounds["tokens"]
        if bounds.get("nll_words") is not None:  # the words alone, <eos> left out (Sec. 4.3)
            bounds["nll_words_per_word"] = bounds["nll_words"] * bounds["examples"] / max(words, 1)
            bounds["ppl_words_per_word"] = math.exp(min(bounds["nll_words_per_word"], 700.0))
        report: dict[str, Any] = {"split": split, "bounds": bounds}
        bare = [s[:-1].tolist() if int(s[-1]) == eos else s.tolist() for s in sentences]  # words, no <eos>
        if not hasattr(model, "eos_id"):  # a model of single symbols (the thesis's synthetic task)
            bleu = entropy = False
            report["note"] = "the model decodes no sentences: no reconstruction BLEU or latent entropy"
        if bleu:
            for decoding in decodings:
                report[RECONSTRUCTION_SECTIONS[decoding]] = reconstruction_section(
                    model, bare, corpus.vocab.itos, mode, decoding, seed
                )
        if entropy:
            generator = torch.Generator().manual_seed(seed)
            codes = torch.cat([encode(model, bare[i : i + 256], mode, generator) for i in range(0, len(bare), 256)])
            distinct = int(codes.unique(dim=0).size(0))
            # a split of a few sentences (or one repeated) has too few codes for the estimate: skipped, noted
            estimate = knn_entropy(codes.double().numpy(), k=ENTROPY_K) if distinct > ENTROPY_K else None
            dim = codes.size(1)
            if estimate is not None:
                note = f"Kraskov k={estimate.k}, max norm"
            elif distinct <= ENTROPY_K:
                note = f"skipped: {distinct} distinct codes, Kraskov k={ENTROPY_K} needs more than {ENTROPY_K}"
            else:
                note = f"skipped above {MAX_DIM} dimensions"
            report["latent_entropy"] = {
                "entropy": None if estimate is None else estimate.entropy,
                "normal_entropy": standard_normal_entropy(dim),
                # the same estimator on as many N(0, I) samples: what it reads for the anchor at this N and d
                "normal_estimate": None if estimate is None else estimate.normal_estimate,
                "dim": dim,
                "mode": mode,
                "note": note,
            }
        if melbo and not deterministic:
            torch.manual_seed(seed)
            result = evaluate_melbo(model, sentence_batches(sentences, batch_size, pad_id=eos), samples=1)
            report["melbo"] = dataclasses.asdict(result)
        if aggregate_prior and not deterministic:
            report["aggregate_prior"] = aggregate_prior_section(
                model,
                corpus,
                sentences,
                split,
                samples,
                chunk,
                batch_size,
                aggregate_components,
                seed,
                neighbors=aggregate_neighbors,
            )
    finally:
        model.train(was_training)
    return report


def reconstruction_section(
    model: Any, sentences: list[list[int]], itos: Any, mode: str, decoding: str, seed: int = 0
) -> dict[str, Any]:
    """BLEU-1 of the reconstructions of ``sentences`` (words, no ``<eos>``) under one ``decoding``: codes
    from a generator seeded ``seed``, sampled words from another seeded ``seed + 1`` (so both decodings
    read the same codes)."""
    if decoding not in RECONSTRUCTION_SECTIONS:
        raise InfolmError(
            f"reconstruction decoding must be one of {', '.join(RECONSTRUCTION_SECTIONS)}; got {decoding!r}"
        )
    torch.manual_seed(seed)
    score, authors = reconstruction_bleu_scores(
        model,
        sentences,
        itos,
        mode,
        batch_size=64,
        generator=torch.Generator().manual_seed(seed),
        decoding=decoding,
        word_generator=torch.Generator().manual_seed(seed + 1),
    )
    return {
        "bleu1": score.bleu,
        "precision1": score.precision,
        "mode": mode,
        "decoding": decoding,  # sampled: every word drawn from p(x|z) (the paper's); greedy: the top word
        "seed": seed,
        # the authors' test script's scoring (sentence BLEU-1 averaged, <eos> kept) of the same reconstructions
        "bleu1_authors": authors.bleu,
    }


MI_MEMBERS = 2000  # components whose draws estimate I_q(X; Z) under the aggregated posterior


def aggregate_prior_section(
    model: Any,
    corpus: Any,
    sentences: list[Any],
    split: str,
    samples: int,
    chunk: int,
    batch_size: int,
    components: int | None = None,
    seed: int = 0,
    prior: Any = None,
    bound: dict[str, float] | None = None,
    neighbors: tuple[int, int] = (0, 1),
) -> dict[str, Any]:
    """The IWAE-``samples`` bound of ``sentences`` (of ``split``) under the aggregated posterior of the
    training split (Eq. 9), of ``components`` training sentences at most (a subsample drawn with ``seed``),
    and the MI of that mixture's encoding distribution, I_q(X; Z) <= ln N (``mi_aggregate``). ``prior``: that
    mixture when the caller has built it; ``bound``: the bound when already computed (``latent_passes``);
    ``neighbors`` (M, D): the proposal adds D draws from each of the M nearest training components."""
    from infolm.evaluation.aggregate_prior import aggregate_posterior, aggregate_prior_bound
    from infolm.latent.aggregate_prior import aggregate_mutual_information, component_subset

    eos = corpus.vocab.eos_id
    train = list(corpus.sentences("train"))
    if prior is None:
        prior = aggregate_posterior(model, train, eos, components=components, seed=seed)
    if bound is None:
        bound = aggregate_prior_bound(model, sentences, prior, eos, samples, chunk, batch_size, seed, *neighbors)
    result: dict[str, Any] = dict(bound)
    result["train_sentences"] = len(train)
    # SentenceMIM's own MI, I_q(X; Z) of the training sentences' encoding distribution (<= ln N): 10 draws
    # from each of at most MI_MEMBERS of the mixture's components (a fixed-seed subsample, stated)
    members = component_subset(prior.components, MI_MEMBERS, seed)
    mi, mi_sem = aggregate_mutual_information(prior, members, samples=10, seed=seed)
    result.update(mi_aggregate=mi, mi_aggregate_sem=mi_sem, mi_aggregate_members=len(members))
    result["mi_aggregate_max"] = math.log(prior.components)
    result["note"] = (
        f"prior: the aggregated posterior of {prior.components} of the {len(train)} training sentences"
        + ("" if prior.components == len(train) else f" (a subsample, seed {seed})")
        + "; a bound for held-out sentences"
        + (
            f"; proposal q(z|x) and {neighbors[1]} draws from each of the {neighbors[0]} nearest training posteriors"
            if neighbors[0] > 0
            else "; proposal q(z|x)"
        )
        + (": the scored sentences are in the mixture" if split == "train" else "")
    )
    return result


@torch.no_grad()
def reconstruction_at_mean(model: Any, batches: Any) -> dict[str, Any]:
    """-ln p(x | E[q(z|x)]) per sentence and per token, and the active units (Var_x E[q] > 0.01), over
    ``(tokens, lengths)`` batches: what an auto-encoder's evaluation can say."""
    from infolm.latent.evaluation import ACTIVE_UNIT_THRESHOLD

    total, examples, tokens = 0.0, 0, 0
    means: list[torch.Tensor] = []
    for batch_tokens, lengths in batches:
        mean = model.posterior(batch_tokens, lengths).mean  # (B, D)
        total -= float(model.log_likelihood(batch_tokens, lengths, mean.unsqueeze(0)).sum())  # z: (1, B, D)
        examples += len(lengths)
        tokens += int(model.scored_tokens(lengths).sum())
        means.append(mean.reshape(len(lengths), -1).double())
    codes = torch.cat(means)
    variance = codes.var(dim=0, unbiased=False)  # Var_x E_q[z_u], as the sampled report's active units
    return {
        "deterministic": True,
        "note": "a deterministic auto-encoder: no likelihood bound, rate, MI or MELBO (its variance head is untrained)",
        "reconstruction_nll": total / max(examples, 1),
        "reconstruction_nll_per_token": total / max(tokens, 1),
        "reconstruction_ppl": math.exp(min(total / max(tokens, 1), 700.0)),
        "active_units": int((variance > ACTIVE_UNIT_THRESHOLD).sum()),
        "examples": examples,
        "tokens": tokens,
    }
