"""The PTB BMI configs: all three validate, differ only in the BMI term, and a BMI-full run logs both phases.

The run is the BMI-full smoke command (``objective.bmi.phase2_start=8 train.max_steps=16`` on
``configs/ptb/bmi-full.yaml``) plus overrides that only shrink the model and the data, so it takes seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infolm.build import validate_plugins
from infolm.config import load_config, to_dict
from tests.conftest import ROOT, run_in_process

CONFIGS = {name: ROOT / "configs" / "ptb" / f"bmi-{name}.yaml" for name in ("baseline", "base", "full")}

FAST = [
    "data.max_train_tokens=4000",
    "data.max_eval_tokens=400",
    "data.batch_size=4",
    "data.bptt=10",
    "model.emb=8",
    "model.hidden=16",
    "model.last_hidden=8",
    "objective.bmi.batch_size=4",
    "objective.bmi.max_sentence_len=16",
    "objective.bmi.hidden=16",
    "train.log_every=1",
    "train.eval_every=0",
    "train.progress=false",
]


def test_the_three_configs_are_the_same_model_and_recipe_except_bmi() -> None:
    configs = {name: load_config(path) for name, path in CONFIGS.items()}
    for config in configs.values():
        validate_plugins(config)
    baseline = to_dict(configs["baseline"])
    for name in ("base", "full"):
        other = to_dict(configs[name])
        assert other["objective"].pop("bmi")["weight"] == 0.1  # paper, PTB
        for section in ("data", "model", "optim", "train", "objective"):
            assert other[section] == baseline[section], (name, section)
    assert "bmi" not in baseline["objective"]
    assert configs["base"].objective["bmi"]["variant"] == "base"
    assert configs["full"].objective["bmi"]["variant"] == "full"
    assert configs["full"].objective["bmi"]["phase2_start"] is None  # the NT-ASGD condition by default


def test_bmi_full_run_logs_phase1_then_phase2_terms(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_in_process(
        "train", str(CONFIGS["full"]), "objective.bmi.phase2_start=8", "train.max_steps=16", f"run.dir={run_dir}", *FAST
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = {r["step"]: r for r in records if "split" not in r}
    assert sorted(steps) == list(range(1, 17))
    for step, record in steps.items():
        names = set(record)
        assert any("bmi" in name and "raml" not in name for name in names), (step, names)  # Phase I, Eq. 6
        phase2 = step > 8  # the switch happens at the end of step 8
        assert any("raml" in name for name in names) == phase2, (step, names)  # IW-RAML, Eq. 16
        assert record["bmi_phase"] == (2.0 if phase2 else 1.0)
    assert all(r["bmi_raml_ess"] <= 4.0 + 1e-6 for s, r in steps.items() if s > 8)  # ESS <= M pairs
    assert any(r.get("split") == "valid" for r in records)


def test_bmi_configs_evaluate_per_epoch() -> None:
    """The paper evaluates per epoch: the non-monotone trigger must not fire on noisy mid-epoch evaluations."""
    for path in CONFIGS.values():
        assert load_config(path, []).train.eval_every == 0, path.name


def test_the_clip_bounds_the_language_model_and_leaves_the_discriminator_out(tmp_path: Path) -> None:
    """``train.clip`` bounds the gradient of the parameters SGD updates, as in the baseline. The
    discriminator trains on its own Adam: its gradient is neither clipped nor counted in the norm, so it
    cannot shrink the language model's step (the arms would then differ in more than the regularizer)."""
    import math

    import torch

    from infolm.build import build_trainer

    clip = 1e-4  # far below the raw gradient norm: the clip always acts
    config = load_config(CONFIGS["base"], [f"run.dir={tmp_path}", f"train.clip={clip}", *FAST])
    trainer, _ = build_trainer(config)
    model = trainer.model
    discriminator = [p for group in trainer.optimizers[1].param_groups for p in group["params"]]
    assert {id(p) for p in trainer.clipped_parameters()} == {id(p) for p in model.parameters()}
    values = trainer.train_step(trainer.batches.next_batch())

    def norm(params: list[torch.nn.Parameter]) -> float:
        return math.sqrt(sum(float(p.grad.double().square().sum()) for p in params if p.grad is not None))

    assert norm(discriminator) > 0
    assert norm(list(model.parameters())) == pytest.approx(clip, rel=1e-4)  # not shared with D's gradient
    assert values["grad_norm"] > clip


def test_the_placebo_config_is_bmi_base_without_the_lm_gradient() -> None:
    placebo = to_dict(load_config(ROOT / "configs" / "ptb" / "bmi-placebo.yaml"))
    base = to_dict(load_config(CONFIGS["base"]))
    assert placebo["objective"]["bmi"].pop("lm_gradient") is False
    for section in ("data", "model", "optim", "train", "objective"):
        assert placebo[section] == base[section], section
    validate_plugins(load_config(ROOT / "configs" / "ptb" / "bmi-placebo.yaml"))


def test_the_mid_configs_are_the_cpu_configs_at_another_size() -> None:
    """bmi-ARM-mid.yaml: the same recipe and BMI term as bmi-ARM.yaml, only the model's widths (and run dir)."""
    sizes = {"emb": 200, "hidden": 300, "last_hidden": 200}
    mids = {}
    for arm in ("baseline", "base", "full", "placebo"):
        cpu = to_dict(load_config(ROOT / "configs" / "ptb" / f"bmi-{arm}.yaml"))
        mid = to_dict(load_config(ROOT / "configs" / "ptb" / f"bmi-{arm}-mid.yaml"))
        assert {k: mid["model"][k] for k in sizes} == sizes
        assert {k: v for k, v in mid["model"].items() if k not in sizes} == {
            k: v for k, v in cpu["model"].items() if k not in sizes
        }
        for section in ("data", "optim", "train", "objective"):
            assert mid[section] == cpu[section], (arm, section)
        assert mid["run"]["dir"] == cpu["run"]["dir"] + "-mid"
        mids[arm] = load_config(ROOT / "configs" / "ptb" / f"bmi-{arm}-mid.yaml")
        validate_plugins(mids[arm])
    assert mids["placebo"].objective["bmi"]["lm_gradient"] is False
