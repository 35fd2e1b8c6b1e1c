"""The reproduction pages equal what their records make, and the comparison rule does what it says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

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
