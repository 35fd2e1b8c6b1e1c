"""infolm.sweep: Optuna search over tiny training runs; budget, resume, failed and interrupted trials."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from infolm.errors import InfolmError
from infolm.sweep import load_sweep, run_sweep

ROOT = Path(__file__).resolve().parent.parent
FAST = ["train.max_steps=3", "train.eval_every=3", "train.checkpoint_every=3", "train.progress=false"]


def write_sweep(tmp_path: Path, params: dict, trials: int = 2, **extra) -> Path:
    spec = {
        "base": str(ROOT / "configs" / "tiny.yaml"),
        "dir": str(tmp_path / "sweep"),
        "trials": trials,
        "overrides": FAST,
        "params": params,
        **extra,
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def read_rows(tmp_path: Path) -> list[dict[str, str]]:
    with (tmp_path / "sweep" / "results.csv").open() as f:
        return list(csv.DictReader(f))


def test_two_trials_then_resume_adds_none(tmp_path: Path) -> None:
    params = {
        "optim.lr": {"type": "log_uniform", "low": 1.0, "high": 30.0},
        "model.hidden": {"type": "int", "low": 8, "high": 16},
    }
    path = write_sweep(tmp_path, params)
    summary = run_sweep(path)
    assert summary["finished"] == 2 and summary["complete"] == 2
    rows = read_rows(tmp_path)
    assert [r["trial"] for r in rows] == ["0", "1"] and all(r["state"] == "complete" for r in rows)
    for row in rows:
        assert 1.0 <= float(row["optim.lr"]) <= 30.0 and 8 <= int(row["model.hidden"]) <= 16
        metrics = Path(row["run_dir"]) / "metrics.jsonl"
        assert metrics.exists() and Path(row["run_dir"]).parent == tmp_path / "sweep"
    assert summary["best_valid_loss"] == min(float(r["valid_loss"]) for r in rows)
    assert (tmp_path / "sweep" / "sensitivity.png").stat().st_size > 0
    again = run_sweep(path)  # budget reached: no new trial
    assert again["finished"] == 2 and len(read_rows(tmp_path)) == 2
    assert again["best_params"] == summary["best_params"]


def test_failed_trial_counts_and_is_reported(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, {"train.log_every": {"type": "choice", "values": [0]}}, trials=1)
    summary = run_sweep(path)
    assert summary["finished"] == 1 and summary["complete"] == 0
    (row,) = read_rows(tmp_path)
    assert row["state"] == "fail" and "log_every" in row["error"]


def test_interrupted_trial_is_retried_with_its_parameters(tmp_path: Path) -> None:
    import optuna

    path = write_sweep(tmp_path, {"optim.lr": {"type": "uniform", "low": 1.0, "high": 20.0}}, trials=1)
    (tmp_path / "sweep").mkdir()
    study = optuna.create_study(study_name="sweep", storage=f"sqlite:///{tmp_path / 'sweep' / 'study.db'}")
    cut_off = study.ask()  # left RUNNING, as after a kill
    lr = cut_off.suggest_float("optim.lr", 1.0, 20.0)
    summary = run_sweep(path)
    assert summary["finished"] == 1 and summary["complete"] == 1
    rows = read_rows(tmp_path)
    done = [r for r in rows if r["state"] == "complete"]
    assert float(done[0]["optim.lr"]) == pytest.approx(lr)
    assert Path(done[0]["run_dir"]).name == "trial-0000"  # the cut-off trial's run directory, resumed
    assert [r["state"] for r in rows if r["trial"] == "0"] == ["fail"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"optim.lr": {"type": "normal", "low": 0, "high": 1}}, "type must be one of"),
        ({"optim.lr": {"type": "log_uniform", "low": 0.0, "high": 1.0}}, "low > 0"),
        ({"optim.lr": {"type": "uniform", "low": 2.0, "high": 1.0}}, "must not exceed"),
        ({"model.name": {"type": "choice", "values": []}}, "non-empty"),
        ({"optim.lr": {"type": "uniform", "low": 0.0, "high": 1.0, "bogus": 1}}, "unknown config key"),
        ({}, "params is empty"),
    ],
)
def test_bad_sweep_files_fail_with_one_line(tmp_path: Path, params: dict, message: str) -> None:
    with pytest.raises(InfolmError, match=message):
        load_sweep(write_sweep(tmp_path, params))


def test_add_sweep_parser_wires_the_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse
    import json

    from infolm.sweep import add_sweep_parser

    parser = argparse.ArgumentParser()
    add_sweep_parser(parser.add_subparsers(dest="command", required=True))
    path = write_sweep(tmp_path, {"train.log_every": {"type": "choice", "values": [0]}}, trials=1)
    args = parser.parse_args(["sweep", str(path), "--json"])
    assert args.func(args) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["finished"] == 1  # stdout is the JSON summary alone
    assert "trial 0: " in captured.err  # progress goes to stderr


def test_a_resumed_sweep_proposes_new_points(tmp_path: Path) -> None:
    """Resumed from 2 trials to 3, the sampler does not start over: trial 2 is neither trial 0 nor trial 1."""
    params = {"optim.lr": {"type": "log_uniform", "low": 1.0, "high": 30.0}}
    path = write_sweep(tmp_path, params)
    assert run_sweep(path)["finished"] == 2
    assert run_sweep(path, trials=3)["finished"] == 3
    rows = read_rows(tmp_path)
    lrs = [float(r["optim.lr"]) for r in rows]
    losses = [float(r["valid_loss"]) for r in rows]
    assert len(set(lrs)) == 3 and len(set(losses)) == 3
    fresh = tmp_path / "fresh"  # a fresh sweep of the same seed draws its first trials as before
    fresh.mkdir()
    assert run_sweep(write_sweep(fresh, params, trials=1))["finished"] == 1
    assert float(read_rows(fresh)[0]["optim.lr"]) == lrs[0]
