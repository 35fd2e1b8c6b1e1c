"""``infolm pilot``: arms continued from one checkpoint on common random numbers; paired differences.

The source run is configs/tiny.yaml with output dropout, so that the primary pass draws masks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import run_in_process

PILOT = ("--steps", "4", "--eval-every", "2")
LAST = "checkpoints/step-00000010/model.safetensors"  # the arms' final weights (6 + 4 steps)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("pilot") / "source"
    result = run_in_process(
        "train",
        "configs/tiny.yaml",
        f"run.dir={run_dir}",
        "train.max_steps=6",
        "train.eval_every=3",
        "model.dropout=0.3",
        "data.max_eval_tokens=1000",
    )
    assert result.returncode == 0, result.stderr
    return run_dir


def pilot(source: Path, out: Path, *arms: str, extra: tuple[str, ...] = ()) -> dict:
    args = [item for arm in arms for item in ("--arm", arm)]
    result = run_in_process("pilot", str(source), *args, *PILOT, "--out", str(out), "--json", *extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def curve(result: dict, arm: str) -> list[tuple[int, dict]]:
    return [(point["step"], point["values"]) for point in result["arms"][arm]["curve"]]


def final_weights(out: Path, arm: str) -> dict[str, torch.Tensor]:
    return load_file(str(out / arm / LAST))


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def three_arms(source, tmp_path_factory) -> tuple[dict, Path]:
    """The run's own config twice (mle, twin) and a smaller learning rate (slow), mle the control."""
    out = tmp_path_factory.mktemp("pilot") / "three"
    return pilot(source, out, "mle:", "twin:", "slow:optim.lr=5"), out


def test_identical_arms_give_bit_identical_curves_and_weights(three_arms, source):
    result, out = three_arms
    assert [step for step, _ in curve(result, "mle")] == [6, 8, 10]
    assert curve(result, "twin") == curve(result, "mle")
    assert all(value == 0.0 for point in result["arms"]["twin"]["differences"] for value in point["values"].values())
    assert same_weights(final_weights(out, "twin"), final_weights(out, "mle"))
    # the arms trained: their weights are not the checkpoint's
    assert not same_weights(
        final_weights(out, "mle"), load_file(str(source / "checkpoints/step-00000006/model.safetensors"))
    )


def test_different_arms_differ_and_the_difference_is_arm_minus_control(three_arms):
    result, out = three_arms
    slow, mle = dict(curve(result, "slow")), dict(curve(result, "mle"))
    assert slow[6] == mle[6]  # both start from the checkpoint's weights
    assert slow[8]["loss"] != mle[8]["loss"] and slow[10]["loss"] != mle[10]["loss"]
    reported = result["arms"]["slow"]["differences"]
    assert [point["step"] for point in reported] == [6, 8, 10]
    for point in reported:
        assert point["values"] == {k: v - mle[point["step"]][k] for k, v in slow[point["step"]].items()}
    lines = [json.loads(line) for line in (out / "slow.jsonl").read_text().splitlines()]
    assert [(line["step"], line["value"], line["difference"]) for line in lines] == [
        (step, slow[step]["loss"], slow[step]["loss"] - mle[step]["loss"]) for step in (6, 8, 10)
    ]
    assert json.loads((out / "pilot.json").read_text()) == result
    job = result["job"]  # the folder describes its own job: how long each arm took, on what, from which commit
    assert sorted(job["wall_s"]) == sorted(result["arms"]) and all(s > 0 for s in job["wall_s"].values())
    assert job["versions"]["torch"] and "cores" in job["machine"] and job["argv"]


def test_the_table_shows_every_arm_beside_the_control(source, tmp_path):
    result = run_in_process(
        "pilot", str(source), "--arm", "mle:", "--arm", "slow:optim.lr=5", *PILOT, "--out", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    rows = result.stdout.splitlines()
    assert rows[1].split() == ["step", "mle", "(control)", "slow"]
    values = json.loads((tmp_path / "slow.jsonl").read_text().splitlines()[-1])
    assert rows[-1].split() == [
        "10",
        f"{values['values']['loss'] - values['difference']:.4f}",
        f"{values['value']:.4f}",
        f"{values['difference']:+.4f}",
    ]


def test_an_arms_file_is_the_arms_of_the_command_line(three_arms, source, tmp_path):
    (tmp_path / "arms.yaml").write_text("control: mle\narms:\n  slow: [optim.lr=5]\n  mle: []\n")
    out = tmp_path / "out"
    result = run_in_process("pilot", str(source), "--arms", str(tmp_path / "arms.yaml"), *PILOT, "--out", str(out))
    assert result.returncode == 0, result.stderr
    from_file = json.loads((out / "pilot.json").read_text())
    assert from_file["control"] == "mle"
    assert from_file["arms"]["slow"]["differences"] == three_arms[0]["arms"]["slow"]["differences"]


def test_only_keeps_the_control_beside_the_named_arms_and_their_curves_are_the_full_runs(three_arms, source, tmp_path):
    (tmp_path / "arms.yaml").write_text("control: mle\narms:\n  slow: [optim.lr=5]\n  twin: []\n  mle: []\n")
    out = tmp_path / "out"
    args = ("--arms", str(tmp_path / "arms.yaml"), "--only", "slow", *PILOT, "--out", str(out))
    result = run_in_process("pilot", str(source), *args)
    assert result.returncode == 0, result.stderr
    shared = json.loads((out / "pilot.json").read_text())
    assert sorted(shared["arms"]) == ["mle", "slow"] and shared["control"] == "mle"
    assert shared["arms"]["slow"]["differences"] == three_arms[0]["arms"]["slow"]["differences"]
    refused = run_in_process("pilot", str(source), "--arms", str(tmp_path / "arms.yaml"), "--only", "fast", *PILOT,
                             "--out", str(tmp_path / "none"))  # fmt: skip
    assert refused.returncode == 2 and "--only: unknown arm 'fast'" in refused.stderr
    assert refused.stderr.count("\n") == 1 and not (tmp_path / "none").exists()
    arms = str(tmp_path / "arms.yaml")
    no_control = run_in_process("pilot", str(source), "--arms", arms, "--only", "slow", "--control", "fast", *PILOT,
                                "--out", str(tmp_path / "none"))  # fmt: skip
    assert no_control.returncode == 2 and "unknown control arm 'fast'" in no_control.stderr


def test_the_arms_optimizer_settings_hold_over_the_checkpoints_state(source, tmp_path):
    """The run's SGD has no momentum (no buffers to continue): an arm with momentum trains alike from the
    checkpoint's state and afresh, unless the checkpoint's settings (momentum 0) replaced the arm's."""
    continued = pilot(source, tmp_path / "continued", "mle:", "momentum:optim.momentum=0.9")
    fresh = pilot(source, tmp_path / "fresh", "mle:", "momentum:optim.momentum=0.9", extra=("--optimizer", "fresh"))
    assert curve(continued, "momentum") == curve(fresh, "momentum")
    assert curve(continued, "momentum") != curve(continued, "mle")


def test_a_diverging_arm_stops_and_the_others_go_on(source, tmp_path):
    result = pilot(source, tmp_path, "mle:", "wild:optim.lr=1e5")
    assert [step for step, _ in curve(result, "mle")] == [6, 8, 10]
    assert [step for step, _ in curve(result, "wild")] == [6, 8]
    assert "training diverged at step" in result["arms"]["wild"]["stopped"]
    assert result["arms"]["mle"]["stopped"] is None


def test_a_term_that_draws_leaves_the_primary_dropout_masks_alone(source, tmp_path, drawing_term):
    result = pilot(source, tmp_path, "mle:", "draws:objective.draws.weight=1.0")
    assert curve(result, "draws") == curve(result, "mle")
    assert same_weights(final_weights(tmp_path, "draws"), final_weights(tmp_path, "mle"))


def test_without_own_streams_the_same_term_moves_the_curve(source, tmp_path, drawing_term, monkeypatch):
    """What the test above guards: drawing from the global generators, the term shifts the masks."""
    from infolm.objectives.base import Composite
    from infolm.objectives.own_streams import OwnStreams

    monkeypatch.setattr(OwnStreams, "drawing", Composite.drawing)
    result = pilot(source, tmp_path, "mle:", "draws:objective.draws.weight=1.0")
    assert curve(result, "draws")[0] == curve(result, "mle")[0]
    assert curve(result, "draws")[1:] != curve(result, "mle")[1:]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--arm", "mle:", "--arm", "imm"), "write NAME:OVERRIDES"),
        (("--arm", "mle:", "--arm", "imm:objective.imm.weight"), "is not of the form key=value"),
        (("--arm", "mle:", "--arm", "a/b:optim.lr=5"), "an arm's name is"),
        (("--arm", "mle:", "--arm", "big:data.batch_size=16"), "data.batch_size is set by the pilot"),
        (("--arm", "mle:", "--arm", "slow:optim.lr=5", "--control", "noise"), "unknown control arm 'noise'"),
        (("--arm", "mle:", "--arm", "mle:optim.lr=5"), "arm 'mle' is given twice"),
        (("--arm", "mle:", "--arm", "x:objective.fancy.weight=1"), "arm x: unknown objective 'fancy'"),
        (("--arm", "mle:"), "at least two arms"),
    ],
)
def test_bad_arms_are_one_line(args, fragment, source, tmp_path):
    result = run_in_process("pilot", str(source), *args, *PILOT, "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert fragment in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_unknown_run_dir_and_missing_steps_are_one_line(tmp_path):
    result = run_in_process(
        "pilot", str(tmp_path / "nowhere"), "--arm", "a:", "--arm", "b:", *PILOT, "--out", str(tmp_path)
    )
    assert result.returncode == 2
    assert "is not an infolm run directory" in result.stderr and result.stderr.count("\n") == 1
    result = run_in_process("pilot", str(tmp_path), "--arm", "a:", "--arm", "b:", "--out", str(tmp_path))
    assert result.returncode == 2
    assert "--steps" in result.stderr and result.stderr.count("\n") == 1
