"""The reproduction pages equal what their records make, and the comparison rule does what it says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from experiments import report
from experiments.reproduce import stats
from experiments.reproduce.protocol import ROOT, ProtocolError, load_pages, runs_of
from experiments.reproduce.records import load_record


def test_committed_pages_equal_what_their_records_make() -> None:
    assert report.drift() == []


def _copy_project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for part in ("experiments/protocols", "experiments/records", "docs"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("*.png"))
    return root


def test_editing_a_recorded_number_is_drift(tmp_path: Path) -> None:
    root = _copy_project(tmp_path)
    assert report.drift(root) == []
    pages = load_pages(root / "experiments" / "protocols")
    comparison = pages["melis"].comparisons[0]
    folder = root / "experiments" / "records" / comparison.records / "mogrifier-s1"
    record = json.loads((folder / "record.json").read_text())
    for entry in record["log"]:
        if entry["key"].startswith("test/"):
            entry["result"]["ppl"] += 1.0
    (folder / "record.json").write_text(json.dumps(record))
    assert "docs/reproductions/melis.md" in report.drift(root)


def test_a_missing_record_says_so(tmp_path: Path) -> None:
    root = _copy_project(tmp_path)
    shutil.rmtree(root / "experiments" / "records" / "melis-ptb-word-converged" / "mogrifier-s2")
    text = report.build(root)[root / "docs" / "reproductions" / "melis.md"]
    assert "No record: `mogrifier-s2`" in text
    assert "n=2" in text  # the mean over the two seeds left says how many it used


def test_paired_t_test_known_value() -> None:
    # differences 1, 2, 3: mean 2, sd 1, t = 2 / (1 / sqrt 3) = 3.464 on 2 df -> two-sided p = 0.07418
    result = stats.paired({0: 2.0, 1: 4.0, 2: 6.0}, {0: 1.0, 1: 2.0, 2: 3.0})
    assert result.diffs == [1.0, 2.0, 3.0]
    assert result.summary.mean == pytest.approx(2.0) and result.summary.sd == pytest.approx(1.0)
    assert result.p == pytest.approx(0.07418, abs=1e-4)


def test_verdict_rule() -> None:
    down = stats.paired({0: 1.0, 1: 1.1, 2: 0.9}, {0: 2.0, 1: 2.0, 2: 2.0})  # arm below control on every seed
    assert stats.verdict(down, sign=-1) == stats.REPRODUCED
    assert stats.verdict(down, sign=+1) == stats.OPPOSITE
    mixed = stats.paired({0: 1.0, 1: 3.0, 2: 1.5}, {0: 2.0, 1: 2.0, 2: 2.0})
    assert stats.verdict(mixed, sign=-1) == stats.NOT_REPRODUCED
    assert stats.verdict(stats.paired({0: 1.0}, {0: 2.0}), sign=-1) == stats.NO_RECORD
    # the paper's sign comes from its two numbers, else from expect, else from the metric's better side
    assert stats.paper_sign(51.0, 54.6, None, "lower") == -1
    assert stats.paper_sign(None, None, "higher", "lower") == 1
    assert stats.paper_sign(None, None, None, "higher") == 1
    # a number compared within a tolerance says when fewer seeds than declared stand behind it
    one = stats.summarize([113.3])
    assert stats.tolerance_verdict(one, 114.5, 0.05, seeds=1) == stats.REPRODUCED
    assert stats.tolerance_verdict(one, 114.5, 0.05, seeds=3) == f"{stats.REPRODUCED} (1 of 3 seeds)"


def test_transforms() -> None:
    assert stats.transform(0.0, "exp") == 1.0
    assert stats.transform(1.0, "bits") == pytest.approx(1.4426950408889634)
    assert stats.transform(0.25, "x100") == 25.0
    assert stats.transform(float("nan"), None) is None
    assert stats.transform("text", None) is None


def test_record_paths_and_epochs(tmp_path: Path) -> None:
    folder = tmp_path / "arm-s0"
    folder.mkdir()
    (folder / "eval-test.json").write_text(json.dumps({"ppl": 90.0, "induced": {"valid": {"kn_ppl": 199.0}}}))
    lines = [
        {"step": 1, "epoch": 1, "split": "valid", "loss": 5.0, "ppl": 148.4},
        {"step": 2, "epoch": 2, "split": "valid", "loss": 4.5, "ppl": 90.0},
        {"step": 3, "epoch": 3, "split": "valid", "loss": 4.7, "ppl": 110.0},
    ]
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    record = load_record(folder)
    assert record.get("eval-test.induced.valid.kn_ppl") == 199.0
    assert record.get("eval-test.missing") is None
    assert record.get("best_valid.ppl") == 90.0 and record.get("valid.ppl") == 110.0
    assert record.last_epoch == 3
    assert record.best_valid_up_to(1, "ppl") == 148.4 and record.best_valid_up_to(3, "ppl") == 90.0


def test_protocols_load_and_name_their_runs() -> None:
    page = load_pages()["melis"]
    assert ("mogrifier", 2) in runs_of(page) and ("lstm", 0) in runs_of(page)


def test_a_bad_protocol_names_its_file(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("paper: x\ncomparisons:\n  - id: c\n    claim: y\n")
    with pytest.raises(ProtocolError, match="broken.yaml 'c': missing 'metrics'"):
        load_pages(tmp_path)


def test_mean_curve_stops_the_full_mean_where_a_seed_ends() -> None:
    """The learning curve's mean over seeds is drawn apart once a seed's run has ended (early stopping):
    past that epoch it is the mean of fewer seeds."""
    from experiments.reproduce.figures import mean_curve
    from experiments.reproduce.records import Record

    def record(name: str, values: list[float]) -> Record:
        curve = [{"epoch": epoch, "split": "valid", "ppl": value} for epoch, value in enumerate(values, 1)]
        return Record(name=name, data={}, curve=curve)

    full, fewer = mean_curve([record("a-s0", [10.0, 8.0, 7.0]), record("a-s1", [12.0, 10.0])], "ppl")
    assert full == [(1.0, 11.0), (2.0, 9.0)]
    assert fewer == [(3.0, 7.0)]
    assert mean_curve([record("a-s0", []), record("a-s1", [5.0])], "ppl") == ([(1.0, 5.0)], [])


def nll_comparison(control: Any, arm: Any) -> Any:
    """A three-seed comparison of one arm with its control on the test NLL in ``runs``."""
    from experiments.reproduce.protocol import Comparison, Metric

    return Comparison(
        id="c",
        title="t",
        claim="c",
        protocol="p",
        records="runs",
        seeds=[0, 1, 2],
        metrics=[Metric(name="nll", path="eval-test.nll")],
        control=control,
        arms=[arm],
    )


def test_two_arms_of_one_run_pair_within_it(tmp_path: Path) -> None:
    from experiments.reproduce.protocol import Arm
    from experiments.reproduce.render import evaluate

    for seed, (static, dynamic) in enumerate([(4.6, 4.4), (4.7, 4.45), (4.65, 4.5)]):
        folder = tmp_path / "runs" / f"lm-s{seed}"
        folder.mkdir(parents=True)
        (folder / "eval-test.json").write_text(json.dumps({"nll": static, "dynamic": {"nll": dynamic}}))
    comparison = nll_comparison(
        Arm(arm="lm", label="static"), Arm(arm="lm", label="dynamic", paths={"nll": "eval-test.dynamic.nll"})
    )
    result = evaluate(comparison, tmp_path)
    assert result.arms[0].paired["nll"].diffs == pytest.approx([-0.2, -0.25, -0.15])
    assert result.arms[0].verdict == stats.REPRODUCED


def test_records_keep_no_weights() -> None:
    weights = [
        path.relative_to(ROOT)
        for path in (ROOT / "experiments" / "records").rglob("*")
        if path.name == "checkpoints" or path.suffix in {".safetensors", ".pt", ".bin", ".ckpt", ".arpa"}
    ]
    assert weights == []


def test_an_arm_may_read_its_own_path_and_a_metric_may_be_scaled_per_token(tmp_path: Path) -> None:
    """An arm whose score file differs (an exact LM beside IWAE-scored latent runs) names its own path for a
    metric; ``times`` and ``over`` turn a per-sentence number into a per-token one; a missing factor is no value."""
    from experiments.reproduce.protocol import load_protocol
    from experiments.reproduce.render import evaluate

    protocols, records = tmp_path / "protocols", tmp_path / "records"
    protocols.mkdir()
    for run, stem, score in (
        ("lm-s0", "eval-test", {"ppl": 100.0}),
        ("lm-s1", "eval-test", {"ppl": 102.0}),
        ("latent-s0", "eval-test-iwae500", {"ppl": 101.0, "mi": 2.0, "sentences": 10, "tokens": 200}),
        ("latent-s1", "eval-test-iwae500", {"ppl": 104.0, "mi": 4.0, "sentences": 10}),  # no token count
    ):
        (records / "runs" / run).mkdir(parents=True)
        (records / "runs" / run / f"{stem}.json").write_text(json.dumps(score))
    per_token = "times: eval-test-iwae500.sentences, over: eval-test-iwae500.tokens"
    (protocols / "p.yaml").write_text(
        "paper: p\ntitle: P\ncomparisons:\n"
        "  - {id: c, claim: x, protocol: y, records: runs, seeds: [0, 1],\n"
        "     metrics: [{name: ppl, path: eval-test-iwae500.ppl},\n"
        f"               {{name: kl, path: eval-test-iwae500.mi, {per_token}, better: higher}}],\n"
        "     control: {arm: lm, paths: {ppl: eval-test.ppl}}, arms: [{arm: latent}]}\n"
    )
    result = evaluate(load_protocol("p", protocols).comparisons[0], records)
    assert result.control is not None and result.control.values["ppl"] == {0: 100.0, 1: 102.0}
    assert result.arms[0].paired["ppl"].diffs == [1.0, 2.0]
    assert result.arms[0].values["kl"] == {0: pytest.approx(0.1)}
    (protocols / "p.yaml").write_text((protocols / "p.yaml").read_text().replace("paths: {ppl:", "paths: {pp:"))
    with pytest.raises(ProtocolError, match="paths names no metric: pp"):
        load_protocol("p", protocols)
    (protocols / "p.yaml").write_text((protocols / "p.yaml").read_text().replace("paths: {pp:", "paper: {ppl, x:"))
    with pytest.raises(ProtocolError, match="paper names no metric: x"):  # a comma inside a flow-mapping key
        load_protocol("p", protocols)


def test_stopping_at_different_epochs_shows_the_matched_epoch_difference(tmp_path: Path) -> None:
    """Where no matched-epoch reading is declared and an arm stopped at another epoch than its control, the
    page still shows the difference of the best validation loss up to the earlier run's last epoch."""
    from experiments.reproduce.protocol import Arm
    from experiments.reproduce.render import evaluate, render_comparison

    curves = {"base": [5.0, 4.8, 4.6, 4.5], "arm": [4.9, 4.75]}  # the arm stopped after epoch 2
    for name, losses in curves.items():
        for seed in (0, 1, 2):
            folder = tmp_path / "runs" / f"{name}-s{seed}"
            folder.mkdir(parents=True)
            lines = [{"epoch": e, "split": "valid", "loss": v + 0.01 * seed} for e, v in enumerate(losses, 1)]
            (folder / "metrics.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
            (folder / "eval-test.json").write_text(json.dumps({"nll": losses[-1]}))
    comparison = nll_comparison(Arm(arm="base", label="base"), Arm(arm="arm", label="arm"))
    text = "\n".join(render_comparison(evaluate(comparison, tmp_path), "p"))
    assert "| arm | 2/4, 2/4, 2/4 | -0.0500 ± 0.0000 |" in text  # 4.75 - 4.80 at epoch 2 on every seed
