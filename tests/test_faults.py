"""Faults a user meets, each tried through the CLI: one clear line on stderr, a non-zero exit where the
run cannot go on, no traceback, and nothing on disk lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import ROOT, finish_cli, run_cli, run_in_process, start_cli
from tests.test_cli import assert_one_line_error


def test_exploding_loss_stops_with_a_clear_error_and_keeps_the_checkpoints(tmp_path):
    """lr 1e30 on tiny.yaml: the loss reaches ~1e29 per token without becoming NaN; the divergence rule
    (optim/divergence.py) stops the run instead of letting it end as a success."""
    run = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/tiny.yaml",
        f"run.dir={run}",
        "optim.lr=1e30",
        "train.checkpoint_every=1",
        "train.eval_every=1",
        "train.log_every=1",
    )
    assert_one_line_error(result, "training diverged at step 4: loss")
    assert "above 2 x 9.21 (the objective's loss scale) = 18.42 for 3 steps" in result.stderr  # mle: ln|V|
    assert "keeps its checkpoints up to step-00000001" in result.stderr
    # Only the checkpoint written before the loss left the bound; it and the log are intact.
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best", "step-00000001"]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "split" not in r]
    assert [r["step"] for r in steps] == [1, 2, 3] and steps[0]["loss"] < 18.42 < 1e28 < steps[1]["loss"]
    evaluated = run_in_process("evaluate", str(run), "--json")
    assert evaluated.returncode == 0, evaluated.stderr


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("run:\n  dir: x\ndata:\n  name: [ptb\n", "line 5, column 1"),
        ("run:\n  dir: x\n  seed: 0\n bad: 1\n", "line 4, column 2"),
        ("optim: lr: 3\n", "line 1, column 10"),
    ],
)
def test_malformed_yaml_names_file_line_and_column(tmp_path, text, where):
    config = tmp_path / "broken.yaml"
    config.write_text(text)
    run = tmp_path / "run"
    result = run_cli("train", str(config), f"run.dir={run}")
    assert_one_line_error(result, f"cannot parse config {config}: {where}: ")
    assert not run.exists() and config.read_text() == text


def test_damaged_newest_checkpoint_resumes_from_the_newest_intact_one(tmp_path):
    """The newest checkpoint is truncated: resume warns, keeps it aside, and ends where an uninterrupted
    run ends."""
    args = ("train", "configs/tiny.yaml", "train.max_steps=12", "train.checkpoint_every=4", "train.keep_checkpoints=3")
    run = tmp_path / "run"
    assert run_in_process(*args[:2], "train.max_steps=8", *args[3:], f"run.dir={run}").returncode == 0
    newest = run / "checkpoints/step-00000008"
    weights = newest / "raw_model.safetensors"
    weights = weights if weights.exists() else newest / "model.safetensors"
    damaged = weights.read_bytes()[:100]
    weights.write_bytes(damaged)
    resumed = start_cli(*args, f"run.dir={run}")
    reference = tmp_path / "reference"  # the uninterrupted run, here while the damaged one resumes
    try:
        assert run_in_process(*args, f"run.dir={reference}").returncode == 0
    finally:
        result = finish_cli(resumed)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in result.stderr
    assert lines[0].startswith(f"infolm: warning: checkpoint {newest} is damaged (")
    assert lines[1] == f"infolm: {run}: resuming from step 4 (epoch 0)"
    assert "kept as damaged-step-00000008" in lines[0]
    kept = run / "checkpoints/damaged-step-00000008" / weights.name
    assert kept.read_bytes() == damaged  # never deleted
    assert _without_timing(run) == _without_timing(reference)  # the log was cut back to step 4 and regrown
    from safetensors.torch import load_file

    a = load_file(run / "checkpoints/step-00000012/model.safetensors")
    b = load_file(reference / "checkpoints/step-00000012/model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _without_timing(run):
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "elapsed")} for r in records]


def test_second_train_on_a_run_directory_is_refused_and_a_killed_holder_blocks_nothing(tmp_path):
    from infolm.training.run_lock import OWNER

    run = tmp_path / "run"
    args = ("configs/tiny.yaml", f"run.dir={run}", "train.max_steps=100000", "data.max_train_tokens=2000000")
    holder = subprocess.Popen(
        [sys.executable, "-m", "infolm", "train", *args, "train.checkpoint_every=5"],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", "INFOLM_PROGRESS_SECONDS": "1e9"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def wait_for(done):
        deadline = time.monotonic() + 240
        while not done() and time.monotonic() < deadline:
            assert holder.poll() is None, holder.stderr.read() if holder.stderr else ""
            time.sleep(0.05)

    try:
        # The owner file is written once the lock is held: the second process starts while the holder
        # trains on, and finds the lock held when it gets there.
        wait_for((run / OWNER).exists)
        second = run_cli("train", *args, "train.checkpoint_every=5")
        assert_one_line_error(second, f"run directory {run} is in use by another infolm process (pid {holder.pid}")
        wait_for(lambda: bool(list((run / "checkpoints").glob("step-*"))))
        assert list((run / "checkpoints").glob("step-*")), "the first run wrote no checkpoint in time"
    finally:
        holder.kill()  # SIGKILL: the lock file stays behind, its lock does not
        holder.wait()
    assert (run / ".lock").exists()
    resumed = run_in_process("train", *args[:2], "train.max_steps=5", *args[3:], "train.checkpoint_every=5")
    assert resumed.returncode == 0, resumed.stderr  # takes the stale lock at once and resumes


def test_a_checkpoint_lacking_weights_is_refused_on_resume_and_kept(tmp_path):
    """An intact checkpoint that lacks a weight of the model (written by a model with fewer parameters) is
    no damage to resume past: resume refuses in one line naming the weight, and sets nothing aside."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    run = tmp_path / "run"
    args = ("train", "configs/tiny.yaml", "train.checkpoint_every=4", f"run.dir={run}")
    assert run_in_process(*args, "train.max_steps=4").returncode == 0
    newest = run / "checkpoints/step-00000004"
    weights = newest / "raw_model.safetensors"
    weights = weights if weights.exists() else newest / "model.safetensors"
    tensors = load_file(weights)
    with safe_open(weights, framework="pt") as handle:
        aliases = handle.metadata()  # tied weights are stored once, their other names kept here
    dropped = sorted(name for name in tensors if name not in aliases.values())[-1]
    save_file({name: tensor for name, tensor in tensors.items() if name != dropped}, weights, metadata=aliases)
    result = run_cli(*args, "train.max_steps=8")
    assert_one_line_error(result, f"checkpoint {newest} lacks 1 weight(s) of this model ({dropped})")
    assert newest.is_dir() and not list((run / "checkpoints").glob("damaged-*"))
