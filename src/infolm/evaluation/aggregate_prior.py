"""The IWAE bound of a sentence latent model under its aggregated-posterior prior (SentenceMIM Eq. 9).

SentenceMIM's model prior is p_θ(z) = E_P(x)[q_θ(z|x)], not the anchor N(0, I) (Eq. 8) that the usual
bound reads. Here P(x) is the training split: p̂(z) = 1/N Σ_n q(z|x_n), a mixture of N Gaussians whose
density is exact (``latent/aggregate_prior.py``). For a sentence x, K draws z_k ~ q(z|x) give

    ln p(x) >= E[ ln 1/K Σ_k p(x|z_k) p̂(z_k) / q(z_k|x) ]     (IWAE-K, with proposal q and prior p̂)

a bound on the likelihood of the model whose prior is p̂, which tightens as K grows. It is a bound for
held-out sentences: a training sentence scores under a prior that holds its own posterior as one of
the N components (with sharp posteriors its bound nears E_q ln p(x|z) - ln N, MELBO's form), which a new
sentence does not have. MELBO (Eq. 16) takes the scored set itself as P(x) and drops every component
but the sentence's own; this bound keeps them all and takes them from the training split.

The proposal can add draws from the training components nearest the sentence's code (``neighbors``, see
``NeighborProposal``): the same model and prior, a valid and, with sharp posteriors, much tighter bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from infolm.data.batching import sentence_batches
from infolm.errors import InfolmError
from infolm.latent.aggregate_prior import AggregatePosterior, NeighborProposal, component_subset, mixture_log_density


@torch.no_grad()
def aggregate_posterior(
    model: Any,
    sentences: Sequence[Tensor],
    eos_id: int,
    batch_size: int = 256,
    components: int | None = None,
    seed: int = 0,
) -> AggregatePosterior:
    """p̂(z) of ``sentences`` (the training split, each ending in ``<eos>``) under the model's encoder, in
    evaluation mode; ``components``: at most that many sentences, a subsample drawn with ``seed``
    (None: all of them, the exact Eq. 9 over the split)."""
    if not sentences:
        raise InfolmError("the aggregated posterior needs training sentences; the train split has none")
    if components is not None and components < 1:
        raise InfolmError(f"the aggregated posterior needs at least one component, got {components}")
    keep = component_subset(len(sentences), components or len(sentences), seed).tolist()
    chosen = [sentences[i] for i in keep]
    device = next(model.parameters()).device
    means, log_vars = [], []
    was_training = model.training
    model.eval()
    try:
        for tokens, lengths in sentence_batches(chosen, batch_size, pad_id=eos_id):
            q = model.posterior(tokens.to(device), lengths.to(device))
            means.append(q.mean.reshape(len(lengths), -1))
            log_vars.append(q.variance.log().reshape(len(lengths), -1))
    finally:
        model.train(was_training)
    return AggregatePosterior(torch.cat(means), torch.cat(log_vars))


@torch.no_grad()
def aggregate_terms(
    model: Any,
    tokens: Tensor,
    lengths: Tensor,
    posterior: Any,
    draws: Any,
    prior: AggregatePosterior,
    neighbors: int = 0,
    neighbor_draws: int = 1,
    chunk: int = 0,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """ln p(x|z), ln p̂(z) - ln r(z|x) and the ``<eos>`` term of ln p(x|z) (None where the model has none),
    (S, B) each, of the draws of the aggregated-prior bound of one batch: ``draws`` (K from q(z|x), decoded)
    alone, r = q, when ``neighbors`` is 0; else with ``neighbor_draws`` more from each of the ``neighbors``
    training components nearest q's mean, decoded ``chunk`` at a time, r the mixture of ``NeighborProposal``.
    IWAE's log-mean-exp of their sum is the bound."""
    if neighbors <= 0:
        log_ratio = prior.log_prob(draws.z) - draws.log_posterior  # ln p̂(z) - ln q(z|x), (K, B)
        return draws.log_likelihood, log_ratio, draws.log_likelihood_end
    samples, rows = draws.z.size(0), draws.z.size(1)
    proposal = NeighborProposal(prior, posterior.mean.reshape(rows, -1), neighbors, neighbor_draws)
    extra = proposal.sample().to(draws.z.dtype).reshape(-1, *draws.z.shape[1:])  # (M D, B, *event)
    step = chunk if chunk > 0 else extra.size(0)
    parts = [model.log_likelihood_terms(tokens, lengths, extra[i : i + step]) for i in range(0, extra.size(0), step)]
    z = torch.cat([draws.z, extra]).reshape(-1, rows, proposal.mean.size(2))  # (S, B, D)
    log_q = torch.cat([draws.log_posterior, posterior.log_prob(extra)])
    log_ratio = mixture_log_density(z, prior.means, prior.log_vars, prior.block) - proposal.log_density(
        z, log_q, samples
    )
    log_likelihood = torch.cat([draws.log_likelihood, *(whole for whole, _ in parts)]).double()
    ends = [end for _, end in parts if end is not None]
    end = None
    if draws.log_likelihood_end is not None and len(ends) == len(parts):
        end = torch.cat([draws.log_likelihood_end, *ends]).double()
    return log_likelihood, log_ratio, end


@torch.no_grad()
def aggregate_prior_bound(
    model: Any,
    sentences: Sequence[Tensor],
    prior: AggregatePosterior,
    eos_id: int,
    samples: int = 100,
    chunk: int = 10,
    batch_size: int = 20,
    seed: int = 0,
    neighbors: int = 0,
    neighbor_draws: int = 1,
) -> dict[str, float]:
    """The IWAE-``samples`` bound on -ln p(x) of ``sentences`` (held out, each ending in ``<eos>``) with the
    prior p̂ (``prior``) and the proposal q(z|x) (with ``neighbors``: and ``neighbor_draws`` from each of the
    nearest training components, ``aggregate_terms``): per sentence, per scored token (the words and
    ``<eos>``; the words alone under a length prior) and its perplexity; with ``<eos>`` left out of every
    draw's ln p(x|z) (SentenceMIM Sec. 4.3), per sentence and per word, where the model scores ``<eos>``."""
    from infolm.latent.base import draw
    from infolm.latent.estimators import iwae_bound

    if samples < 1:
        raise InfolmError(f"the aggregated-prior bound needs at least one draw, got {samples}")
    if not sentences:
        raise InfolmError("the aggregated-prior bound of an empty set of sentences")
    device = next(model.parameters()).device
    total, words_total, examples, tokens_scored, words = 0.0, 0.0, 0, 0, 0
    has_words_bound = True
    was_training = model.training
    model.eval()
    try:
        torch.manual_seed(seed)
        for tokens, lengths in sentence_batches(sentences, batch_size, pad_id=eos_id):
            tokens, lengths = tokens.to(device), lengths.to(device)
            q = model.posterior(tokens, lengths)
            draws = draw(model, tokens, lengths, samples, chunk, posterior=q)
            h, log_ratio, end = aggregate_terms(
                model, tokens, lengths, q, draws, prior, neighbors, neighbor_draws, chunk
            )
            total += float(iwae_bound(h, log_ratio).double().sum())
            scored = int(model.scored_tokens(lengths).sum())
            tokens_scored += scored
            examples += len(lengths)
            if end is None:
                has_words_bound = False
            else:
                ended = h - end  # the words alone (Sec. 4.3)
                words_total += float(iwae_bound(ended, log_ratio).double().sum())
                words += scored - len(lengths)
    finally:
        model.train(was_training)
    nll = -total / examples
    result = {
        "nll_aggregate_prior": nll,
        "nll_aggregate_prior_per_token": -total / max(tokens_scored, 1),
        "ppl_aggregate_prior": math.exp(min(-total / max(tokens_scored, 1), 700.0)),
        "components": float(prior.components),
        "samples": float(samples),
        "neighbors": float(neighbors),
        "neighbor_draws": float(neighbor_draws if neighbors > 0 else 0),
        "sentences": float(examples),
        "tokens": float(tokens_scored),
    }
    if has_words_bound:
        result["nll_words_aggregate_prior"] = -words_total / examples
        result["nll_words_aggregate_prior_per_word"] = -words_total / max(words, 1)
        result["ppl_words_aggregate_prior_per_word"] = math.exp(min(-words_total / max(words, 1), 700.0))
    return result
