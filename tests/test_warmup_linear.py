"""The warmup-linear schedule (BERT, InfoWord): the rate at known updates, the rate the optimizer
really uses in a run, a run killed mid-way that resumes the schedule bit for bit, bad settings."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from infolm.errors import InfolmError
from infolm.optim.factory import LRSchedule
from infolm.optim.warmup import warmup_linear_factor, warmup_steps_of
from infolm.training.metrics import read_metrics
from tests.conftest import run_cli, run_in_process, train_killed_after_checkpoint


def test_rate_at_known_updates():
    total, warmup = 100, 10
    assert warmup_linear_factor(0, total, warmup) == 0.0  # the first update
    assert warmup_linear_factor(5, total, warmup) == 0.5
    assert warmup_linear_factor(10, total, warmup) == 1.0  # end of warmup: the peak
    assert warmup_linear_factor(55, total, warmup) == 0.5  # midway through the decay
    assert warmup_linear_factor(99, total, warmup) == pytest.approx(1 / 90)  # the last update
    assert warmup_linear_factor(100, total, warmup) == 0.0
    assert warmup_linear_factor(0, total, 0) == 1.0  # no warmup: decay from the peak
    assert warmup_steps_of(247, 0, 0.1) == 25  # 10% of 247 updates, rounded up
    assert warmup_steps_of(247, 30, 0.0) == 30


def schedule(**settings):
    from infolm.config import OptimConfig

    return LRSchedule(OptimConfig(name="adamw", lr=1e-3, schedule="warmup-linear", **settings))


def test_schedule_sets_the_rate_from_completed_updates():
    lr = schedule(warmup_fraction=0.1)
    lr.set_horizon(50)
    rates = []
    for step in range(50):
        lr.before_update(step)
        rates.append(lr.lr)
    assert rates[0] == 0.0 and rates[5] == pytest.approx(1e-3) and rates[-1] == pytest.approx(1e-3 / 45)
    assert max(rates) == rates[5] and all(a < b for a, b in zip(rates[:5], rates[1:6], strict=True))
    assert all(a > b for a, b in zip(rates[5:], rates[6:], strict=False))
    lr.reset(2e-3)  # a new phase: the peak changes, the shape stays
    lr.before_update(5)
    assert lr.lr == pytest.approx(2e-3)


def small_run_config(tmp_path, **optim):
    config = tmp_path / "config.yaml"
    sections = {
        "run": {"device": "cpu"},
        "data": {
            "name": "ptb",
            "batch_size": 8,
            "eval_batch_size": 4,
            "bptt": 20,
            "max_train_tokens": 2000,
            "max_eval_tokens": 600,
        },
        "model": {"name": "lstm", "emb": 16, "hidden": 16, "layers": 1},
        "objective": {"mle": {}},
        "optim": {"name": "adam", "lr": 0.01, "schedule": "warmup-linear", **optim},
        "train": {"epochs": 10, "max_steps": 24, "eval_every": 8, "checkpoint_every": 3, "log_every": 1},
    }
    config.write_text(json.dumps(sections))  # JSON is YAML
    return config


def test_a_run_uses_the_rate_and_resumes_it_bit_for_bit_after_a_kill(tmp_path):
    config = small_run_config(tmp_path, warmup_steps=6)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    with train_killed_after_checkpoint(str(config), run_dir=killed, step=12):
        result = run_in_process("train", str(config), f"run.dir={straight}")
        assert result.returncode == 0, result.stderr
    steps = [r for r in read_metrics(straight / "metrics.jsonl") if "lr" in r]
    # The record of step s carries the rate of update s - 1 (0-based): 24 updates, warmup 6.
    assert [r["step"] for r in steps] == list(range(1, 25))
    for r in steps:
        assert r["lr"] == pytest.approx(0.01 * warmup_linear_factor(r["step"] - 1, 24, 6))
    assert steps[6]["lr"] == pytest.approx(0.01) and steps[-1]["lr"] == pytest.approx(0.01 / 18)

    assert max(r["step"] for r in read_metrics(killed / "metrics.jsonl")) < 24, "finished before the kill"
    result = run_in_process("train", str(config), f"run.dir={killed}")
    assert result.returncode == 0, result.stderr

    def final(run_dir):
        return load_file(str(sorted((run_dir / "checkpoints").glob("step-*"))[-1] / "model.safetensors"))

    a, b = final(straight), final(killed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    timeless = lambda rows: [{k: v for k, v in r.items() if k not in ("tokens_per_s", "elapsed")} for r in rows]  # noqa: E731
    assert timeless(read_metrics(straight / "metrics.jsonl")) == timeless(read_metrics(killed / "metrics.jsonl"))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("optim.warmup_fraction=1.5", "optim.warmup_fraction must be in [0, 1), got 1.5"),
        ("optim.warmup_steps=-1", "optim.warmup_steps must be non-negative"),
        ("optim.warmup_steps=24", "optim.warmup_steps (24) must be less than train.max_steps (24)"),
        ("optim.schedule=warmup-lin", "optim.schedule must be one of"),
    ],
)
def test_bad_settings_are_refused_with_one_line(tmp_path, override, message):
    config = small_run_config(tmp_path)
    run_dir = tmp_path / "run"
    result = run_cli("train", str(config), f"run.dir={run_dir}", override)
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr, result.stderr
    assert not run_dir.exists()


def test_both_warmups_or_a_warmup_without_the_schedule_are_refused():
    from infolm.config import OptimConfig

    with pytest.raises(InfolmError, match="both set"):
        OptimConfig(schedule="warmup-linear", warmup_steps=10, warmup_fraction=0.1)
    with pytest.raises(InfolmError, match="need optim.schedule=warmup-linear"):
        OptimConfig(schedule="step", warmup_fraction=0.1)


def test_a_warmup_longer_than_the_epochs_is_refused():
    lr = schedule(warmup_steps=30)
    with pytest.raises(InfolmError, match=r"warmup_steps \(30\) must be less than the run's total updates \(20\)"):
        lr.set_horizon(20)


def test_a_warmup_longer_than_the_epochs_is_refused_and_leaves_no_run(tmp_path):
    config = small_run_config(tmp_path, warmup_steps=1000)  # max_steps 24 would refuse it at once
    run_dir = tmp_path / "run"
    result = run_cli("train", str(config), f"run.dir={run_dir}", "train.max_steps=null", "train.epochs=1")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "optim.warmup_steps (1000) must be less than the run's total updates" in result.stderr
    assert not (run_dir / "config.yaml").exists() and {p.name for p in run_dir.iterdir()} <= {".lock", ".lock.owner"}
    fixed = ["train.max_steps=null", "train.epochs=1", "optim.warmup_steps=2", "train.eval_every=0"]
    result = run_in_process("train", str(config), f"run.dir={run_dir}", *fixed)
    assert result.returncode == 0, result.stderr
