"""The baselines' drivers: the runs they make are the protocol's, and their records read as the
generator reads every record (no model files kept)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.reproduce.protocol import load_protocol, runs_of
from experiments.reproduce.records import load_record
from tests.test_experiment_arms import experiment


def test_the_drivers_make_every_run_their_protocol_reads() -> None:
    page = load_protocol("baselines")
    ngram, zaremba = experiment("baselines_ngram"), experiment("baselines_zaremba")
    assert ngram.protocol_runs() == runs_of(page, records=ngram.FOLDER) == [("kn2", 0), ("kn5", 0)]
    assert {arm for arm, _ in ngram.protocol_runs()} == set(ngram.MODELS)
    assert {arm for arm, _ in zaremba.protocol_runs()} == set(zaremba.CONFIGS)
    assert {c.records for c in page.comparisons} == {ngram.FOLDER, zaremba.FOLDER}


def test_the_bmi_driver_trains_the_protocols_arms_and_seeds() -> None:
    bmi = experiment("bmi_ptb_table2")
    runs = runs_of(load_protocol("bmi"), records=bmi.records_of("converged").name)
    assert bmi.ARMS == ("baseline", "base", "full")  # the control first
    assert {(arm, seed) for arm in bmi.ARMS for seed in bmi.SEEDS} | {(bmi.REAL, s) for s in bmi.SEEDS} == set(runs)


def test_an_ngram_record_holds_the_scores_and_the_jobs_and_no_model(tmp_path: Path, monkeypatch) -> None:
    module = experiment("baselines_ngram")
    calls: list[list[str]] = []

    def fake(command: list[str]) -> tuple[dict, float]:
        calls.append(command)
        if "build" in command:
            out = Path(command[command.index("--out") + 1])
            (module.ROOT / out if not out.is_absolute() else out).write_text("\\data\\\n")
            return {"arpa": str(out), "order": int(command[command.index("--order") + 1]), "ngrams": {}}, 1.5
        split = command[command.index("--split") + 1]
        return {"ppl": {"train": 90.0, "valid": 200.0, "test": 180.0}[split], "nll": 5.0, "tokens": 10}, 0.5

    monkeypatch.setattr(module, "run_json", fake)
    monkeypatch.setattr(module, "git_commit", lambda: "abc1234")
    module.main(["--arms", "kn2", "--records", str(tmp_path / "records"), "--work", str(tmp_path / "work")])
    record = tmp_path / "records" / "kn2-s0"
    assert sorted(p.name for p in record.iterdir()) == [
        "build.json", "eval-test.json", "eval-train.json", "eval-valid.json", "record.json",
    ]  # fmt: skip
    assert not list((tmp_path / "work").iterdir())  # the ARPA file is a model: deleted
    loaded = load_record(record)
    assert (loaded.get("eval-test.ppl"), loaded.get("build.order")) == (180.0, 2)
    assert "arpa" not in json.loads((record / "build.json").read_text())
    assert [job.command.split()[:3] for job in loaded.jobs] == [["infolm", "ngram", "build"]] + [
        ["infolm", "ngram", "eval"]
    ] * 3
    assert {job.commit for job in loaded.jobs} == {"abc1234"}
    assert [c[c.index("--order") + 1] for c in calls if "build" in c] == ["2"]
    calls.clear()  # recorded: not built again unless forced
    module.main(["--arms", "kn2", "--records", str(tmp_path / "records"), "--work", str(tmp_path / "work")])
    assert calls == []


def test_the_ngram_driver_refuses_an_arm_it_cannot_build(monkeypatch) -> None:
    module = experiment("baselines_ngram")
    monkeypatch.setattr(module, "protocol_runs", lambda: [("kn7", 0)])
    with pytest.raises(SystemExit, match="kn7"):
        module.main([])
