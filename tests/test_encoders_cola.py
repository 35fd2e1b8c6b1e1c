"""The CoLA encoders driver: arm names to recipes, the protocols' arms, and one record per (arm, seed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments import encoders_cola as driver
from experiments.reproduce.jobs import JobLog
from experiments.reproduce.records import load_record


def test_arm_names_map_to_their_recipes() -> None:
    infoword = driver.recipe("infoword-0.6")
    assert infoword.config == "configs/ptb/infoword.yaml" and infoword.overrides == ["objective.dim.weight=0.6"]
    assert infoword.finetune == "base" and infoword.encoder == "infoword-0.6"
    imm = driver.recipe("bert-mlm-imm")
    assert (imm.encoder, imm.config, imm.finetune) == ("bert-mlm", "configs/ptb/bert-mlm.yaml", "imm")
    assert driver.recipe("bert-mlm-base").encoder == imm.encoder  # the three variants share a pretraining run
    with pytest.raises(SystemExit):
        driver.recipe("bert-large")


def test_the_protocols_arms_are_trained_not_the_selection() -> None:
    arms, seeds = driver.protocol_runs()
    assert arms[0] == "bert-nce" and "infoword-1.0" in arms and "bert-mlm-imm" in arms
    assert "infoword-selected" not in arms and len(seeds) >= 3
    for name in arms:
        driver.recipe(name)  # every arm the protocols name has a recipe


def _fake_runs(tmp_path: Path) -> tuple[Path, Path]:
    encoder = tmp_path / "pretrain" / "bert-mlm-s0"
    (encoder / "checkpoints" / "best").mkdir(parents=True)
    (encoder / "checkpoints" / "best" / "model.safetensors").write_bytes(b"weights")
    (encoder / "config.yaml").write_text("run: {seed: 0}\n")
    (encoder / "metrics.jsonl").write_text(json.dumps({"step": 5, "epoch": 1, "split": "valid", "loss": 6.2}) + "\n")
    (encoder / "train-summary.json").write_text(json.dumps({"step": 5}))
    (encoder / "vocab.json").write_text("{}")
    tuned = tmp_path / "finetune" / "bert-mlm-imm-s0"
    for seed in (1, 2):
        (tuned / f"seed-{seed}").mkdir(parents=True)
        (tuned / f"seed-{seed}" / "config.yaml").write_text(f"run: {{seed: {seed}}}\n")
        (tuned / f"seed-{seed}" / "metrics.jsonl").write_text(json.dumps({"split": "valid", "mcc": 0.1}) + "\n")
    summary = {"seeds": [1, 2], "summary": {"test": {"mcc": {"mean": 0.12}}, "valid": {"mcc": {"mean": 0.1}}}}
    (tuned / "summary.json").write_text(json.dumps(summary))
    return encoder, tuned


def test_a_record_keeps_both_runs_small_files_and_jobs_and_no_weights(tmp_path: Path) -> None:
    encoder, tuned = _fake_runs(tmp_path)
    jobs = JobLog(tmp_path, dry_run=False)
    lines = [
        {"run": str(encoder), "command": "infolm train", "rc": 0, "wall_s": 10.0, "commit": "abc", "machine": "m"},
        {"run": str(tuned), "command": "infolm finetune", "rc": 0, "wall_s": 5.0, "commit": "abc", "machine": "m"},
        {"run": str(tuned), "command": "infolm finetune (failed)", "rc": 1, "wall_s": 1.0},
    ]
    jobs.path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    target = driver.archive(driver.recipe("bert-mlm-imm"), 0, encoder, tuned, tmp_path / "records", jobs)
    assert target == tmp_path / "records" / "bert-mlm-imm-s0"
    names = sorted(path.name for path in target.iterdir())
    assert names == [
        "config.yaml",
        "finetune-config.yaml",
        "finetune-seed-1.jsonl",
        "finetune-seed-2.jsonl",
        "finetune-summary.json",
        "metrics.jsonl",
        "record.json",
        "train-summary.json",
    ]
    known = json.loads((target / "record.json").read_text())
    assert [job["command"] for job in known["jobs"]] == ["infolm finetune", "infolm train"]  # fine-tuning first
    assert known["source"] == str(encoder.resolve()) and known["finetune_seeds"] == [1, 2]
    record = load_record(target)
    assert record.get("finetune-summary.summary.test.mcc.mean") == 0.12
    assert record.jobs[0].command == "infolm finetune" and record.jobs[0].wall_s == 5.0
    assert not (tuned / ".record").exists()  # the link it archived through is gone
