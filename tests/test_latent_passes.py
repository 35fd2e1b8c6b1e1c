"""Sharded report passes of a sentence latent model: shards add up to one pass, which is the usual bounds."""

from __future__ import annotations

import json

import pytest
import torch

from infolm.data.batching import sentence_batches
from infolm.errors import InfolmError
from infolm.evaluation.aggregate_prior import aggregate_posterior, aggregate_prior_bound
from infolm.evaluation.latent_passes import (
    BATCH_SEEDS,
    PassSums,
    aggregate_section,
    bounds_section,
    merge_passes,
    score_passes,
    shard_batches,
    widened_section,
)
from infolm.evaluation.latent_report import widened_proposal_bound
from infolm.latent.evaluation import evaluate_latent
from infolm.latent.sentence_gru import SentenceGRU, SentenceGRUConfig

EOS = 0
SENTENCES = [[5, 3, 7], [2], [4, 4, 9, 6, 1], [8, 2], [3, 3, 3, 10], [11], [6, 7, 8]]


def tiny() -> SentenceGRU:
    torch.manual_seed(0)
    config = SentenceGRUConfig(emb=8, hidden=10, latent=3, dropout_embedding=0.0, max_length=12)
    return SentenceGRU(config, 12, eos_id=EOS).eval()


def sentences() -> list[torch.Tensor]:
    return [torch.tensor([*s, EOS]) for s in SENTENCES]


def test_shards_cover_the_batches_once_and_refuse_a_bad_part() -> None:
    covered = [b for part in (1, 2, 3) for b in shard_batches(7, 2, part, 3)]
    assert covered == [0, 1, 2, 3]
    assert list(shard_batches(7, 2, 1, 1)) == [0, 1, 2, 3]
    with pytest.raises(InfolmError, match="PART/PARTS"):
        shard_batches(7, 2, 3, 2)


def test_shards_merged_equal_one_pass_and_survive_json() -> None:
    model = tiny()
    data = sentences()
    prior = aggregate_posterior(model, data[:4], EOS, batch_size=3)
    whole = score_passes(model, data, EOS, 30, 10, 2, aggregate=prior, floors=[1.0], seed=2)
    parts = []
    for part in (3, 1, 2):
        shard = score_passes(model, data, EOS, 30, 10, 2, shard_batches(len(data), 2, part, 3), prior, [1.0], seed=2)
        parts.append(PassSums.from_state(json.loads(json.dumps(shard.state()))))
    merged = merge_passes(parts)
    assert merged.batches == whole.batches == [0, 1, 2, 3]
    for key, value in bounds_section(whole).items():
        assert bounds_section(merged)[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    for key, value in aggregate_section(whole, prior.components).items():
        assert aggregate_section(merged, prior.components)[key] == pytest.approx(value, rel=1e-12), key
    assert widened_section(merged, "1", 1.0) == pytest.approx(widened_section(whole, "1", 1.0), rel=1e-12)
    with pytest.raises(InfolmError, match="overlap"):
        merge_passes([parts[0], parts[0]])


def test_a_one_batch_pass_is_the_usual_bound_the_aggregate_bound_and_the_widened_one() -> None:
    """With one batch, the pass draws after the seed that the existing functions set once: the same draws,
    the same numbers; the aggregated-prior bound reuses the own-proposal draws."""
    model = tiny()
    data = sentences()
    prior = aggregate_posterior(model, data, EOS, batch_size=3)
    seed = 4
    passes = score_passes(model, data, EOS, 40, 10, len(data), aggregate=prior, floors=[0.5], seed=seed)
    torch.manual_seed(seed * BATCH_SEEDS)
    usual = evaluate_latent(model, sentence_batches(data, len(data), pad_id=EOS), samples=40, chunk=10)
    section = bounds_section(passes)
    assert section["nll"] == pytest.approx(usual.nll, rel=1e-12)
    assert section["nll_words"] == pytest.approx(usual.nll_words, rel=1e-12)
    assert section["mutual_information"] == pytest.approx(usual.mutual_information, rel=1e-12)
    assert section["active_units"] == usual.active_units
    bound = aggregate_prior_bound(model, data, prior, EOS, 40, 10, len(data), seed=seed * BATCH_SEEDS)
    mine = aggregate_section(passes, prior.components)
    for key in ("nll_aggregate_prior", "nll_words_aggregate_prior", "nll_aggregate_prior_per_token", "tokens"):
        assert mine[key] == pytest.approx(bound[key], rel=1e-12), key
    wide = widened_proposal_bound(model, data, 0.5, EOS, 40, 10, len(data), seed=seed * BATCH_SEEDS)
    assert widened_section(passes, "0.5", 0.5) == pytest.approx(wide, rel=1e-12)
    assert model.config.min_log_var != 0.5  # the floor is restored


def test_shards_of_different_passes_are_refused() -> None:
    model = tiny()
    data = sentences()
    a = score_passes(model, data, EOS, 5, 5, 2, shard_batches(len(data), 2, 1, 2))
    b = score_passes(model, data, EOS, 5, 5, 2, shard_batches(len(data), 2, 2, 2), floors=[1.0])
    with pytest.raises(InfolmError, match="different passes"):
        merge_passes([a, b])
    with pytest.raises(InfolmError, match="no aggregated-prior bound"):
        aggregate_section(a, 1)


class StubVocab:
    eos_id = EOS
    itos = [f"w{i}" for i in range(12)]


class StubCorpus:
    vocab = StubVocab()

    def sentences(self, split: str) -> list[torch.Tensor]:
        return sentences()[:4] if split == "train" else sentences()


def test_the_table_driver_merges_shards_into_the_report_one_process_would_write(tmp_path, monkeypatch) -> None:
    """``--part 1/2`` and ``--part 2/2`` keep sums only; the call after them merges the shards into the report
    that one call scoring every batch itself writes, aggregated-prior and widened bounds included."""
    from types import SimpleNamespace

    import infolm.build
    from tests.test_experiment_arms import experiment

    module = experiment("smim_ptb_table2")
    monkeypatch.setattr(module, "BATCH", 2)
    config = SimpleNamespace(objective={"amim": {}})
    monkeypatch.setattr(infolm.build, "load_run", lambda run, device, full_splits: (config, StubCorpus(), tiny()))
    reports = {}
    for name, parts in (("sharded", 2), ("whole", 0)):
        run = tmp_path / name
        run.mkdir()
        for part in range(1, parts + 1):
            assert module.latent_run_report(run, 20, 0, [1.0, -30.0], True, None, (part, parts)) is None
        assert not module.report_path(run, 0, 20).exists()
        assert len(list(run.glob("*.part-*"))) == parts
        reports[name] = module.latent_run_report(run, 20, 0, [1.0, -30.0], True)
    sharded, whole = reports["sharded"], reports["whole"]
    assert sharded is not None and whole is not None
    assert sharded["bounds"] == pytest.approx(whole["bounds"], rel=1e-12)
    assert sharded["widened"]["1"] == pytest.approx(whole["widened"]["1"], rel=1e-12)
    assert sharded["widened"]["-30"]["binds"] is False  # below the model's floor: q itself, not scored again
    numbers = {k: v for k, v in whole["aggregate_prior"].items() if k != "note"}
    assert {k: sharded["aggregate_prior"][k] for k in numbers} == pytest.approx(numbers, rel=1e-12)
    assert sharded["aggregate_prior"]["components"] == 4
    assert sharded["melbo"] == whole["melbo"]
    # shards scored with other settings are not merged: the report is scored by the call itself
    other = tmp_path / "other"
    other.mkdir()
    module.latent_run_report(other, 20, 0, [1.0], False, None, (1, 1))
    assert module.merged_shards(other, module.report_path(other, 0, 20), {"samples": 20}) is None


def test_the_aggregate_bound_with_neighbour_draws_is_the_same_in_shards_and_in_one_call() -> None:
    """The neighbour proposal's draws follow each batch's seed: shards, one pass and ``aggregate_prior_bound``
    give one number; the own-proposal bounds of the pass are untouched by the extra draws."""
    model = tiny()
    data = sentences()
    prior = aggregate_posterior(model, data[:5], EOS, batch_size=3)
    plain = score_passes(model, data, EOS, 20, 10, len(data), aggregate=prior, seed=1)
    mixed = score_passes(model, data, EOS, 20, 10, len(data), aggregate=prior, seed=1, neighbors=3, neighbor_draws=2)
    assert bounds_section(mixed) == bounds_section(plain)
    section = aggregate_section(mixed, prior.components, 3, 2)
    assert section["neighbors"] == 3 and section["neighbor_draws"] == 2
    assert section["nll_aggregate_prior"] != aggregate_section(plain, prior.components)["nll_aggregate_prior"]
    bound = aggregate_prior_bound(
        model, data, prior, EOS, 20, 10, len(data), seed=BATCH_SEEDS, neighbors=3, neighbor_draws=2
    )
    for key in ("nll_aggregate_prior", "nll_words_aggregate_prior", "neighbors", "neighbor_draws"):
        assert section[key] == pytest.approx(bound[key], rel=1e-12), key
    whole = score_passes(model, data, EOS, 20, 10, 2, aggregate=prior, seed=1, neighbors=3, neighbor_draws=2)
    parts = [
        score_passes(
            model,
            data,
            EOS,
            20,
            10,
            2,
            shard_batches(len(data), 2, part, 2),
            prior,
            seed=1,
            neighbors=3,
            neighbor_draws=2,
        )
        for part in (1, 2)
    ]
    merged = aggregate_section(merge_passes(parts), prior.components, 3, 2)
    assert merged["nll_aggregate_prior"] == pytest.approx(
        aggregate_section(whole, prior.components, 3, 2)["nll_aggregate_prior"], rel=1e-12
    )
