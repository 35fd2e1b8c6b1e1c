"""What `infolm train` says when it resumes, reruns, extends or is interrupted; time-triggered checkpoints."""

import shlex
import signal
import time

import torch
from safetensors.torch import load_file

from infolm.training import Trainer
from infolm.training.metrics import read_metrics
from tests.conftest import finish_cli, run_in_process, start_cli

COMMON = ("configs/tiny.yaml", "train.max_steps=8", "train.eval_every=0", "train.checkpoint_every=0")


def final_weights(run_dir):
    return load_file(str(sorted((run_dir / "checkpoints").glob("step-*"))[-1] / "model.safetensors"))


def step_losses(run_dir):
    return [(r["step"], r["loss"]) for r in read_metrics(run_dir / "metrics.jsonl") if "split" not in r]


def test_a_time_triggered_checkpoint_resumes_to_the_uninterrupted_run(tmp_path, monkeypatch):
    """A clock of one minute per step checkpoints at step 3 (train.checkpoint_minutes=3; evaluations, and so the
    other checkpoints, come only at the end); Ctrl-C at step 5 names that checkpoint and the command that resumes,
    which ends where a run without interruption ends, then says it is finished, then extends it."""
    interrupted, straight = tmp_path / "interrupted", tmp_path / "straight"

    def clock(trainer):
        if trainer.step == 5:
            raise KeyboardInterrupt
        return 60.0 * trainer.step

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "clock", clock)
        stopped = run_in_process(
            "train", *COMMON, "train.checkpoint_minutes=3", "train.log_every=1", f"run.dir={interrupted}"
        )
    assert stopped.returncode == 130 and stopped.stdout == ""
    assert sorted(p.name for p in (interrupted / "checkpoints").glob("step-*")) == ["step-00000003"]
    lines = stopped.stderr.strip().splitlines()
    assert lines[0] == "infolm: interrupted at step 5; the newest checkpoint is at step 3"
    prefix = "infolm: resume with: "
    assert lines[1].startswith(prefix) and len(lines) == 2
    command = shlex.split(lines[1].removeprefix(prefix))
    assert command[:3] == ["infolm", "train", "configs/tiny.yaml"] and command[-1] == f"run.dir={interrupted}"

    resumed = run_in_process(*command[1:])
    assert resumed.returncode == 0, resumed.stderr
    assert f"infolm: {interrupted}: resuming from step 3 (epoch 0)\n" in resumed.stderr
    reference = run_in_process(
        "train", *COMMON, "train.checkpoint_minutes=0", "train.log_every=1", f"run.dir={straight}"
    )
    assert reference.returncode == 0 and "resuming" not in reference.stderr
    assert step_losses(interrupted) == step_losses(straight) and len(step_losses(straight)) == 8
    for key, value in final_weights(straight).items():
        assert torch.equal(final_weights(interrupted)[key], value), key

    before = (interrupted / "metrics.jsonl").read_text()
    again = run_in_process(*command[1:])
    assert again.returncode == 0 and (interrupted / "metrics.jsonl").read_text() == before
    assert f"infolm: {interrupted}: already finished at step 8 (epoch 0) (train.max_steps=8)" in again.stderr
    longer = [item.replace("train.max_steps=8", "train.max_steps=10") for item in command[1:]]
    extended = run_in_process(*longer)
    assert extended.returncode == 0, extended.stderr
    assert f"infolm: {interrupted}: extending the run that finished at step 8 (epoch 0) to 10 steps" in extended.stderr


def test_checkpoint_minutes_zero_writes_only_the_usual_checkpoints(tmp_path, monkeypatch):
    monkeypatch.setattr(Trainer, "clock", lambda trainer: 3600.0 * trainer.step)
    result = run_in_process("train", *COMMON, "train.checkpoint_minutes=0", f"run.dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*")) == ["step-00000008"]


def test_sigterm_says_where_the_run_stopped_and_how_to_resume(tmp_path):
    proc = start_cli(
        "train",
        "configs/tiny.yaml",
        "train.max_steps=100000",
        "train.eval_every=0",
        "train.checkpoint_every=2",
        f"run.dir={tmp_path}",
    )
    checkpoint = tmp_path / "checkpoints" / "step-00000002"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not checkpoint.exists():
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    result = finish_cli(proc)
    assert result.returncode == 143, result.stderr
    first, second = result.stderr.strip().splitlines()[-2:]
    assert first.startswith("infolm: terminated (SIGTERM) at step ") and "the newest checkpoint is at step " in first
    assert second.startswith("infolm: resume with: infolm train configs/tiny.yaml train.max_steps=100000 ")
    assert second.endswith(f"train.checkpoint_every=2 run.dir={tmp_path}")
