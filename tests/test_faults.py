"""Faults a user meets, each tried through the CLI: one clear line on stderr, a non-zero exit where the
run cannot go on, no traceback, and nothing on disk lost."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
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
    assert "above 2 x ln|V| = 18.42 for 3 steps" in result.stderr
    assert "keeps its checkpoints up to step-00000001" in result.stderr
    # Only the checkpoint written before the loss left the bound; it and the log are intact.
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best", "step-00000001"]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "split" not in r]
    assert [r["step"] for r in steps] == [1, 2, 3] and steps[0]["loss"] < 18.42 < 1e28 < steps[1]["loss"]
    evaluated = run_cli("evaluate", str(run), "--json")
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
