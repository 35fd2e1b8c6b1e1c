"""Trainer: metrics, reruns, early stopping, bf16, data parallel, divergence restarts, init_from, allocator."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from infolm.training.metrics import read_metrics
from tests.conftest import ROOT, run_cli, run_cli_concurrently, run_in_process


def final_weights(run_dir):
    ckpts = sorted((run_dir / "checkpoints").glob("step-*"))
    return load_file(str(ckpts[-1] / "model.safetensors"))


def test_metrics_log_steps_terms_and_evaluations(tmp_path):
    result = run_in_process(
        "train",
        "configs/tiny.yaml",
        f"run.dir={tmp_path}",
        "train.max_steps=6",
        "train.eval_every=3",
        "train.log_every=2",
        "objective.ar.weight=2.0",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    rows = read_metrics(tmp_path / "metrics.jsonl")
    steps = [r for r in rows if "split" not in r]
    evals = [r for r in rows if r.get("split") == "valid"]
    assert [r["step"] for r in steps] == [2, 4, 6] and [r["step"] for r in evals] == [3, 6]
    assert all({"mle", "ar", "loss", "lr", "grad_norm", "tokens_per_s"} <= r.keys() for r in steps)
    assert all(abs(r["loss"] - (r["mle"] + 2.0 * r["ar"])) < 1e-4 for r in steps)
    summary = json.loads(result.stdout)
    assert summary["step"] == 6
    config = (tmp_path / "config.yaml").read_text()
    assert "ar:" in config


def test_rerun_of_a_finished_run_changes_nothing(tmp_path):
    args = ("train", "configs/tiny.yaml", f"run.dir={tmp_path}", "train.max_steps=4", "train.eval_every=2")
    assert run_in_process(*args).returncode == 0
    before = (tmp_path / "metrics.jsonl").read_text()
    assert run_cli(*args).returncode == 0
    assert (tmp_path / "metrics.jsonl").read_text() == before


def test_a_run_killed_before_its_first_checkpoint_starts_its_log_afresh(tmp_path):
    args = ("train", "configs/tiny.yaml", f"run.dir={tmp_path}", "train.max_steps=4", "train.eval_every=2")
    args += ("train.log_every=1",)
    assert run_in_process(*args).returncode == 0
    first = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "metrics.jsonl")]
    shutil.rmtree(tmp_path / "checkpoints")  # as if killed before any checkpoint was written
    assert run_in_process(*args).returncode == 0
    again = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "metrics.jsonl")]
    assert again == first and len(first) == 6  # the same records, once
    aside = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "metrics.jsonl.attempt-1")]
    assert aside == first  # the earlier attempt's log is kept beside, never deleted
    before = (tmp_path / "metrics.jsonl").stat().st_mtime_ns
    assert run_in_process(*args).returncode == 0  # a finished run resumed: nothing to drop, log untouched
    assert (tmp_path / "metrics.jsonl").stat().st_mtime_ns == before


def test_early_stopping(tmp_path):
    result = run_in_process(
        "train",
        "configs/tiny.yaml",
        f"run.dir={tmp_path}",
        "optim.lr=0",
        "train.max_steps=40",
        "train.eval_every=2",
        "train.early_stopping=2",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    evals = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r.get("split") == "valid"]
    assert len(evals) == 3  # the first sets the best, two more without improvement stop the run
    summary = json.loads(result.stdout)
    assert summary["step"] == 6 and summary["early_stopped"] is True


def test_a_larger_limit_extends_a_finished_run_and_early_stopping_is_final(tmp_path):
    """A run that ended at its step limit goes on when the limit grows, to what one longer run gives;
    a run that stopped early stays stopped."""
    common = ("train", "configs/tiny.yaml", "train.eval_every=2")
    extended, straight, stopped = tmp_path / "extended", tmp_path / "straight", tmp_path / "stopped"
    at_limit = run_in_process(*common, f"run.dir={extended}", "train.max_steps=4", "--json")
    assert at_limit.returncode == 0 and json.loads(at_limit.stdout)["early_stopped"] is False
    assert run_in_process(*common, f"run.dir={extended}", "train.max_steps=8").returncode == 0
    assert run_in_process(*common, f"run.dir={straight}", "train.max_steps=8").returncode == 0
    valid = {
        run: [r for r in read_metrics(run / "metrics.jsonl") if r.get("split") == "valid"]
        for run in (extended, straight)
    }
    assert [r["step"] for r in valid[extended]] == [2, 4, 6, 8]
    assert [r["loss"] for r in valid[extended]] == [r["loss"] for r in valid[straight]]
    for key, value in final_weights(straight).items():
        assert torch.equal(final_weights(extended)[key], value), key

    early = ("optim.lr=0", "train.early_stopping=2")
    assert run_in_process(*common, f"run.dir={stopped}", "train.max_steps=40", *early).returncode == 0
    before = (stopped / "metrics.jsonl").read_text()
    assert run_in_process(*common, f"run.dir={stopped}", "train.max_steps=80", *early).returncode == 0
    assert (stopped / "metrics.jsonl").read_text() == before
    again = run_in_process(*common, f"run.dir={stopped}", "train.max_steps=80", *early, "--json")
    assert json.loads(again.stdout)["early_stopped"] is True  # a resumed, spent run still says why it ended


def test_bf16_autocast_trains(tmp_path):
    result = run_in_process(
        "train",
        "configs/tiny.yaml",
        f"run.dir={tmp_path}",
        "train.precision=bf16",
        "train.max_steps=6",
        "train.eval_every=6",
    )
    assert result.returncode == 0, result.stderr
    evals = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r.get("split") == "valid"]
    assert evals and 0 < evals[-1]["ppl"] < 20000


@pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")
def test_two_process_data_parallel_equals_one_process(tmp_path):
    """Without dropout, 2 gloo ranks with half the rows each take the same steps as one process."""
    common = ["configs/tiny.yaml", "train.max_steps=4", "train.eval_every=4", "train.checkpoint_every=4"]
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "infolm",
        "train",
        *common,
        f"run.dir={ddp}",
    ]
    torchrun = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:  # the one-process run here while torchrun starts its ranks
        assert run_in_process("train", *common, f"run.dir={single}").returncode == 0
        stdout, stderr = torchrun.communicate(timeout=300)
    finally:
        if torchrun.poll() is None:
            torchrun.kill()
            torchrun.wait()
    assert torchrun.returncode == 0, stderr[-2000:]
    assert stdout.count("best_valid_loss:") == 1  # rank 0 alone prints the summary
    a, b = final_weights(single), final_weights(ddp)
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5)


def test_divergence_restarts_then_gives_up(tmp_path):
    """With restarts on, a diverging run restarts from the best weights with lr x 0.9, then stops clearly."""
    result = run_cli(
        "train",
        "configs/tiny.yaml",
        f"run.dir={tmp_path}",
        "optim.lr=1e5",
        "train.clip=0",
        "train.max_steps=30",
        "train.divergence={enabled: true, max_restarts: 2}",
    )
    assert result.returncode != 0
    assert "training diverged 3 times" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    events = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r.get("event") == "divergence_restart"]
    assert [e["restarts"] for e in events] == [1, 2]
    assert events[1]["lr_scale"] == pytest.approx(0.81)


def test_init_from_starts_where_another_run_ended(tmp_path):
    """Fine-tuning phase: a run initialized from another starts from its best weights."""
    base = tmp_path / "base"
    args = ("train", "configs/tiny.yaml", f"run.dir={base}", "train.max_steps=6", "train.eval_every=6")
    assert run_in_process(*args).returncode == 0
    tuned = tmp_path / "tuned"
    result = run_in_process(
        "train",
        "configs/tiny.yaml",
        f"run.dir={tuned}",
        f"run.init_from={base}",
        "train.max_steps=1",
        "train.eval_every=1",
        "optim.lr=0",
        "optim.average={name: tail}",
    )
    assert result.returncode == 0, result.stderr
    a = load_file(str(base / "checkpoints/best/model.safetensors"))
    b = final_weights(tuned)
    assert all(torch.equal(a[k], b[k]) for k in a)  # lr 0: the weights are the initial ones
    bad = run_in_process("train", "configs/tiny.yaml", f"run.dir={tmp_path / 'x'}", f"run.init_from={tmp_path / 'no'}")
    assert bad.returncode != 0 and "not an infolm run" in bad.stderr


def test_keep_freed_memory_changes_no_number(tmp_path):
    """The glibc allocator setting (run.keep_freed_memory) is about speed only: same weights, same log."""
    runs = {keep: tmp_path / f"keep-{keep}" for keep in (True, False)}
    args = ["train.max_steps=6", "train.eval_every=3", "train.checkpoint_every=6", "train.log_every=1"]
    commands = [
        ["train", "configs/tiny.yaml", f"run.dir={run_dir}", f"run.keep_freed_memory={keep}", *args]
        for keep, run_dir in runs.items()
    ]  # each in its own process: the setting is the process's
    for result in run_cli_concurrently(*commands):
        assert result.returncode == 0, result.stderr
    a, b = final_weights(runs[True]), final_weights(runs[False])
    assert all(torch.equal(a[key], b[key]) for key in a)
    logs = [read_metrics(runs[keep] / "metrics.jsonl") for keep in (True, False)]
    timeless = [[{k: v for k, v in r.items() if k not in ("tokens_per_s", "elapsed")} for r in log] for log in logs]
    assert timeless[0] == timeless[1]


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None, reason="glibc")
def test_keep_freed_memory_applies_on_glibc():
    from infolm.training.allocator import keep_freed_memory

    assert keep_freed_memory()
