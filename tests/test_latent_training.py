"""`infolm train` on the synthetic task (thesis Sec. 5.7.1) end to end, and one-line refusals of bad input."""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import run_cli, run_in_process

SHORT = ["train.max_steps=4", "train.eval_every=4", "task.valid_samples=3", "train.log_every=2"]


def test_synthetic_run_and_its_frontier(tmp_path) -> None:
    run = tmp_path / "run"
    result = run_in_process("train", "configs/synthetic/cpu-gaussian.yaml", f"run.dir={run}", *SHORT)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    final = [r for r in records if "mi" in r][-1]
    # the split holds every symbol once: its NLL cannot lie below the entropy ln 1,000
    assert final["loss"] >= math.log(1000) - 1e-3
    result = run_cli("pareto", str(run), "--out", str(tmp_path / "pareto"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "pareto" / "pareto.csv").read_text().count("\n") == 2


@pytest.mark.parametrize(  # the other refusals are unit-tested in test_latent_objectives.py
    "overrides,message",
    [
        (["objective.mi-kl.estimator=vimco", "objective.mi-kl.samples=1"], "vimco needs at least 2 samples"),
        (["model.latent=categorical"], "with categorical latents use reinforce or vimco"),
    ],
)
def test_bad_input_is_one_line(tmp_path, overrides, message) -> None:
    result = run_cli("train", "configs/synthetic/cpu-gaussian.yaml", f"run.dir={tmp_path / 'run'}", *SHORT, *overrides)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_renyi_alpha_one_is_refused(tmp_path) -> None:
    from tests.conftest import ROOT

    config = tmp_path / "renyi.yaml"
    body = (ROOT / "configs/synthetic/mi-renyi-dreg16.yaml").read_text().replace("alpha: 2.0", "alpha: 1.0")
    config.write_text(body)
    result = run_cli("train", str(config), f"run.dir={tmp_path / 'run'}", "data.name=uniform-symbols-1000", *SHORT)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "alpha must be positive and not 1" in result.stderr
