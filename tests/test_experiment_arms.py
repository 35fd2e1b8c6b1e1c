"""The experiment drivers run the objective each arm names, and nothing else: an override merges into
the config's objective section, so an arm that replaces a term must remove the config's own."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from infolm.config import load_config
from tests.conftest import ROOT


def driver():
    path = ROOT / "experiments" / "imm_ptb_table2_converged.py"
    spec = importlib.util.spec_from_file_location("imm_ptb_table2_converged", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


EXPECTED = {
    "baseline": {"mle"},
    "none": {"mle"},
    "noising": {"noising"},
    "imm": {"mle", "imm"},
    "imm-positions-8": {"mle", "imm"},
    "imm-in-batch": {"mle", "imm"},
    "none-lr5": {"mle"},
    "imm-positions-8-lr5": {"mle", "imm"},
    "none-halve-reload": {"mle"},
    "imm-positions-8-halve-reload": {"mle", "imm"},
    "imm-released-positions-8": {"mle", "imm"},
}


@pytest.mark.parametrize("arm", list(EXPECTED))
def test_table2_driver_arms_train_exactly_their_terms(arm: str, tmp_path: Path) -> None:
    module = driver()
    assert set(module.ARMS) | {"baseline"} == set(EXPECTED)
    command = module.train_command(tmp_path, arm, 0, [])
    config_path, overrides = command[4], [word for word in command[5:] if word != "--json"]
    config = load_config(ROOT / config_path, overrides)
    assert set(config.objective) == EXPECTED[arm]
    if arm == "imm-in-batch":
        assert config.objective["imm"]["realization"] == "in-batch"
    assert config.optim.lr == (5.0 if arm.endswith("-lr5") else 20.0 if arm == "baseline" else 10.0)
    released_schedule = arm.endswith("-halve-reload") or arm == "imm-released-positions-8"
    assert config.optim.plateau_restore_best == released_schedule
    assert config.optim.decay == (0.5 if released_schedule else 0.25)
    assert config.train.early_stopping == (0 if released_schedule else 2)
    if arm == "imm-released-positions-8":
        assert config.objective["imm"]["one_sample"] == "released"


def test_realizations_script_arms_train_exactly_their_terms() -> None:
    """The shell driver's arms, word-split as bash splits them, give the named terms."""
    script = ROOT / "experiments" / "imm_realizations_table2.sh"
    listing = subprocess.run(
        ["bash", "-c", f'eval "$(sed -n "/^declare -A ARMS/,/^)/p" {shlex.quote(str(script))})"; '
         'for arm in "${!ARMS[@]}"; do echo "$arm|${ARMS[$arm]}"; done'],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    arms = dict(line.split("|", 1) for line in listing.splitlines())
    expected = {"none": {"mle"}, "noising": {"noising"}}  # none keeps IMM at weight 0
    imm_arms = {"imm-every-position", "imm-positions-8", "imm-state-bank-32", "imm-in-batch"}
    assert set(arms) == imm_arms | {"none", "noising"}
    for arm, words in arms.items():
        config = load_config(ROOT / "configs/ptb/imm-xie-table2.yaml", words.split())
        active = {name for name, settings in config.objective.items() if (settings or {}).get("weight", 1.0) != 0}
        assert active == expected.get(arm, {"mle", "imm"}), arm


def table5_1_driver():
    path = ROOT / "experiments" / "thesis_table5_1.py"
    spec = importlib.util.spec_from_file_location("thesis_table5_1", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# arm -> (latents, objective, estimator, draws): Table 5.1's columns
TABLE5_1 = {
    "dreg-1": ("gaussian", "mi-kl", "dreg", 1),
    "dreg-16-kl": ("gaussian", "mi-kl", "dreg", 16),
    "dreg-16-renyi": ("gaussian", "mi-renyi", "dreg", 16),
    "vimco-1": ("categorical", "mi-kl", "reinforce", 1),
    "vimco-16-kl": ("categorical", "mi-kl", "vimco", 16),
    "vimco-16-renyi": ("categorical", "mi-renyi", "vimco", 16),
}


@pytest.mark.parametrize("arm", list(TABLE5_1))
def test_table5_1_driver_arms_train_exactly_their_objective(arm: str, tmp_path: Path) -> None:
    module = table5_1_driver()
    assert set(module.ARMS) == set(TABLE5_1) == set(module.THESIS)
    command = module.train_command(tmp_path, arm, 0.25, 3.0, 1, ["optim.lr=0.001"])
    config = load_config(ROOT / command[4], [word for word in command[5:] if word != "--json"])
    latent, name, estimator, draws = TABLE5_1[arm]
    assert config.model["latent"] == latent and config.model["hidden"] == 128
    assert set(config.objective) == {name}
    term = config.objective[name]
    assert (term["estimator"], term["samples"], term["lam"]) == (estimator, draws, 0.25)
    assert term.get("alpha", 3.0) == 3.0 and ("alpha" in term) == (name == "mi-renyi")
    assert config.run.seed == 1 and config.optim.lr == 0.001
    alpha = "-a3" if name == "mi-renyi" else ""  # α is part of a Rényi run's name
    assert config.run.dir == str(tmp_path / f"{arm}-lam0.25{alpha}-s1")
    match = module.RUN_NAME.match(Path(config.run.dir).name)
    assert (match["arm"], match["lam"], match["alpha"], match["seed"]) == (arm, "0.25", alpha[2:] or None, "1")


def test_melis_converged_arms_have_equal_parameters_and_their_averagers() -> None:
    """The converged comparison's arms differ only in the cell (equal parameter counts, within 0.2%) and
    in the averager; every job of the driver names a config that loads."""
    from infolm.build import build_model

    path = ROOT / "experiments" / "melis_ptb_word.py"
    spec = importlib.util.spec_from_file_location("melis_ptb_word", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    configs = {arm: load_config(ROOT / config, []) for arm, config in module.CONVERGED.items()}
    counts = {arm: sum(p.numel() for p in build_model(c, 10000).parameters()) for arm, c in configs.items()}
    assert max(counts.values()) / min(counts.values()) < 1.002, counts
    assert {arm: c.model["cell"] for arm, c in configs.items()} == {
        "lstm": "lstm", "mogrifier": "mogrifier", "lstm-tail": "lstm",
    }  # fmt: skip
    assert {arm: c.optim.average["name"] for arm, c in configs.items()} == {
        "lstm": "two-tailed", "mogrifier": "two-tailed", "lstm-tail": "tail",
    }  # fmt: skip
    for arm, config in configs.items():
        others = [c for name, c in configs.items() if name != arm]
        for other in others:  # the same data, optimizer and schedule
            assert (config.data, config.train, config.optim.lr) == (other.data, other.train, other.optim.lr)
    jobs = module.converged_jobs(["lstm", "lstm-tail"], [1])
    assert [key for key, _ in jobs] == [
        "train/converged/lstm-s1", "test/converged/lstm-s1", "extras/converged/lstm-s1",
        "train/converged/lstm-tail-s1", "test/converged/lstm-tail-s1",
    ]  # fmt: skip
