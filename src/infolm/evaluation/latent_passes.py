"""The importance-sampled passes of a sentence latent model's report, in shards that add up.

A report's costly numbers are IWAE-K bounds over a whole split (K = 500 on test): with the model's own
proposal q(z|x) and prior (``bounds``), from the same draws under the training split's aggregated
posterior (``aggregate_prior``, SentenceMIM Eq. 9: ln p(x|z) is decoded once for both priors), and with
proposals whose log-variance floor is raised (``widened``). Each is a sum over sentences, so the split's
batches can be scored in shards, by separate processes, and added. Batch b draws after
``torch.manual_seed(seed * BATCH_SEEDS + b)`` whichever shard scores it, so any sharding gives the draws of
one pass and its sums that pass's numbers (to rounding). The sections have the fields that
``evaluate_latent``, ``aggregate_prior_bound`` and ``widened_proposal_bound`` report.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from infolm.data.batching import sentence_batches
from infolm.errors import InfolmError
from infolm.latent.aggregate_prior import AggregatePosterior
from infolm.latent.base import draw
from infolm.latent.estimators import iwae_bound
from infolm.latent.evaluation import LatentAccumulator, bounds_of_draws

BATCH_SEEDS = 1_000_000  # batch b of a pass seeded s draws after torch.manual_seed(s * BATCH_SEEDS + b)
AGGREGATE_SUMS = ("total", "words_total", "examples", "tokens", "words")


@dataclasses.dataclass
class PassSums:
    """The sums of the passes over some of a split's batches."""

    bounds: LatentAccumulator
    aggregate: dict[str, float] | None  # None: no aggregated-prior bound; words_total NaN: no <eos> term
    widened: dict[str, LatentAccumulator]  # by the floor as written by f"{floor:g}"
    batches: list[int]  # the batch indices summed

    def state(self) -> dict[str, Any]:
        return {
            "bounds": self.bounds.state(),
            "aggregate": self.aggregate,
            "widened": {floor: acc.state() for floor, acc in self.widened.items()},
            "batches": list(self.batches),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> PassSums:
        return cls(
            LatentAccumulator.from_state(state["bounds"]),
            None if state["aggregate"] is None else {k: float(v) for k, v in state["aggregate"].items()},
            {floor: LatentAccumulator.from_state(acc) for floor, acc in state["widened"].items()},
            [int(b) for b in state["batches"]],
        )


def shard_batches(sentences: int, batch_size: int, part: int, parts: int) -> range:
    """Batch indices of shard ``part`` (1-based) of ``parts``: contiguous, as equal as batches allow."""
    if parts < 1 or not 1 <= part <= parts:
        raise InfolmError(f"a shard is PART/PARTS with 1 <= PART <= PARTS; got {part}/{parts}")
    count = -(-sentences // batch_size)
    return range((part - 1) * count // parts, part * count // parts)


@torch.no_grad()
def score_passes(
    model: Any,
    sentences: Sequence[Tensor],
    eos_id: int,
    samples: int,
    chunk: int,
    batch_size: int,
    batches: Sequence[int] | None = None,
    aggregate: AggregatePosterior | None = None,
    floors: Sequence[float] = (),
    seed: int = 0,
    neighbors: int = 0,
    neighbor_draws: int = 1,
) -> PassSums:
    """The passes over ``batches`` (indices into the split's ``batch_size`` batches; None: all) of
    ``sentences`` (each ending in ``<eos>``): the own-proposal bounds, with ``aggregate`` the bound under
    that prior from the same draws (and, with ``neighbors``, ``neighbor_draws`` from each of the nearest
    training components: ``aggregate_terms``), and for each of ``floors`` the bound under the proposal
    widened to it."""
    from infolm.evaluation.aggregate_prior import aggregate_terms
    from infolm.evaluation.latent_report import widened_floor

    every = list(sentence_batches(list(sentences), batch_size, pad_id=eos_id))
    chosen = range(len(every)) if batches is None else batches
    if any(not 0 <= b < len(every) for b in chosen):
        raise InfolmError(f"batch indices must lie in [0, {len(every)}); got {list(chosen)[:3]}...")
    device = next(model.parameters()).device
    own_floor = getattr(getattr(model, "config", None), "min_log_var", None)
    widened_floors = {f"{floor:g}": widened_floor(model, floor) for floor in floors}
    sums = PassSums(
        LatentAccumulator(samples),
        None if aggregate is None else dict.fromkeys(AGGREGATE_SUMS, 0.0),
        {key: LatentAccumulator(samples) for key in widened_floors},
        [],
    )
    was_training = model.training
    model.eval()
    try:
        for b in chosen:
            tokens, lengths = every[b][0].to(device), every[b][1].to(device)
            scored = int(model.scored_tokens(lengths).sum())
            torch.manual_seed(seed * BATCH_SEEDS + b)
            q = model.posterior(tokens, lengths)
            draws = draw(model, tokens, lengths, samples, chunk, posterior=q)
            sums.bounds.add(bounds_of_draws(q, draws), scored)
            if aggregate is not None and sums.aggregate is not None:
                h, log_ratio, end = aggregate_terms(
                    model, tokens, lengths, q, draws, aggregate, neighbors, neighbor_draws, chunk
                )
                sums.aggregate["total"] += float(iwae_bound(h, log_ratio).double().sum())
                sums.aggregate["examples"] += len(lengths)
                sums.aggregate["tokens"] += scored
                if end is None:
                    sums.aggregate["words_total"] = math.nan
                else:  # the words alone (Sec. 4.3)
                    sums.aggregate["words_total"] += float(iwae_bound(h - end, log_ratio).double().sum())
                    sums.aggregate["words"] += scored - len(lengths)
            for key, floor in widened_floors.items():
                model.config.min_log_var = floor
                try:
                    torch.manual_seed(seed * BATCH_SEEDS + b)
                    wide = model.posterior(tokens, lengths)
                    sums.widened[key].add(
                        bounds_of_draws(wide, draw(model, tokens, lengths, samples, chunk, wide)), scored
                    )
                finally:
                    model.config.min_log_var = own_floor
            sums.batches.append(int(b))
    finally:
        model.train(was_training)
    return sums


def merge_passes(parts: Sequence[PassSums]) -> PassSums:
    """The sums of shards that together cover each batch once."""
    if not parts:
        raise InfolmError("no shards to merge")
    seen = [b for part in parts for b in part.batches]
    if len(set(seen)) != len(seen):
        raise InfolmError("the shards overlap: a batch is scored twice")
    first = parts[0]
    merged = PassSums(
        LatentAccumulator(first.bounds.samples),
        None if first.aggregate is None else dict.fromkeys(AGGREGATE_SUMS, 0.0),
        {key: LatentAccumulator(first.bounds.samples) for key in first.widened},
        sorted(seen),
    )
    for part in parts:
        if (part.aggregate is None) != (merged.aggregate is None) or set(part.widened) != set(merged.widened):
            raise InfolmError("the shards were scored with different passes (aggregated prior or floors)")
        merged.bounds.merge(part.bounds)
        if merged.aggregate is not None and part.aggregate is not None:
            for key in AGGREGATE_SUMS:
                merged.aggregate[key] += part.aggregate[key]
        for key, acc in part.widened.items():
            merged.widened[key].merge(acc)
    return merged


def bounds_section(sums: PassSums) -> dict[str, Any]:
    """The own-proposal bounds as ``evaluate_latent`` reports them (``LatentMetrics`` as a dict)."""
    return dataclasses.asdict(sums.bounds.metrics())


def aggregate_section(sums: PassSums, components: int, neighbors: int = 0, neighbor_draws: int = 1) -> dict[str, float]:
    """The aggregated-prior bound as ``aggregate_prior_bound`` reports it (``neighbors``, ``neighbor_draws``:
    the proposal the passes were scored with)."""
    if sums.aggregate is None:
        raise InfolmError("these passes have no aggregated-prior bound")
    a = sums.aggregate
    examples, tokens = max(a["examples"], 1.0), max(a["tokens"], 1.0)
    result = {
        "nll_aggregate_prior": -a["total"] / examples,
        "nll_aggregate_prior_per_token": -a["total"] / tokens,
        "ppl_aggregate_prior": math.exp(min(-a["total"] / tokens, 700.0)),
        "components": float(components),
        "samples": float(sums.bounds.samples),
        "neighbors": float(neighbors),
        "neighbor_draws": float(neighbor_draws if neighbors > 0 else 0),
        "sentences": a["examples"],
        "tokens": a["tokens"],
    }
    if math.isfinite(a["words_total"]):
        words = max(a["words"], 1.0)
        result["nll_words_aggregate_prior"] = -a["words_total"] / examples
        result["nll_words_aggregate_prior_per_word"] = -a["words_total"] / words
        result["ppl_words_aggregate_prior_per_word"] = math.exp(min(-a["words_total"] / words, 700.0))
    return result


def widened_section(sums: PassSums, key: str, floor: float) -> dict[str, Any]:
    """The bound under the proposal widened to ``floor`` (its key ``key``) as ``widened_proposal_bound``
    reports it."""
    metrics = sums.widened[key].metrics()
    result: dict[str, Any] = {"floor": floor, "nll": metrics.nll, "ppl": metrics.ppl, "rate": metrics.rate}
    result["mi"] = metrics.mutual_information
    if metrics.nll_words is not None:
        result["nll_words"] = metrics.nll_words
    return result
