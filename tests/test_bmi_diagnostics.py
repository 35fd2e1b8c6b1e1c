"""BMI's diagnostics: ESS and weight on Y* (known values), the held-out pairs' identities, the records of a run."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from infolm.data.corpus import Corpus
from infolm.data.pairs import SentenceIndex
from infolm.evaluation.mi import jsd_mi_lower_bound
from infolm.models.base import MODELS
from infolm.objectives.base import OBJECTIVES, Composite
from infolm.objectives.bmi import BMI, importance_weights
from infolm.objectives.bmi_diagnostics import (
    HeldOutPairs,
    discriminator_accuracy,
    effective_sample_size,
    raml_weight_diagnostics,
    weight_on,
)
from infolm.objectives.mle import MLE, MLEConfig
from tests.conftest import ROOT, run_in_process
from tests.test_bmi import stream_batch, tiny_lstm, topic_corpus


def test_weights_all_on_y_star_give_share_one_and_ess_one() -> None:
    weights = torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    is_true = torch.tensor([[False, True, False, False]])
    assert weight_on(weights, is_true).item() == 1.0
    assert effective_sample_size(weights).item() == 1.0


def test_uniform_weights_give_ess_m_and_the_share_of_marked_candidates() -> None:
    m = 12
    weights = torch.full((3, m), 1.0 / m)
    is_true = torch.zeros(3, m, dtype=torch.bool)
    is_true[:, :3] = True
    assert effective_sample_size(weights).tolist() == pytest.approx([m] * 3)
    assert weight_on(weights, is_true).tolist() == pytest.approx([0.25] * 3)


def test_raml_diagnostics_of_a_flat_reward_are_those_of_the_proposal_alone() -> None:
    """Reward 0 everywhere: Eq. 16's weights are 1/G normalized, so the two ESS and shares agree; and the
    proposal's own values are the hand-computed ones (1/G of offsets 0, 1, 2 of lambda 0.3)."""
    lam = 0.3
    log_g = torch.log(torch.tensor([[lam, lam * (1 - lam), lam * (1 - lam) ** 2]]))
    weights = importance_weights(torch.zeros(3), log_g[0])[None]
    is_true = torch.tensor([[True, False, False]])
    out = raml_weight_diagnostics(weights, log_g, is_true, prefix="x_")
    inverse = torch.tensor([1.0, 1 / 0.7, 1 / 0.49])  # 1/G up to the factor 1/lambda
    expected = inverse / inverse.sum()
    assert out["x_ess"] == pytest.approx(out["x_ess_proposal"]) == pytest.approx(1 / float((expected**2).sum()))
    assert out["x_weight_on_true"] == pytest.approx(out["x_weight_on_true_proposal"]) == pytest.approx(expected[0])


def test_discriminator_accuracy_counts_positives_and_negatives_alike() -> None:
    pos, neg = torch.tensor([1.0, 2.0, -1.0, 3.0]), torch.tensor([-1.0, 5.0])
    assert discriminator_accuracy(pos, neg).item() == pytest.approx((0.75 + 0.5) / 2)


def test_held_out_pairs_are_a_fixed_draw_that_leaves_the_global_generator_alone() -> None:
    corpus = topic_corpus(80)
    index = SentenceIndex.from_corpus(corpus, "train")
    torch.manual_seed(3)
    before = torch.get_rng_state()
    a, b = HeldOutPairs.draw(index, 50, 0.3, seed=1), HeldOutPairs.draw(index, 50, 0.3, seed=1)
    assert torch.equal(torch.get_rng_state(), before)
    for name in ("x", "y", "neg", "tilde", "log_g"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert torch.equal(a.y, a.x + 1) and (a.tilde >= a.y).all()


def topic_text(lines: int, seed: int) -> str:
    """The text of ``test_bmi.topic_corpus``: runs of 4 lines share one of 5 topics."""
    rng = random.Random(seed)
    out = []
    for _block in range(lines // 4):
        topic = rng.randrange(5)
        for _ in range(4):
            out.append(" ".join(f"w{topic}_{rng.randrange(6)}" for _ in range(rng.randint(3, 7))))
    return "\n".join(out) + "\n"


def corpus_with_valid(lines: int = 80) -> Corpus:
    return Corpus.from_texts("topics", "word", {"train": topic_text(lines, 0), "valid": topic_text(lines // 2, 1)})


def build(corpus: Corpus, model: torch.nn.Module, **settings: object) -> BMI:
    term = OBJECTIVES.build("bmi", {"batch_size": 6, "hidden": 16, "valid_pairs": 60, **settings})
    assert isinstance(term, BMI)
    term.setup(corpus, model)
    return term


def test_point_proposal_puts_every_candidate_on_y_star_with_uniform_weights() -> None:
    """lambda 1: Y~ = Y* always, in evaluation mode D scores it as Y* (reward 0): every weight is 1/M."""
    corpus = corpus_with_valid()
    model = tiny_lstm(len(corpus.vocab)).train()
    out = build(corpus, model, lam=1.0).evaluation_metrics(model)
    assert out["bmi_true_drawn"] == 1.0 and out["bmi_weight_on_true"] == pytest.approx(1.0)
    assert out["bmi_ess"] == pytest.approx(6.0) and out["bmi_ess_proposal"] == pytest.approx(6.0)
    assert model.training  # the mode is restored


def test_held_out_scores_are_the_discriminator_on_the_drawn_pairs_in_evaluation_mode() -> None:
    """The Eq. 6 value and the accuracy are D_theta's on phi of the fixed pairs, recomputed here by hand; an
    infinite temperature leaves the proposal's weights; the global random state is not touched."""
    corpus = corpus_with_valid()
    model = tiny_lstm(len(corpus.vocab)).train()
    term = build(corpus, model, beta=1e12)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    out = term.evaluation_metrics(model)
    assert torch.equal(torch.get_rng_state(), before)
    pairs = term.held_out
    assert pairs is not None and term.discriminator is not None
    model.eval()
    with torch.no_grad():
        phi = {k: term.features(model, *pairs.index.batch(getattr(pairs, k))) for k in ("x", "y", "neg")}
        pos, neg = term.discriminator(phi["x"], phi["y"]), term.discriminator(phi["x"], phi["neg"])
    assert out["bmi_disc_valid_eq6"] == pytest.approx(float(jsd_mi_lower_bound(pos, neg)), abs=1e-5)
    assert out["bmi_disc_valid_acc"] == pytest.approx(float(discriminator_accuracy(pos, neg)))
    assert out["bmi_ess"] == pytest.approx(out["bmi_ess_proposal"], rel=1e-6)
    assert out["bmi_weight_on_true"] == pytest.approx(out["bmi_weight_on_true_proposal"], rel=1e-6)
    assert 1.0 <= out["bmi_ess"] <= 6.0 and 0.0 <= out["bmi_weight_on_true"] <= 1.0


def test_no_valid_split_or_no_pairs_means_no_diagnostics_and_a_weight_0_term_is_not_asked() -> None:
    corpus = topic_corpus(40)
    model = tiny_lstm(len(corpus.vocab))
    assert build(corpus, model).evaluation_metrics(model) == {}
    assert build(corpus_with_valid(), model, valid_pairs=0).evaluation_metrics(model) == {}
    off = OBJECTIVES.build("bmi", {"weight": 0.0, "batch_size": 4, "hidden": 8, "valid_pairs": 20})
    composite = Composite({"mle": MLE(MLEConfig()), "bmi": off})
    composite.setup(corpus_with_valid(), model)
    assert composite.evaluation_metrics(model) == {}


def test_phase2_steps_log_the_weight_on_y_star_and_the_proposal_references() -> None:
    corpus = topic_corpus(60)
    model = tiny_lstm(len(corpus.vocab)).train()
    term = build(corpus, model, phase2_start=0)
    term.on_step_end(0, {})
    torch.manual_seed(0)
    metrics = term(model, stream_batch(corpus), None).metrics
    assert 1.0 <= metrics["bmi_raml_ess"] <= 6.0 + 1e-9 and 1.0 <= metrics["bmi_raml_ess_proposal"] <= 6.0 + 1e-9
    assert 0.0 <= metrics["bmi_raml_weight_on_true"] <= 1.0 + 1e-9


FAST = [
    "data.max_train_tokens=3000",
    "data.max_eval_tokens=300",
    "data.batch_size=4",
    "data.bptt=10",
    "model.emb=8",
    "model.hidden=12",
    "model.last_hidden=8",
    "objective.bmi.batch_size=4",
    "objective.bmi.max_sentence_len=12",
    "objective.bmi.hidden=16",
    "objective.bmi.valid_pairs=24",
    "train.max_steps=6",
    "train.eval_every=3",
    "train.log_every=1",
    "train.progress=false",
]


def test_a_run_logs_the_diagnostics_in_every_validation_record_and_trains_as_without_them(tmp_path: Path) -> None:
    """Every validation record of a BMI run carries the diagnostics; measuring changes nothing in training."""
    records = {}
    for pairs in (24, 0):
        run_dir = tmp_path / f"pairs{pairs}"
        result = run_in_process(
            "train", str(ROOT / "configs/ptb/bmi-base.yaml"), f"run.dir={run_dir}", *FAST,
            f"objective.bmi.valid_pairs={pairs}",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        records[pairs] = [json.loads(line) for line in lines]
    valid = [r for r in records[24] if r.get("split") == "valid"]
    assert len(valid) == 2
    names = ("bmi_disc_valid_acc", "bmi_disc_valid_eq6", "bmi_disc_valid_mine", "bmi_weight_on_true",
             "bmi_weight_on_true_proposal", "bmi_ess", "bmi_ess_proposal")  # fmt: skip
    for record in valid:
        assert all(math.isfinite(record[name]) for name in names), record
        assert 1.0 <= record["bmi_ess"] <= 4.0 + 1e-9  # M = 4 pairs per minibatch
    assert not any("bmi_ess" in r for r in records[0])
    losses = {k: [r["loss"] for r in v if "loss" in r and "split" not in r] for k, v in records.items()}
    assert losses[24] == losses[0] and len(losses[0]) == 6  # the same training, step by step


def test_the_awd_mos_model_gives_the_diagnostics() -> None:
    corpus = corpus_with_valid(40)
    torch.manual_seed(0)
    model = MODELS.build(
        "awd-lstm-mos", {"emb": 8, "hidden": 12, "last_hidden": 8, "n_experts": 2}, vocab_size=len(corpus.vocab)
    )
    out = build(corpus, model, lam=1.0).evaluation_metrics(model)
    assert out["bmi_ess"] == pytest.approx(6.0)  # dropout and weight drop off in evaluation mode
