"""Refactors change no number: the training log and the test-split evaluation of a few configs at
a few steps equal, float for float, the values recorded in ``tests/data/pinned_metrics.json``.

The pinned values were recorded with ``python tests/test_pinned_metrics.py --record`` (one thread,
CPU) on the code before the trainer learned tasks; rerecord only for a change that is meant to move
numbers, and say so in the commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PINNED = ROOT / "tests" / "data" / "pinned_metrics.json"
TIMING = ("tokens_per_s", "elapsed")

# name -> (config, overrides): existing configs shrunk to a few steps on a slice of PTB.
CASES: dict[str, tuple[str, list[str]]] = {
    "tiny": ("configs/tiny.yaml", []),
    "imm": (
        "configs/ptb/imm.yaml",
        [
            "data.max_train_tokens=20000",
            "data.max_eval_tokens=2000",
            "model.emb=24",
            "model.hidden=24",
            "train.max_steps=12",
            "train.eval_every=6",
            "train.log_every=2",
            "objective.imm.j=2",
            "objective.imm.k=3",
            "objective.imm.sample_chunk=3",
        ],
    ),
    "bmi": (
        "configs/ptb/bmi-base.yaml",
        [
            "data.max_train_tokens=20000",
            "data.max_eval_tokens=2000",
            "train.max_steps=18",
            "train.eval_every=2",
            "train.log_every=2",
            "optim.average.nonmono=1",
        ],
    ),
    "two-tailed": (
        "configs/ptb/melis-small-lstm-2ta.yaml",
        [
            "data.max_train_tokens=20000",
            "data.max_eval_tokens=2000",
            "model.emb=24",
            "model.hidden=24",
            "train.max_steps=12",
            "train.eval_every=3",
            "train.log_every=2",
        ],
    ),
}


def run_case(name: str, run_dir: Path) -> dict[str, Any]:
    """Train ``CASES[name]`` in ``run_dir``; its metrics log (timings dropped) and test evaluation."""
    from infolm.build import load_run, train
    from infolm.config import load_config
    from infolm.evaluation.perplexity import evaluate_split
    from infolm.training.metrics import read_metrics

    path, overrides = CASES[name]
    overrides = [*overrides, f"run.dir={run_dir}", "run.device=cpu", "train.progress=false"]
    config = load_config(ROOT / path, overrides)
    train(config, overrides)
    log = [{k: v for k, v in r.items() if k not in TIMING} for r in read_metrics(run_dir / "metrics.jsonl")]
    config, corpus, model = load_run(run_dir)
    test = evaluate_split(model, corpus, "test", config.data.eval_batch_size, config.data.bptt)
    return {"log": log, "test": test}


@pytest.mark.parametrize("name", list(CASES))
def test_config_gives_the_pinned_numbers(name: str, tmp_path: Path) -> None:
    pinned = json.loads(PINNED.read_text())[name]
    got = json.loads(json.dumps(run_case(name, tmp_path)))  # the same float round trip as the record
    assert len(got["log"]) == len(pinned["log"])
    for row, (a, b) in enumerate(zip(got["log"], pinned["log"])):
        assert a == b, f"{name}: metrics line {row + 1} differs"
    assert got["test"] == pinned["test"]


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/test_pinned_metrics.py --record")
    import os
    import tempfile

    os.environ.setdefault("INFOLM_OFFLINE", "1")
    torch.set_num_threads(1)
    record = {}
    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            record[case] = run_case(case, Path(tmp) / "run")
    PINNED.write_text(json.dumps(record, indent=1) + "\n")
