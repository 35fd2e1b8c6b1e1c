"""The pretraining-budget driver: one run per (arm, epochs, seed), the epochs as the only budget, archived
with its job and validation curve, recorded runs skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments import encoders_budget as driver
from experiments.reproduce.jobs import JobLog
from experiments.reproduce.records import load_record


def fake_training(commands: list[list[str]]):
    """``JobLog.run`` that writes what ``infolm train`` leaves in a run directory instead of training."""

    def run(self: JobLog, run: Path, command: list[str], driver: str) -> str:
        commands.append(command)
        if "evaluate" in command:
            return "log line\n" + json.dumps({"split": "valid", "mlm_accuracy_prior": 0.5}) + "\n"
        epochs = int(next(arg for arg in command if arg.startswith("train.epochs=")).split("=")[1])
        run.mkdir(parents=True)
        (run / "config.yaml").write_text("run: {}\n")
        (run / "checkpoints").mkdir()
        (run / "checkpoints" / "model.pt").write_bytes(b"weights")
        lines = [
            {"step": 316 * e, "epoch": e, "split": "valid", "loss": 9.0 - e / 10, "accuracy": 0.01 * e}
            for e in range(1, epochs + 1)
        ]
        (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        with self.path.open("a") as handle:
            handle.write(
                json.dumps(
                    {
                        "run": str(run),
                        "command": " ".join(command),
                        "rc": 0,
                        "wall_s": 1.5,
                        "commit": "abc",
                        "machine": "m",
                    }
                )
                + "\n"
            )
        return "log line\n" + json.dumps({"step": 316 * epochs, "epoch": epochs}) + "\n"

    return run


def test_each_budget_is_its_own_run_and_record_without_weights(tmp_path: Path, monkeypatch) -> None:
    commands: list[list[str]] = []
    monkeypatch.setattr(JobLog, "run", fake_training(commands))
    args = ["--out", str(tmp_path / "runs"), "--records", str(tmp_path / "records"), "--epochs", "4", "2"]
    driver.main(args)
    trained, scored = commands[0::2], commands[1::2]  # each run trained, then its selected weights scored
    assert [c[c.index("train") + 1] for c in trained] == ["configs/ptb/bert-nce.yaml"] * 2
    assert [next(a for a in c if a.startswith("train.epochs=")) for c in trained] == [
        "train.epochs=2",
        "train.epochs=4",
    ]
    assert all("train.max_steps=null" in c and "task.extra_train=[tinyshakespeare]" in c for c in trained)
    assert [c[3:] for c in scored] == [
        ["evaluate", str(tmp_path / "runs" / f"bert-nce-e{e}-s0"), "--split", "valid", "--json"] for e in (2, 4)
    ]
    target = tmp_path / "records" / "bert-nce-e4-s0"
    assert sorted(p.name for p in target.iterdir()) == [
        "config.yaml",
        "eval-valid.json",
        "metrics.jsonl",
        "record.json",
        "train-summary.json",
    ]
    record = load_record(target)
    assert record.get("valid.accuracy") == pytest.approx(0.04)  # the last evaluation: the run's end
    assert record.get("eval-valid.mlm_accuracy_prior") == 0.5
    assert record.jobs[0].wall_s == 1.5 and "train.epochs=4" in record.jobs[0].command
    assert json.loads((target / "record.json").read_text())["arm"] == "bert-nce-e4"
    driver.main(args)  # recorded: nothing runs again
    assert len(commands) == 4


def test_a_fine_tuning_variant_is_refused_with_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="names a fine-tuning variant"):
        driver.main(["--out", str(tmp_path), "--arms", "bert-mlm-imm", "--dry-run"])
    with pytest.raises(SystemExit, match="positive numbers"):
        driver.main(["--out", str(tmp_path), "--epochs", "0", "--dry-run"])
