"""The experiment drivers run the objective each arm names, and nothing else: an override merges into
the config's objective section, so an arm that replaces a term must remove the config's own."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from infolm.config import load_config
from tests.conftest import ROOT


def experiment(name: str) -> ModuleType:
    """The driver ``experiments/NAME.py`` as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
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
    "imm-positions-8-unclipped": {"mle", "imm"},
    "imm-in-batch": {"mle", "imm"},
    "none-lr5": {"mle"},
    "imm-positions-8-lr5": {"mle", "imm"},
    "none-halve-reload": {"mle"},
    "imm-positions-8-halve-reload": {"mle", "imm"},
    "imm-released-positions-8": {"mle", "imm"},
    "imm-released-soft-target": {"mle", "imm"},
    "imm-j1-positions-8": {"mle", "imm"},
    "imm-j1-positions-32": {"mle", "imm"},
    "imm-j1-in-batch": {"mle", "imm"},
}
# j and positions per batch of each IMM arm (0: every position); the paper's mix is j = 5 (App. D.2)
IMM_SAMPLING = {"imm-j1-positions-8": (1, 8), "imm-j1-positions-32": (1, 32), "imm-j1-in-batch": (1, 0)}


@pytest.mark.parametrize("arm", list(EXPECTED))
def test_table2_driver_arms_train_exactly_their_terms(arm: str, tmp_path: Path) -> None:
    module = experiment("imm_ptb_table2_converged")
    assert set(module.ARMS) | {"baseline"} == set(EXPECTED)
    command = module.train_command(tmp_path, arm, 0, [])
    config_path, overrides = command[4], [word for word in command[5:] if word != "--json"]
    config = load_config(ROOT / config_path, overrides)
    assert set(config.objective) == EXPECTED[arm]
    if arm.endswith("in-batch"):
        assert config.objective["imm"]["realization"] == "in-batch"
    if arm in IMM_SAMPLING:  # Eq. 15 on every step: k samples, no 1-sample (Eq. 18) step
        imm = config.objective["imm"]
        assert (imm["j"], imm.get("positions_per_batch", 0), imm["k"]) == (*IMM_SAMPLING[arm], 10)
    assert config.optim.lr == (5.0 if arm.endswith("-lr5") else 20.0 if arm == "baseline" else 10.0)
    released_schedule = arm.endswith("-halve-reload") or arm.startswith("imm-released")
    assert config.optim.plateau_restore_best == released_schedule
    assert config.optim.decay == (0.5 if released_schedule else 0.25)
    assert config.train.early_stopping == (0 if released_schedule else 2)
    if arm.startswith("imm-released"):
        assert config.objective["imm"]["one_sample"] == "released"
    if arm == "imm-released-soft-target":  # k = 1 on every step: only the soft-target steps run
        assert (config.objective["imm"]["k"], config.objective["imm"]["j"]) == (1, 1)
    if "imm" in config.objective:  # the paper's clip of ∇IMM (App. D.2), off only where the arm says so
        assert config.objective["imm"].get("clip", 0.25) == (0 if arm.endswith("-unclipped") else 0.25)


def test_imm_default_pilot_arms_differ_only_in_the_imm_term() -> None:
    """The pilot arms that screen IMM's realizations: every arm is the baseline's config with the
    continuation's learning rate; the IMM arms name k, j and the realization they screen."""
    from infolm.objectives.imm import IMMConfig
    from infolm.pilot import read_arms_file

    arms, control = read_arms_file(ROOT / "experiments/pilots/imm-default.yaml")
    assert control == "mle"
    expected = {  # arm -> (k, j, positions per batch (0: every position), realization, 1-sample steps)
        "exact": (10, 1, 0, "replay", "eq18"),
        "j1-positions-8": (10, 1, 8, "replay", "eq18"),
        "j1-positions-32": (10, 1, 32, "replay", "eq18"),
        "j1-in-batch": (10, 1, 0, "in-batch", "eq18"),
        "j5-positions-8": (10, 5, 8, "replay", "eq18"),
        "soft-target": (1, 1, 0, "replay", "released"),
    }
    assert [arm.name for arm in arms] == ["mle", *expected]
    for arm in arms:
        config = load_config(ROOT / "configs/ptb/imm-table2-cpu.yaml", list(arm.overrides))
        assert config.optim.lr == 10.0
        if arm.name == "mle":
            assert set(config.objective) == {"mle"}
            continue
        assert set(config.objective) == {"mle", "imm"}
        imm = IMMConfig(**config.objective["imm"])
        assert (imm.k, imm.j, imm.positions_per_batch, imm.realization, imm.one_sample) == expected[arm.name]
        assert (imm.weight, imm.clip, imm.restricted_order) == (0.2, 0.25, 2)


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
    module = experiment("thesis_table5_1")
    assert set(module.ARMS) == set(TABLE5_1)
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

    module = experiment("melis_ptb_word")
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
            assert (config.data, config.optim.lr) == (other.data, other.optim.lr)
            assert dataclasses.replace(config.train, early_stopping=0) == dataclasses.replace(
                other.train, early_stopping=0
            )
    # tail averaging starts up to nonmono + 1 evaluations after the best raw loss: the same patience after it
    tail, two_tailed = configs["lstm-tail"], configs["lstm"]
    assert tail.train.early_stopping == two_tailed.train.early_stopping + tail.optim.average["nonmono"] + 1
    assert all(c.model["emb"] == c.model["hidden"] for c in configs.values())  # no output projection
    jobs = module.converged_jobs(["lstm", "lstm-tail"], [1])
    assert [key for key, _ in jobs] == [
        "train/converged/lstm-s1", "test/converged/lstm-s1", "extras/converged/lstm-s1",
        "train/converged/lstm-tail-s1", "test/converged/lstm-tail-s1",
    ]  # fmt: skip


def test_melis_converged_archives_each_run_when_its_last_step_ends(tmp_path: Path, monkeypatch) -> None:
    """``converged`` keeps a run as a record as soon as its training, test and extras have ended, before
    the next run trains (a machine lost mid-queue keeps what ended); a run whose step failed is not kept."""
    import subprocess as sp

    module = experiment("melis_ptb_word")
    monkeypatch.setattr(module, "OUT", tmp_path / "out")
    monkeypatch.setattr(module, "RECORDS", tmp_path / "records")
    monkeypatch.setattr(module, "LOG", tmp_path / "out" / "log.jsonl")
    started: list[tuple[str, list[str]]] = []  # (run trained now, records present then)

    def fake(command: list[str], **_: object) -> sp.CompletedProcess[str]:
        if command[1] == "train":
            name = Path(next(word for word in command if word.startswith("run.dir=")).split("=", 1)[1]).name
            run = tmp_path / "out" / "converged" / name
            kept = sorted(p.name for p in (tmp_path / "records").iterdir()) if (tmp_path / "records").is_dir() else []
            started.append((run.name, kept))
            run.mkdir(parents=True)
            (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "split": "valid", "loss": 5.0}) + "\n")
        failed = command[1] == "evaluate" and "mogrifier-s1" in command[2]
        return sp.CompletedProcess(command, 1 if failed else 0, "" if failed else '{"ppl": 1.0}\n', "x")

    monkeypatch.setattr(sp, "run", fake)  # every job goes through experiments.reproduce.jobs
    module.cmd_converged(argparse.Namespace(arms=["lstm", "mogrifier"], seeds=[1]))
    assert started == [("lstm-s1", []), ("mogrifier-s1", ["lstm-s1"])]
    assert sorted(p.name for p in (tmp_path / "records").iterdir()) == ["lstm-s1"]
    log = json.loads((tmp_path / "records" / "lstm-s1" / "record.json").read_text())["log"]
    assert [entry["key"] for entry in log] == [key for key, _ in module.converged_jobs(["lstm"], [1])]


@pytest.mark.parametrize("budget", ["converged", "smoke"])
def test_bmi_driver_arms_differ_only_in_the_regularizer(budget: str, tmp_path: Path) -> None:
    """Baseline, BMI-base and BMI-full share model, data, optimizer and schedule; under the converged
    budget the averaging switch and BMI-full's Phase II both wait for the NT-ASGD condition alone."""
    module = experiment("bmi_ptb_table2")
    configs = {}
    for arm in module.ARMS:
        command = module.train_command(tmp_path, arm, 2, module.BUDGETS[budget], ["optim.lr=10"])
        configs[arm] = load_config(ROOT / command[4], command[5:])
    assert set(configs["baseline"].objective) == {"mle", "ar", "tar"}
    assert set(configs["base"].objective) == set(configs["full"].objective) == {"mle", "ar", "tar", "bmi"}
    assert configs["base"].objective["bmi"]["variant"] == "base"
    assert configs["full"].objective["bmi"]["variant"] == "full"
    for config in configs.values():
        assert (config.model, config.data, config.train, config.optim) == (
            configs["baseline"].model, configs["baseline"].data, configs["baseline"].train, configs["baseline"].optim,
        )  # fmt: skip
        assert config.optim.lr == 10 and config.run.seed == 2
    average, phase2 = configs["baseline"].optim.average, configs["full"].objective["bmi"]["phase2_start"]
    if budget == "converged":
        train = configs["baseline"].train
        assert train.max_steps is None and train.log_every == module.LOG_EVERY
        # the trigger fires up to nonmono + 1 validations after the best loss: early stopping leaves 8 after it
        assert train.early_stopping == average["nonmono"] + 1 + 8
        assert (average["nonmono"], average["latest"], phase2) == (5, 0, None)
        assert configs["full"].objective["bmi"]["nonmono"] == average["nonmono"]
    else:
        assert (average["nonmono"], average["start"], phase2) == (0, 50, 50)


@pytest.mark.parametrize("budget", ["converged", "smoke"])
def test_bmi_driver_studies_fix_one_switch_set_the_weight_and_train_the_placebo(budget: str, tmp_path: Path) -> None:
    """--switch-step N: every arm averages from step N + 1 (no trigger), BMI-full's Phase II follows step N;
    --bmi-weight: the BMI arms' weight, the baseline without a BMI term; the placebo arm is BMI-base's
    recipe with the LM's gradient off."""
    module = experiment("bmi_ptb_table2")
    configs = {}
    for arm in (*module.ARMS, *module.EXTRA_ARMS):
        command = module.train_command(tmp_path, arm, 0, module.BUDGETS[budget], [], switch=16000, bmi_weight=0.02)
        configs[arm] = load_config(ROOT / command[4], command[5:])
    for config in configs.values():
        average = config.optim.average
        assert (average["name"], average["nonmono"], average["start"]) == ("tail", 0, 16001)
    assert set(configs["baseline"].objective) == {"mle", "ar", "tar"}
    assert configs["full"].objective["bmi"]["phase2_start"] == 16000
    for arm in ("base", "full", "placebo"):
        assert configs[arm].objective["bmi"]["weight"] == 0.02
    assert configs["placebo"].objective["bmi"]["lm_gradient"] is False
    assert configs["placebo"].objective["bmi"]["variant"] == "base"
    assert module.study_overrides("baseline") == [] and module.study_overrides("full", bmi_weight=0.1) == [
        "objective.bmi.weight=0.1"
    ]
    mid = module.train_command(tmp_path, "placebo", 0, module.BUDGETS[budget], scale="mid")
    assert mid[4] == "configs/ptb/bmi-placebo-mid.yaml" and load_config(ROOT / mid[4], mid[5:]).model["hidden"] == 300


def test_bmi_mid_budget_fixes_steps_and_averaging_start_for_every_arm(tmp_path: Path) -> None:
    """The mid budget trains the protocol's mid-scale arms (placebo, BMI-full's zeroed-reward control and the
    0.02-weight arms included) from the 3.8M-parameter configs, every run the same 20,000 steps with no early
    stopping, averaging from one fixed step and the Phase II of BMI-full and its control from the same step; an
    arm named ``-wW`` sets only the BMI weight."""
    module = experiment("bmi_ptb_table2")
    arms, seeds = module.budget_runs("mid")
    assert set(arms) == {"baseline", "base", "full", "placebo", "base-w0.02", "full-w0.02", "full-reward-none"}
    assert seeds == [0, 1, 2]
    assert arms[0] == "baseline" and module.budget_runs("smoke") == module.budget_runs("converged")
    assert not module.scores_real("mid") and module.scores_real("converged") and module.scores_real("smoke")
    configs = {}
    for arm in arms:
        command = module.train_command(tmp_path, arm, 1, module.BUDGETS["mid"])
        assert command[4] == f"configs/ptb/bmi-{module.arm_and_weight(arm)[0]}-mid.yaml"
        configs[arm] = load_config(ROOT / command[4], command[5:])
    for config in configs.values():
        assert config.model == configs["baseline"].model and config.model["hidden"] == 300
        assert (config.train.max_steps, config.train.early_stopping) == (module.MID_STEPS, 0)
        average = config.optim.average
        assert (average["nonmono"], average["start"]) == (0, module.MID_SWITCH + 1)
    assert set(configs["baseline"].objective) == {"mle", "ar", "tar"}
    for arm, weight in (("base", 0.1), ("full", 0.1), ("placebo", 0.1), ("base-w0.02", 0.02), ("full-w0.02", 0.02)):
        assert configs[arm].objective["bmi"]["weight"] == weight
    for arm in ("full", "full-w0.02", "full-reward-none"):
        assert configs[arm].objective["bmi"]["phase2_start"] == module.MID_SWITCH
    # the control is BMI-full with the reward alone changed
    control, full = dict(configs["full-reward-none"].objective["bmi"]), dict(configs["full"].objective["bmi"])
    assert control.pop("reward") == "none" and full.pop("reward", "discriminator") == "discriminator"
    assert control == full
    assert configs["base-w0.02"].objective["bmi"]["variant"] == "base"
    assert configs["placebo"].objective["bmi"]["lm_gradient"] is False
    assert module.arm_and_weight("full-w0.02") == ("full", 0.02) and module.arm_and_weight("full") == ("full", None)
    assert module.arm_and_weight("full-wx") == ("full-wx", None)


def test_bmi_mid_pilot_arms_form_a_ladder_from_the_baseline_to_bmi_full() -> None:
    """The mid-scale pilot's BMI-full arms differ one setting at a time: the zeroed-reward control is BMI-full
    with ``reward: none``, and the cheap baseline is that control with the point-mass proposal (lam 1: Phase II
    is an extra likelihood pass over the true pairs), every Phase II from the checkpoint's step."""
    from infolm.objectives.bmi import BMIConfig
    from infolm.pilot import read_arms_file

    arms, control = read_arms_file(ROOT / "experiments/pilots/bmi-mid.yaml")
    assert control == "baseline"
    bmi = {}
    for arm in arms:
        config = load_config(ROOT / "configs/ptb/bmi-baseline-mid.yaml", list(arm.overrides))
        if arm.name == "baseline":
            assert set(config.objective) == {"mle", "ar", "tar"}
            continue
        bmi[arm.name] = dataclasses.asdict(BMIConfig(**config.objective["bmi"]))
    assert set(bmi) == {"base", "placebo", "full", "full-reward-none", "full-true-next", "base-w0.02", "full-w0.02"}
    full, control, cheap = bmi["full"], bmi["full-reward-none"], bmi["full-true-next"]
    assert full["phase2_start"] == 12000 and (full["reward"], full["lam"]) == ("discriminator", 0.3)
    assert {key for key in full if full[key] != control[key]} == {"reward"} and control["reward"] == "none"
    assert {key for key in control if control[key] != cheap[key]} == {"lam"} and cheap["lam"] == 1.0


def test_bmi_driver_wants_an_out_of_its_own_for_a_study() -> None:
    driver = str(ROOT / "experiments" / "bmi_ptb_table2.py")
    done = subprocess.run(
        [sys.executable, driver, "train", "--seeds", "0", "--bmi-weight", "0.02"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1 and "--out" in done.stderr


def test_bmi_driver_reads_time_per_step_and_the_discriminator_from_the_log() -> None:
    module = experiment("bmi_ptb_table2")
    records = [
        {"step": 10, "elapsed": 1.0, "tokens_per_s": 1, "bmi_phase": 1.0, "bmi_acc": 0.5, "bmi_mine": 0.0},
        {"step": 20, "elapsed": 2.0, "tokens_per_s": 1, "bmi_phase": 1.0, "bmi_acc": 0.6, "bmi_mine": 0.1},
        {"step": 20, "split": "valid", "loss": 5.0, "ppl": 148.0, "started_at": 21.0},
        {"step": 30, "elapsed": 9.0, "tokens_per_s": 1, "bmi_phase": 1.0, "bmi_acc": 0.7, "bmi_mine": 0.2},
        {"step": 40, "elapsed": 10.0, "tokens_per_s": 1, "bmi_phase": 1.0, "bmi_acc": 0.8, "bmi_mine": 0.3},
        {"step": 50, "elapsed": 13.0, "tokens_per_s": 1, "bmi_phase": 2.0, "bmi_acc": 0.9, "bmi_mine": 0.4},
        {"step": 60, "elapsed": 16.0, "tokens_per_s": 1, "bmi_phase": 2.0, "bmi_acc": 1.0, "bmi_mine": 0.5},
    ]
    # the interval to step 30 holds an evaluation: the median of 0.1, 0.7, 0.1 leaves it out
    assert module.seconds_per_step(records, 1.0) == pytest.approx(0.1)
    assert module.seconds_per_step(records, 2.0) == pytest.approx(0.3)
    assert module.switch_step(records) == 21 and module.phase2_step(records) == 50
    assert module.phase2_step(records[:4]) is None and module.switch_step(records[:2]) is None
    assert module.split_name("base-s0") == ("base", "0") and module.split_name("baseline-s12") == ("baseline", "12")
    assert module.split_name("plots") is None and module.split_name("full-sx") is None
    stats = module.discriminator_stats(records)  # steps after 0.9 x 60 = 54: the last record
    assert stats == {"accuracy": 1.0, "mine": 0.5, "records": 1}
    assert module.discriminator_stats([r for r in records if "bmi_acc" not in r]) is None


def test_bmi_driver_extends_a_run_short_of_validations_after_its_switch() -> None:
    """A converged-budget run that reached its epoch limit with fewer than 8 validations after the averaging
    switch (or none) goes on 5 epochs at a time up to 40; one that stopped early, or has them, is done."""
    module = experiment("bmi_ptb_table2")

    def log(switch: int | None, validations: int) -> list[dict[str, object]]:
        started = {} if switch is None else {"started_at": float(switch)}
        return [
            {"step": 100 * i, "split": "valid", "loss": 5.0}
            | (started if switch is not None and 100 * i >= switch - 1 else {"started_at": -1.0})
            for i in range(1, validations + 1)
        ]

    late = log(1001, 14)  # switch after the 10th validation: the 11th to the 14th come after it
    assert module.switch_step(late) == 1001 and module.validations_after_switch(late) == 4
    assert module.extended_limit({"early_stopped": False}, late, 15) == 20
    assert module.extended_limit({"early_stopped": False}, late, 38) == 40
    assert module.extended_limit({"early_stopped": False}, late, 40) is None
    assert module.extended_limit({"early_stopped": True}, late, 15) is None
    assert module.extended_limit({"early_stopped": False}, log(None, 14), 15) == 20  # no switch at all
    early = log(501, 14)  # the 5th validation switched: validations 6 to 14 follow, 9 >= 8
    assert module.validations_after_switch(early) == 9
    assert module.extended_limit({"early_stopped": False}, early, 15) is None
    command = module.train_command(Path("out"), "full", 0, module.BUDGETS["converged"])
    assert "train.epochs=15" in command
    converged = module.BUDGETS["converged"]
    assert module.first_limit(Path("nowhere"), converged, []) == 15
    assert module.first_limit(Path("nowhere"), converged, ["train.epochs=25"]) == 25  # the user's limit
    assert module.first_limit(Path("nowhere"), module.BUDGETS["smoke"], []) is None
    smoke = module.train_command(Path("out"), "full", 0, module.BUDGETS["smoke"])
    assert not any(argument.startswith("train.epochs") for argument in smoke)


def test_bmi_driver_refuses_to_mix_budgets_in_one_folder(tmp_path: Path) -> None:
    (tmp_path / "baseline-s0.score.json").write_text('{"budget": "smoke"}')
    driver = str(ROOT / "experiments" / "bmi_ptb_table2.py")
    command = [sys.executable, driver, "train", "--out", str(tmp_path), "--seeds", "0"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [f"error: {tmp_path} holds runs of the smoke budget, not converged"]


def test_table5_1_lm_baseline_trains_with_the_latent_arms_settings(tmp_path: Path) -> None:
    """The LM arm is the latent model's decoder without z, trained exactly as the latent arms are."""
    module = experiment("thesis_table5_1")
    extra = ["optim.lr=0.001", "train.epochs=40", "run.device=cpu", "model.latent_size=8"]
    command = module.train_command(tmp_path, module.LM, 0.3, 2.0, 2, extra)
    assert command[4] == module.LM_CONFIG
    lm = load_config(ROOT / command[4], [word for word in command[5:] if word != "--json"])
    latent = load_config(ROOT / module.CONFIG, extra)
    assert lm.model["name"] == "lstm" and lm.task["name"] == "sentence-lm" and set(lm.objective) == {"mle"}
    assert lm.optim == latent.optim and lm.optim.lr == 0.001 and lm.data.batch_size == latent.data.batch_size
    for key in ("epochs", "eval_every", "early_stopping", "clip"):
        assert getattr(lm.train, key) == getattr(latent.train, key), key
    assert lm.train.epochs == 40 and lm.run.device == "cpu" and lm.run.seed == 2
    assert (lm.model["emb"], lm.model["hidden"], lm.model["layers"]) == (128, 128, 1)
    assert (lm.model["dropout_input"], lm.model["dropout"]) == (
        latent.model["dropout_input"],
        latent.model["dropout_output"],
    )
    assert lm.model["init_range"] == latent.model["init_range"] == 0.1
    assert (lm.task["max_len"], lm.task["truncate"]) == (latent.task["max_len"], latent.task["truncate"])
    assert lm.run.dir == str(tmp_path / "lm-s2") and module.LM_RUN_NAME.match("lm-s2")
    # every other shared setting passes through; a decoder setting the LM lacks is refused
    more = ["task.bucket_batches=7", "model.tie_weights=true", "train.max_steps=200", "train.precision=bf16"]
    command = module.train_command(tmp_path, module.LM, 0.3, 2.0, 0, more)
    lm = load_config(ROOT / command[4], [word for word in command[5:] if word != "--json"])
    assert (lm.task["bucket_batches"], lm.model["tie_weights"]) == (7, True)
    assert (lm.train.max_steps, lm.train.precision) == (200, "bf16")
    with pytest.raises(SystemExit, match="no recurrent-state dropout"):
        module.train_command(tmp_path, module.LM, 0.3, 2.0, 0, ["model.dropout_state=0.5"])
    # one LM run per seed, whatever the λ grid
    todo = module.pending(tmp_path, [module.LM, "dreg-1"], [0.0, 0.3], 2.0, [0, 1], [], tmp_path / "no-records")
    assert sorted(run.name for run in todo) == sorted(
        ["lm-s0", "lm-s1", "dreg-1-lam0-s0", "dreg-1-lam0.3-s0", "dreg-1-lam0-s1", "dreg-1-lam0.3-s1"]
    )


def test_table5_1_driver_summary_records_the_epoch_limit_it_ran_under(tmp_path: Path) -> None:
    module = experiment("thesis_table5_1")
    run = tmp_path / "dreg-1-lam0.3-s0"
    run.mkdir()
    last = json.dumps({"step": 9, "epoch": 3})
    record = module.run_one([sys.executable, "-c", f"print('progress'); print({last!r})"], run, 60.0, 30)
    assert record["rc"] == 0
    assert json.loads((run / "train-summary.json").read_text()) == {"step": 9, "epoch": 3, "epochs_limit": 30}
    assert module.finished(run, 30)  # ended below the limit it ran under: early stopping
    failed = tmp_path / "vimco-1-lam0.3-s0"
    failed.mkdir()
    assert module.run_one([sys.executable, "-c", "raise SystemExit(3)"], failed, 60.0, 30)["rc"] == 3
    assert not (failed / "train-summary.json").exists() and not module.finished(failed, 30)


def test_table5_1_driver_extends_a_run_that_ended_at_a_lower_epoch_limit(tmp_path: Path) -> None:
    module = experiment("thesis_table5_1")
    config_text = (ROOT / module.CONFIG).read_text()
    assert module.epoch_cap([]) == 30 and module.epoch_cap(["train.epochs=40"]) == 40

    def run(name: str, own_cap: int, ended: int | None, limit: int | None = None) -> Path:
        path = tmp_path / name
        path.mkdir()
        # config.yaml holds the newest limit: an extension rewrites it when it starts
        (path / "config.yaml").write_text(config_text.replace("epochs: 30", f"epochs: {own_cap}"))
        if ended is not None:
            summary = {"epoch": ended} if limit is None else {"epoch": ended, "epochs_limit": limit}
            (path / "train-summary.json").write_text(json.dumps(summary))
        return path

    at_old_limit, stopped_early, in_flight = run("a", 15, 15, 15), run("b", 15, 9, 15), run("c", 30, None)
    assert not module.finished(at_old_limit, 30) and module.finished(at_old_limit, 15)
    assert module.finished(stopped_early, 30)  # early stopping is final
    assert not module.finished(in_flight, 30)
    cut_extension = run("d", 30, 15, 15)  # the extension to 30 started, then was killed before its summary
    assert not module.finished(cut_extension, 30)
    unrecorded = run("e", 30, 15)  # a summary without its limit: rerun (an early-stopped run just ends)
    assert not module.finished(unrecorded, 30) and module.finished(unrecorded, 15)
    # the trainer's own word decides where it is given: a step limit ends a run short of its epoch cap
    # without early stopping, and the run is extended; early stopping is final whatever the limits
    by_steps, by_patience = tmp_path / "f", tmp_path / "g"
    for path, stopped in ((by_steps, False), (by_patience, True)):
        path.mkdir()
        summary = {"epoch": 4, "epochs_limit": 30, "early_stopped": stopped}
        (path / "train-summary.json").write_text(json.dumps(summary))
    assert not module.finished(by_steps, 30) and module.finished(by_steps, 4)
    assert module.finished(by_patience, 30)


def test_fig5_synthetic_figures_build_and_power_curves_tie_alpha_to_lambda() -> None:
    """Every curve of every synthetic figure gives a valid objective; the power curve's α is λ's
    (Definition 6: λ = (α - 1)/α), so it sweeps the same MI weights as the KL and Rényi curves."""
    from infolm.build import build_objective

    module = experiment("thesis_fig5_synthetic")
    for figure, (base, curves) in module.FIGURES.items():
        for label, objective in curves:
            for lam in (0.0, 0.5, 0.95):
                config = load_config(ROOT / base, [f"objective={json.dumps(objective(lam))}", "~objective.mi-kl"])
                build_objective(config)  # raises on an invalid section
                (name,) = config.objective
                if name == "mi-power":
                    alpha = config.objective[name]["alpha"]
                    assert abs((alpha - 1.0) / alpha - lam) < 1e-12, (figure, label)
    assert {label for label, _ in module.FIGURES["fig5_27_power_discrete"][1]} == {
        "VIMCO 16 KL",
        "VIMCO 16 Rényi",
        "VIMCO 16 power",
    }


def test_fig5_seeds_are_read_from_records(tmp_path: Path, monkeypatch, capsys) -> None:
    """With every point archived, the driver trains nothing, reads each seed's record into its summary and
    plots the frontiers; a diverged run is kept as such, with no point, and not trained again."""
    module = experiment("thesis_fig5_synthetic")
    figure = "fig5_3_continuous"
    records, out = tmp_path / "records", tmp_path / "out"
    # (curve label, seed) -> (MI, NLL) at λ 0.3 and 0.5
    points = {
        ("ELBO", 0): [(1.0, 7.0), (3.0, 7.4)],
        ("ELBO", 1): [(2.0, 7.2), (4.0, 7.6)],
    }
    for label, objective in module.FIGURES[figure][1]:
        for seed in (0, 1):
            for lam, (mi, nll) in zip((0.3, 0.5), points.get((label, seed), [(0.1, 6.95), (0.2, 6.96)])):
                run = records / figure / f"{module.slug(label)}-lam{lam:g}-s{seed}"
                run.mkdir(parents=True)
                (run / "config.yaml").write_text(json.dumps({"objective": objective(lam)}))
                (run / "metrics.jsonl").write_text(json.dumps({"step": 5, "loss": nll, "mi": mi, "kl": 0.0}) + "\n")
                (run / "record.json").write_text("{}")
                if (label, seed, lam) == ("DReG 1", 1, 0.3):  # stopped by the divergence rule: no evaluation
                    (run / "metrics.jsonl").write_text(json.dumps({"step": 3, "loss": 99.0}) + "\n")
                    (run / module.DIVERGED).write_text(json.dumps({"error": "infolm: error: training diverged"}))
    argv = ["thesis_fig5_synthetic.py", "--steps", "5", "--lams", "0.3", "0.5", "--seeds", "0", "1", "--figures",
            figure, "--out", str(out), "--records", str(records), "--docs-img", ""]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    module.main()
    assert not list((out / figure).glob("*-s[01]"))  # nothing trained: every point was a record
    assert (out / figure / "frontier.png").is_file() and (out / figure / "pareto.csv").is_file()
    printed = capsys.readouterr().out
    assert printed.splitlines()[-1].endswith("python -m experiments.report thesis-ch5 (from the records)")
    runs = json.loads((out / f"summary-{figure}.json").read_text())["runs"]
    elbo = {(r["lam"], r["seed"]): (r["nll"], r["mi"]) for r in runs if r["curve"] == "ELBO"}
    assert elbo[(0.3, 0)] == (7.0, 1.0) and elbo[(0.5, 1)] == (7.6, 4.0)  # each seed's record read
    diverged = [r for r in runs if r["curve"] == "DReG 1" and r["seed"] == 1 and r["lam"] == 0.3]
    assert len(diverged) == 1 and "diverged" in diverged[0] and math.isnan(diverged[0]["nll"])


def test_fig5_archive_keeps_the_record_of_a_run_it_did_not_train(tmp_path: Path, monkeypatch) -> None:
    """A finished run still in the run folder and archived already is not archived again by a later call
    that trained other points: its record keeps the command and wall time of the job that made it."""
    module = experiment("thesis_fig5_synthetic")
    figure, (label, objective) = "fig5_3_continuous", module.FIGURES["fig5_3_continuous"][1][0]
    records, out = tmp_path / "records", tmp_path / "out"
    name = f"{module.slug(label)}-lam0.3-s0"
    for folder in (out / figure / name, records / figure / name):
        folder.mkdir(parents=True)
        (folder / "config.yaml").write_text(json.dumps({"objective": objective(0.3)}))
        (folder / "metrics.jsonl").write_text(json.dumps({"step": 5, "loss": 7.0, "mi": 1.0, "kl": 0.0}) + "\n")
    kept = {"driver": "thesis_fig5_synthetic.py", "command": "the job that trained it", "wall_s": 12.5}
    (records / figure / name / "record.json").write_text(json.dumps(kept))
    argv = ["thesis_fig5_synthetic.py", "--steps", "5", "--lams", "0.3", "--seeds", "0", "--figures", figure,
            "--curves", label, "--out", str(out), "--records", str(records), "--docs-img", "", "--archive"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    module.main()
    assert json.loads((records / figure / name / "record.json").read_text()) == kept


def test_fig5_records_of_points_trained_now_name_their_commit_and_machine(tmp_path: Path, monkeypatch) -> None:
    """A point this call trains, diverged or not, is archived with the command, wall time, commit and machine
    of its job, and the reproduction pages read them (a diverged run has no checkpoint to name them)."""
    from experiments.reproduce.records import load_record

    module = experiment("thesis_fig5_synthetic")
    figure, curves = "fig5_3_continuous", module.FIGURES["fig5_3_continuous"][1][:2]
    records, out = tmp_path / "records", tmp_path / "out"

    def fake_point(base, objective, run_dir, steps, seed, *_):  # type: ignore[no-untyped-def]
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text(json.dumps({"objective": objective}))
        (run_dir / "metrics.jsonl").write_text(json.dumps({"step": steps, "loss": 7.0, "mi": 1.0}) + "\n")
        if run_dir.name.startswith(module.slug(curves[1][0])):
            (run_dir / module.DIVERGED).write_text(json.dumps({"error": "infolm: error: training diverged"}))
        return ["infolm", "train", str(run_dir)], 3.5

    monkeypatch.setattr(module, "run_point", fake_point)
    monkeypatch.setattr(module, "git_commit", lambda: "c0ffee")
    monkeypatch.setattr(module, "machine_line", lambda: "a test CPU, 2 cores")
    argv = ["thesis_fig5_synthetic.py", "--steps", "5", "--lams", "0.3", "--seeds", "0", "--figures", figure,
            "--curves", curves[0][0], curves[1][0], "--out", str(out), "--records", str(records), "--docs-img", "",
            "--archive"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    module.main()
    for label, _ in curves:
        record = load_record(records / figure / f"{module.slug(label)}-lam0.3-s0")
        assert [(job.commit, job.machine, job.wall_s) for job in record.jobs] == [
            ("c0ffee", "a test CPU, 2 cores", 3.5)
        ]


def test_fig5_lr_study_trains_beside_the_records_at_its_rate_and_archives_nothing(tmp_path: Path, monkeypatch) -> None:
    """``--lr`` trains every point at that rate into its own --out, even where the protocol's record of the
    same point exists (trained at the config's rate), and is refused with --archive or without --out."""
    module = experiment("thesis_fig5_synthetic")
    figure, (label, objective) = "fig5_3_continuous", module.FIGURES["fig5_3_continuous"][1][0]
    records, out = tmp_path / "records", tmp_path / "out"
    name = f"{module.slug(label)}-lam0.3-s0"
    (records / figure / name).mkdir(parents=True)
    (records / figure / name / "config.yaml").write_text(json.dumps({"objective": objective(0.3)}))
    (records / figure / name / "metrics.jsonl").write_text(json.dumps({"step": 5, "loss": 7.0, "mi": 1.0}) + "\n")
    (records / figure / name / "record.json").write_text("{}")
    rates: list[object] = []

    def fake_point(base, objective, run_dir, steps, seed, anneal_epoch, eval_every, lr):  # type: ignore[no-untyped-def]
        rates.append(lr)
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text(json.dumps({"step": steps, "loss": 7.5, "mi": 2.0}) + "\n")
        return ["infolm", "train", str(run_dir)], 1.0

    monkeypatch.setattr(module, "run_point", fake_point)
    argv = ["thesis_fig5_synthetic.py", "--steps", "5", "--lams", "0.3", "--seeds", "0", "--figures", figure,
            "--curves", label, "--out", str(out), "--records", str(records), "--lr", "0.01"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    module.main()
    assert rates == [0.01]
    (run,) = json.loads((out / f"summary-{figure}.json").read_text())["runs"]
    assert run["run"] == str(out / figure / name) and (run["nll"], run["mi"]) == (7.5, 2.0)
    assert json.loads((out / f"summary-{figure}.json").read_text())["lr"] == 0.01
    for extra in (["--archive"], []):
        argv_bad = [a for a in argv if a not in ("--out", str(out))] if not extra else [*argv, *extra]
        monkeypatch.setattr(sys, "argv", argv_bad)
        with pytest.raises(SystemExit, match="an --out of its own"):
            module.main()
    # the study's folder holds runs at 0.01: neither another rate nor the protocol's call may add to it
    for rate in (["--lr", "0.001"], []):
        monkeypatch.setattr(sys, "argv", [*argv[: argv.index("--lr")], *rate])
        with pytest.raises(SystemExit, match="holds runs at learning rate 0.01"):
            module.main()


def test_fig5_the_lr_study_sets_the_rate_of_the_config_it_writes(tmp_path: Path, monkeypatch) -> None:
    module = experiment("thesis_fig5_synthetic")
    base, curves = module.FIGURES["fig5_3_continuous"]
    monkeypatch.setattr(module.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", ""))
    module.run_point(ROOT / base, curves[0][1](0.3), tmp_path / "point", 5, 0, lr=0.01)
    assert yaml.safe_load((tmp_path / "point.yaml").read_text())["optim"]["lr"] == 0.01


def test_fig5_power_figure_reads_the_kl_and_renyi_points_of_the_figure_that_trained_them(
    tmp_path: Path, monkeypatch
) -> None:
    """Fig. 5.26's KL and Rényi curves are Fig. 5.3's DReG 16 runs (the same config, objective and name): they
    are read from Fig. 5.3's records, and only the power curve is trained, into that figure's folders."""
    module = experiment("thesis_fig5_synthetic")
    power, shared = "fig5_26_power_continuous", "fig5_3_continuous"
    assert module.folder(power) == shared and module.folder(shared) == shared
    three = dict(module.FIGURES[shared][1])
    # in one folder a run name is one objective: a curve two figures share is the same runs
    for name in set(module.FOLDERS.values()):
        curves: dict[str, object] = {}
        for figure in [f for f in module.FIGURES if module.folder(f) == name]:
            for label, objective in module.FIGURES[figure][1]:
                assert curves.setdefault(module.slug(label), objective(0.3)) == objective(0.3), (figure, label)
    records, out = tmp_path / "records", tmp_path / "out"
    for label in ("DReG 16 KL", "DReG 16 Rényi"):
        run = records / shared / f"{module.slug(label)}-lam0.3-s0"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(json.dumps({"objective": three[label](0.3)}))
        (run / "metrics.jsonl").write_text(json.dumps({"step": 5, "loss": 7.0, "mi": 1.0, "kl": 0.0}) + "\n")
        (run / "record.json").write_text("{}")
    trained: list[Path] = []

    def fake_run(base, objective, run_dir, steps, seed, anneal_epoch=0, eval_every=0, lr=None):  # type: ignore[no-untyped-def]
        trained.append(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(json.dumps({"objective": objective}))
        (run_dir / "metrics.jsonl").write_text(json.dumps({"step": steps, "loss": 7.1, "mi": 0.9, "kl": 0.0}) + "\n")
        return ["infolm", "train"], 1.0

    monkeypatch.setattr(module, "run_point", fake_run)
    monkeypatch.setattr(module, "report", lambda summary, args, out: None)
    argv = ["thesis_fig5_synthetic.py", "--steps", "5", "--lams", "0.3", "--seeds", "0", "--figures", power,
            "--out", str(out), "--records", str(records), "--docs-img", "", "--archive"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    module.main()
    assert trained == [out / shared / "dreg-16-power-lam0.3-s0"]
    assert (records / shared / "dreg-16-power-lam0.3-s0" / "record.json").is_file()
    assert not (records / power).exists()


def test_fig5_default_grid_is_the_protocols() -> None:
    """On the converged schedule the λ and seeds default to those the thesis-ch5 protocol reads."""
    module = experiment("thesis_fig5_synthetic")
    grid = module.protocol_grid("thesis-fig5-synthetic-converged", module.DEFAULT_FIGURES)
    assert grid == ([0.1, 0.15, 0.2, 0.3, 0.45, 0.65], [0, 1, 2])
    assert module.protocol_grid("thesis-fig5-synthetic", module.DEFAULT_FIGURES) is None
    # each curve only at the λ the protocol reads of it: the widened grid is the DReG 16 pair's alone
    arms = module.protocol_arms("thesis-fig5-synthetic-converged", "fig5_3_continuous")
    assert {"dreg-16-kl-lam0.2", "dreg-16-renyi-lam0.15", "elbo-lam0.3"} <= arms and "elbo-lam0.2" not in arms


def test_smim_table_reuses_a_report_only_for_the_settings_it_was_computed_with(tmp_path: Path) -> None:
    module = experiment("smim_ptb_table2")
    paths = {
        module.report_path(tmp_path, 1000, 20),
        module.report_path(tmp_path, 1000, 500),
        module.report_path(tmp_path, 0, 500),
        module.report_path(tmp_path, 1000),
        module.report_path(tmp_path, 0),
    }
    assert len(paths) == 5
    assert module.report_path(tmp_path, 0, 500).name == "report-test-iwae500-all.json"


@pytest.mark.parametrize("jobs", [1, 2])
def test_table5_1_table_picks_lambda_on_validation_and_lists_each_seed(jobs: int, tmp_path: Path, capsys) -> None:
    """``table`` picks each seed's λ by the IWAE-100 validation bound of every candidate's best checkpoint
    (not the IWAE-10 logged in training), scores the chosen run on test (no evaluation runs here: every
    score is cached after its log), lists each chosen run, and prints Table 5.1's KL as Û − Ŝ per token
    beside the rate. A Rényi arm's λ = 0 candidate is the KL arm's λ = 0 run (the same objective). With
    evaluations run in parallel (``--jobs 2``) the table is the same. Archived, the ended runs rebuild the
    same table from their records alone."""
    import argparse

    module = experiment("thesis_table5_1")

    def run(name: str, valid: list[float], scores: dict[str, dict[str, float]] | None) -> None:
        path = tmp_path / name
        path.mkdir()
        rows = [
            {"step": i, "epoch": i, "split": "valid", "loss": loss, "ppl": math.exp(loss)}
            | ({} if name.startswith("lm") else {"kl": 0.5 * i, "mi": 0.25 * i})
            for i, loss in enumerate(valid)
        ]
        (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (path / "train-summary.json").write_text(json.dumps({"epoch": 9, "early_stopped": True}))
        for file, values in (scores or {}).items():
            (path / file).write_text(json.dumps(values))

    def latent(nll: float, ppl: float) -> dict[str, dict[str, float]]:
        test = {"nll": nll, "ppl": ppl, "kl": 2.0, "mi": 1.0, "sentences": 10.0, "tokens": 200.0, "active_units": 3}
        return {"eval-valid-iwae100.json": {"nll": nll + 0.1}, "eval-test-iwae500.json": test}

    run("dreg-1-lam0.3-s0", [5.0, 4.9], latent(4.8, 121.5))
    # better in the training log's IWAE-10, worse with IWAE-100: not chosen, never scored on test
    run("dreg-1-lam0.6-s0", [5.1, 4.85], {"eval-valid-iwae100.json": {"nll": 5.0}})
    run("dreg-1-lam0.6-s1", [4.95, 4.85], latent(4.9, 134.3))
    run("dreg-1-lam-0.05-s2", [4.95], latent(4.85, 128.0))  # a negative λ (Table 5.2's range starts at -0.05)
    run("dreg-16-kl-lam0-s0", [4.9], latent(4.7, 110.0))
    run("dreg-1-lam0.9-s0", [4.0], None)  # the best logged bound, but training now: no candidate, never scored
    with (tmp_path / "dreg-1-lam0.9-s0" / "metrics.jsonl").open("a") as log:  # a bound that was not finite
        log.write(json.dumps({"step": 9, "epoch": 9, "split": "valid", "loss": None, "ppl": None, "mi": None}) + "\n")
    lm = {"nll": 4.7, "ppl": 110.0}
    run("lm-s0", [4.8], {"eval-valid.json": {"nll": 4.75}, "eval-test.json": lm})
    png = tmp_path / "curves.png"
    records = tmp_path / "records"
    arguments = argparse.Namespace(
        out=str(tmp_path), valid_samples=100, test_samples=500, lm_run=[], png=str(png), records=[], jobs=jobs
    )
    from infolm.training.run_lock import run_dir_lock

    run("lm-s1", [4.9], None)  # training now: never scored (its checkpoint would go stale), not archived
    with run_dir_lock(tmp_path / "dreg-1-lam0.9-s0"), run_dir_lock(tmp_path / "lm-s1"):
        module.cmd_table(arguments)
        module.cmd_archive(argparse.Namespace(out=str(tmp_path), records=str(records)))
    printed = capsys.readouterr().out
    archived = sorted(path.name for path in records.iterdir())
    assert "dreg-1-lam0.9-s0" not in archived and "lm-s1" not in archived and len(archived) == 6
    assert "  lm-s1: training now, not in the table\n" in printed
    alone = argparse.Namespace(**{**vars(arguments), "out": str(tmp_path / "gone"), "records": [str(records)]})
    alone.png = ""
    module.cmd_table(alone)
    from_records = capsys.readouterr().out
    training = "  dreg-1-lam0.9-s0: 4.0000, training now: not a candidate\n"
    assert from_records.split("\nvalidation perplexity")[0] == printed.split("\nvalidation perplexity")[0].replace(
        training, ""
    ).replace("  lm-s1: training now, not in the table\n", "")
    assert "dreg-1-lam0.9-s0: 4.0000, training now: not a candidate" in printed
    assert "python -m experiments.report thesis-ch5" in printed and "| dreg-1 |" not in printed  # no table
    chosen = "dreg-1-lam0.3-s0: valid NLL 4.9000, test ppl 121.50, NLL 4.8000, KL per token (Û − Ŝ) 0.0500"
    assert chosen + ", rate per token 0.1000" in printed
    assert printed.count("  dreg-16-kl-lam0-s0: valid NLL 4.8000") == 2  # one run, both arms' λ = 0 candidate
    assert "lm-s0: valid NLL 4.7500, test ppl 110.00, NLL 4.7000" in printed
    assert "dreg-1-lam0.6-s0" not in printed.split("each chosen run")[1].split("every candidate")[0]
    curves = printed.split("validation perplexity per epoch")[1]  # every run's curve, from its log
    assert "  dreg-1-lam0.6-s0: 164.0, 127.7\n  dreg-1-lam0.6-s0 KL: 0.000, 0.250\n" in curves
    assert "  lm-s0: 121.5\n" in curves and "lm-s0 KL" not in curves
    assert png.stat().st_size > 0
    todo = module.pending(
        tmp_path / "new", ["dreg-16-kl", "dreg-16-renyi"], [0.0, 0.3], 2.0, [0], [], tmp_path / "no-records"
    )
    assert sorted(run.name for run in todo) == [
        "dreg-16-kl-lam0-s0",
        "dreg-16-kl-lam0.3-s0",
        "dreg-16-renyi-lam0.3-a2-s0",
    ]
    todo = module.pending(
        tmp_path / "new", ["dreg-16-renyi"], [0.0, 0.3], 2.0, [0], [], tmp_path / "no-records"
    )  # the KL run stands in
    assert sorted(run.name for run in todo) == ["dreg-16-kl-lam0-s0", "dreg-16-renyi-lam0.3-a2-s0"]
    todo = module.pending(tmp_path / "new", ["lm", "dreg-1"], [0.3, 0.45], 2.0, [0], [], records)
    assert sorted(run.name for run in todo) == ["dreg-1-lam0.45-s0"]  # the archived runs are done


def test_imm_driver_scores_test_with_the_kn_bigram_mixture_built_once(tmp_path: Path, monkeypatch) -> None:
    """Every run's test scoring also mixes the model with IMM's restricted model (the modified KN bigram of
    PTB train, α tuned on valid: the cheap baseline the page sets beside each arm); the ARPA file is written
    once per run folder, never half-written."""
    import subprocess

    module = experiment("imm_ptb_table2_converged")
    builds: list[list[str]] = []

    def fake_build(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        builds.append(command)
        Path(command[command.index("--out") + 1]).write_text("\\data\\\n")
        return subprocess.CompletedProcess(command, 0, "{}", "")

    monkeypatch.setattr(module.subprocess, "run", fake_build)
    out = tmp_path / "runs"
    (valid, valid_cmd), (test, test_cmd) = module.score_commands(out, "none-s0", 0)
    arpa = out / module.RESTRICTED_ARPA
    assert (valid.name, test.name) == ("eval-valid.json", "eval-test.json")
    assert "--interpolate" not in valid_cmd
    assert test_cmd[test_cmd.index("--interpolate") + 1] == str(arpa) and arpa.is_file()
    assert builds[0][builds[0].index("--order") + 1] == "2" and "modified-kn" in builds[0]
    assert [path.name for path in out.iterdir()] == [module.RESTRICTED_ARPA]  # no temporary file left
    module.score_commands(out, "imm-positions-8-s0", 0)
    assert len(builds) == 1  # written once


def test_imm_driver_scores_each_run_as_soon_as_it_ends(tmp_path: Path, monkeypatch) -> None:
    """A run that ends by itself is scored at once, its scoring taking the slot before the next training
    job: a queue that outlasts a working session still leaves the numbers of the runs it finished. Runs
    that ended in an earlier call without scores are scored first. Each run scored is kept as a record
    at once, before the next training job starts."""
    module = experiment("imm_ptb_table2_converged")

    def job(name: str) -> object:
        code = (
            "import json, pathlib, sys, time; run = pathlib.Path(sys.argv[1]); run.mkdir(parents=True); "
            "(run / 'metrics.jsonl').write_text('{}\\n'); "
            "(run / 'started').write_text(str(time.time())); print(json.dumps({'epoch': 1, 'early_stopped': True}))"
        )
        return module.Job(name, "none", 0, [sys.executable, "-c", code, str(tmp_path / name)])

    def fake_scores(out: Path, name: str, induced_tokens: int) -> list[tuple[Path, list[str]]]:
        code = "import json, time; time.sleep(0.2); print(json.dumps({'ppl': 1.0, 'at': time.time()}))"
        return [(out / name / f"eval-{split}.json", [sys.executable, "-c", code]) for split in ("valid", "test")]

    monkeypatch.setattr(module, "score_commands", fake_scores)
    earlier = tmp_path / "noising-s0"  # trained by an earlier call, never scored
    (earlier / "checkpoints").mkdir(parents=True)
    (earlier / "train-summary.json").write_text('{"epoch": 20}')
    (earlier / "metrics.jsonl").write_text("{}\n")
    jobs = [job("noising-s0"), job("none-s0"), job("none-s1")]
    records = tmp_path / "records"
    module.run_jobs(jobs, 1, math.inf, tmp_path, tmp_path / "jobs.jsonl", induced_tokens=0, records=records, keep=True)
    assert sorted(path.name for path in records.iterdir()) == ["noising-s0", "none-s0", "none-s1"]
    kept = (records / "none-s0" / "record.json").stat().st_mtime
    assert kept <= float((tmp_path / "none-s1" / "started").read_text())  # archived before the next began
    job = json.loads((records / "none-s1" / "record.json").read_text())["jobs"][0]
    assert job["run"] == "none-s1" and job["commit"] and "cores" in job["machine"]  # the job's commit and machine
    assert not (earlier / "started").exists()  # not trained again
    scored_earlier = json.loads((earlier / "eval-test.json").read_text())["at"]
    assert scored_earlier <= float((tmp_path / "none-s0" / "started").read_text())
    first = json.loads((tmp_path / "none-s0" / "eval-test.json").read_text())
    assert first["at"] <= float((tmp_path / "none-s1" / "started").read_text())  # scored before the next began
    assert (tmp_path / "none-s1" / "eval-test.json").is_file()
    assert json.loads((tmp_path / "none-s1" / "train-summary.json").read_text())["early_stopped"] is True


def test_smim_driver_reads_a_record_as_it_is(tmp_path: Path, monkeypatch, capsys) -> None:
    """A run found only as a record is taken from its cached report (never loaded or scored), an LM's by
    its task; a record without the report the settings ask for is refused with one line naming it. The
    arms are the protocol's unless named."""
    module = experiment("smim_ptb_table2")
    records = tmp_path / "records"
    report = {"bounds": {"nll": 160.0}, "melbo": {"nll": 101.0}, "widened": {"-4": {"nll": 123.0}}}
    lm = {"sentence_nll": 107.0, "ppl": 132.0}
    for name, task, file, payload in (
        ("smim-s0", "sentence-latent", "report-test-iwae500-all.json", report),
        ("sentence-lstm-s0", "sentence-lm", "report-test-all.json", {"values": lm}),
    ):
        run = records / name
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(f"run:\n  seed: 0\ntask:\n  name: {task}\n")
        (run / "train-summary.json").write_text("{}")
        (run / "record.json").write_text("{}")
        (run / file).write_text(json.dumps(payload))
    argv = ["smim_ptb_table2.py", "--runs", str(tmp_path / "none"), "--records", str(records), "--samples", "500"]
    monkeypatch.setattr(sys, "argv", [*argv, "--seeds", "0", "--sentences", "0", "--proposal-floors", "-4"])
    module.main()
    printed = capsys.readouterr().out.splitlines()
    assert "smim-s0: report-test-iwae500-all.json (record)" in printed
    assert "sentence-lstm-s0: report-test-all.json (record)" in printed
    assert "svae-s0: not trained, not scored" in printed  # an arm of the protocol without a run
    assert "2 runs with their reports (2 of them records); the page: python -m experiments.report smim" in printed
    monkeypatch.setattr(sys, "argv", [*argv, "--list-arms"])
    module.main()
    listed = capsys.readouterr().out.split()
    assert {"smim", "smim-floor-6", "smim-floor-14", "svae", "svae-kl", "ae", "sentence-lstm", "gru-lm"} == set(listed)
    # the runs are each arm at the seeds its comparisons read: the log-variance floors at seed 0 alone
    monkeypatch.setattr(sys, "argv", [*argv, "--list-runs", "--seeds", "1"])
    module.main()
    runs = capsys.readouterr().out.split()
    assert "smim-s1" in runs and not any("floor" in name for name in runs)
    monkeypatch.setattr(sys, "argv", [*argv, "--list-runs", "--seeds", "0"])
    module.main()
    assert {"smim-floor-6-s0", "smim-floor-14-s0"} <= set(capsys.readouterr().out.split())
    # a record scored before the aggregated-prior bound existed is read without it, said on stderr
    monkeypatch.setattr(sys, "argv", [*argv, "--seeds", "0", "--sentences", "0", "--aggregate-prior", "--arms", "smim"])
    module.main()
    captured = capsys.readouterr()
    assert "smim-s0: report-test-iwae500-all.json (record)" in captured.out.splitlines()
    assert "smim-s0: a record scored before the aggregated-prior bound existed, read without it" in captured.err
    # one whose bound has q alone as its proposal, asked with neighbour draws (the default), is read as it is
    saved = records / "smim-s0" / "report-test-iwae500-all.json"
    saved.write_text(json.dumps({**report, "aggregate_prior": {"nll_aggregate_prior": 900.0}}))
    module.main()
    captured = capsys.readouterr()
    assert "smim-s0: report-test-iwae500-all.json (record)" in captured.out.splitlines()
    assert "another proposal (0 neighbours x 0 draws), read as it is" in captured.err
    monkeypatch.setattr(
        sys, "argv", [*argv, "--seeds", "0", "--sentences", "0", "--aggregate-prior", "--aggregate-neighbors", "0", "1"]
    )
    module.main()
    assert "another proposal" not in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", [*argv, "--aggregate-neighbors", "2", "0"])
    with pytest.raises(SystemExit, match="--aggregate-neighbors M D needs"):
        module.main()
    monkeypatch.setattr(sys, "argv", [*argv, "--sentences", "1000", "--arms", "smim", "--seeds", "0"])
    with pytest.raises(SystemExit, match="smim-s0 is a record without report-test-iwae500-1000.json"):
        module.main()


def test_smim_driver_trains_each_arm_with_the_protocols_config() -> None:
    """smim_ptb_cpu.sh trains each arm with the config and overrides the protocol declares; BASE-zN (the larger
    latents of Table 7) is BASE's with model.latent=N; a name the protocol does not know is refused."""
    module = experiment("smim_ptb_table2")
    assert module.train_args("smim") == ["configs/ptb/smim-cpu.yaml"]
    kl = module.train_args("svae-kl")
    assert kl[0] == "configs/ptb/svae-cpu.yaml" and "objective.elbo.anneal=linear" in kl
    assert module.train_args("ae-z128") == ["configs/ptb/ae-cpu.yaml", "model.latent=128"]
    for arm, _ in module.runs_of(module.load_protocol("smim"), "smim-ptb-cpu"):
        assert (ROOT / module.train_args(arm)[0]).is_file()
    with pytest.raises(SystemExit, match="bogus: not an arm"):
        module.train_args("bogus")


def test_smim_table_archives_each_run_as_soon_as_it_is_scored(tmp_path: Path, monkeypatch, capsys) -> None:
    """With ``--archive``, a run is kept as a record right after its report, before the next run is
    scored: a scoring queue cut short still leaves every report it finished."""
    module = experiment("smim_ptb_table2")
    runs, records = tmp_path / "runs", tmp_path / "records"
    for seed in (0, 1):
        run = runs / f"smim-s{seed}"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text("run:\n  seed: 0\n")
        (run / "metrics.jsonl").write_text("{}\n")
        (run / "train-summary.json").write_text(json.dumps({"elapsed": 3600.04} if seed else {}))
    seen: list[list[str]] = []  # the records present when each run was scored

    def fake_report(run: Path, samples: int, sentences: int, *settings: object, **options: object) -> dict[str, object]:
        seen.append(sorted(path.name for path in records.iterdir()) if records.is_dir() else [])
        bounds = {"nll": 1.0, "ppl": 2.0, "rate": 0.5, "mutual_information": 0.4, "active_units": 3}
        report = {"bounds": bounds, "reconstruction": {"bleu1": 0.3, "bleu1_authors": 0.3},
                  "latent_entropy": {"entropy": 1.0}, "melbo": {"nll": 0.9}}  # fmt: skip
        (run / module.report_path(run, sentences, samples).name).write_text(json.dumps(report))
        return report

    monkeypatch.setattr(module, "latent_run_report", fake_report)
    argv = ["smim_ptb_table2.py", "--runs", str(runs), "--records", str(records), "--seeds", "0,1", "--archive"]
    monkeypatch.setattr(sys, "argv", argv)
    module.main()
    assert seen == [[], ["smim-s0"]]
    assert sorted(path.name for path in records.iterdir()) == ["smim-s0", "smim-s1"]
    assert (records / "smim-s1" / "report-test-iwae20-1000.json").is_file()
    assert "smim-s1: report-test-iwae20-1000.json (run)" in capsys.readouterr().out.splitlines()
    # the record names its jobs: the arm's training command from the protocol, with its wall time, and the scoring
    known = json.loads((records / "smim-s1" / "record.json").read_text())
    train, score = known["jobs"]
    assert train["command"].startswith("infolm train configs/ptb/smim-cpu.yaml") and train["wall_s"] == 3600.0
    assert f"run.dir={runs / 'smim-s1'}" in train["command"] and train["command"].endswith("run.seed=1")
    assert "wall_s" not in json.loads((records / "smim-s0" / "record.json").read_text())["jobs"][0]
    assert score["command"].endswith("--seeds 0,1 --archive") and "machine" in known and "commit" in known


def test_imm_driver_records_stand_for_ended_runs(tmp_path: Path, capsys) -> None:
    """An ended, scored run is archived as a record with its scores and no weights; ``train`` does not
    train a recorded run again, and skips (saying why) a continuation whose baseline is only a record:
    there are no weights to continue from, until ``--retrain-baselines`` trains the baseline again."""
    import argparse

    module = experiment("imm_ptb_table2_converged")
    out, records = tmp_path / "out", tmp_path / "records"
    for name, ppl in (("baseline-s0", 92.0), ("none-s0", 89.0), ("noising-s1", 88.0)):
        run = out / name
        (run / "checkpoints" / "best").mkdir(parents=True)
        (run / "checkpoints" / "best" / "model.safetensors").write_bytes(name.encode())
        (run / "vocab.json").write_text('["<unk>"]')
        log = [{"step": 1, "epoch": 0, "split": "valid", "loss": math.log(ppl)}, {"step": 2, "elapsed": 30.0}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
        (run / "config.yaml").write_text("train:\n  epochs: 20\n")
        (run / "train-summary.json").write_text(json.dumps({"epoch": 3, "early_stopped": True}))
        (run / "eval-valid.json").write_text(json.dumps({"ppl": ppl}))
        if name != "noising-s1":  # not scored yet: not archived
            (run / "eval-test.json").write_text(json.dumps({"ppl": ppl - 3}))
    module.cmd_archive(argparse.Namespace(out=str(out), records=str(records), parked=str(tmp_path / "parked")))
    assert sorted(path.name for path in records.iterdir()) == ["baseline-s0", "none-s0"]
    assert json.loads((records / "none-s0" / "eval-test.json").read_text()) == {"ppl": 86.0}
    kept = sorted(str(path.relative_to(records)) for path in records.rglob("*") if path.is_file())
    assert not any("checkpoints" in name or name.endswith(("vocab.json", ".safetensors")) for name in kept)
    baseline = json.loads((records / "baseline-s0" / "record.json").read_text())
    assert "weights" not in baseline
    assert baseline["best_weights_sha256"] == module.sha256_file(
        out / "baseline-s0" / "checkpoints" / "best" / "model.safetensors"
    )
    assert module.weights_sha256(records / "baseline-s0") == baseline["best_weights_sha256"]

    def job(name: str, after: str | None = None) -> object:
        code = "import pathlib, sys; pathlib.Path(sys.argv[1]).mkdir(parents=True); print('{\"epoch\": 1}')"
        arm = name.rsplit("-s", 1)[0]
        return module.Job(name, arm, 0, [sys.executable, "-c", code, str(tmp_path / "new" / name)], after=after)

    (tmp_path / "new").mkdir()
    jobs = [job("baseline-s0"), job("none-s0", "baseline-s0"), job("noising-s0", "baseline-s0")]
    module.run_jobs(jobs, 1, math.inf, tmp_path / "new", tmp_path / "jobs.jsonl", records=records)
    assert not any((tmp_path / "new").iterdir())  # the baseline and none are recorded; noising cannot start
    assert "skipping noising-s0: baseline-s0 is only a record" in capsys.readouterr().err
    module.run_jobs(jobs, 1, math.inf, tmp_path / "new", tmp_path / "jobs.jsonl", records=records, retrain=True)
    trained = sorted(path.name for path in (tmp_path / "new").iterdir() if path.is_dir())
    assert trained == ["baseline-s0", "noising-s0"]  # the baseline again, then what continues it; none is a record


def test_imm_driver_continues_from_the_baseline_it_trains_beside(tmp_path: Path) -> None:
    """Records keep no weights, so a seed's continuations start from its baseline under ``--out``, also
    when the baseline is a record; the matched control of an arm asked for is trained with it."""
    module = experiment("imm_ptb_table2_converged")
    new = tmp_path / "new"
    assert module.continued_from(new, 0) == new / "baseline-s0"
    command = module.train_command(new, "noising", 0, [], module.continued_from(new, 0))
    assert f"run.init_from={new / 'baseline-s0'}" in command
    control = {"noising": "none", "imm-released-positions-8": "none-halve-reload", "none": "baseline"}
    assert module.with_controls(["imm-released-positions-8", "noising", "none"], control) == [
        "none-halve-reload",
        "imm-released-positions-8",
        "none",
        "noising",
    ]


def test_imm_driver_trains_again_a_continuation_of_other_weights_than_its_baseline(tmp_path: Path, capsys) -> None:
    """That continuations start from the same checkpoint is checked: a continuation's job record and
    record keep the sha256 of the weights it started from, a baseline's record that of its best weights
    (not the weights); once its seed's baseline holds other weights (trained again), ``train`` trains the
    continuation again, while a continuation of the baseline's weights stays a record."""
    module = experiment("imm_ptb_table2_converged")
    out, records = tmp_path / "out", tmp_path / "records"

    def run_dir(name: str, weights: bytes | None, ppl: float) -> Path:
        run = out / name
        run.mkdir(parents=True)
        if weights is not None:
            (run / "checkpoints" / "best").mkdir(parents=True)
            (run / "checkpoints" / "best" / "model.safetensors").write_bytes(weights)
            (run / "vocab.json").write_text('["<unk>"]')
        log = [{"step": 1, "epoch": 1, "split": "valid", "loss": math.log(ppl)}, {"step": 1, "elapsed": 30.0}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
        (run / "train-summary.json").write_text(json.dumps({"epoch": 1, "early_stopped": True}))
        for split in ("valid", "test"):
            (run / f"eval-{split}.json").write_text(json.dumps({"ppl": ppl}))
        return run

    run_dir("baseline-s0", b"first baseline", 92.0)
    base = out / "baseline-s0"
    for name, ppl in (("none-s0", 89.0), ("noising-s0", 88.0)):
        run_dir(name, b"a continuation", ppl)
        command = module.train_command(out, name.rsplit("-s", 1)[0], 0, [], base)
        line = {"run": name, "command": " ".join(command), "init_sha256": module.weights_sha256(base)}
        with (out / "jobs.jsonl").open("a") as handle:
            handle.write(json.dumps(line) + "\n")
    module.cmd_archive(argparse.Namespace(out=str(out), records=str(records), parked=str(tmp_path / "parked")))
    first = module.weights_sha256(records / "baseline-s0")
    assert first == module.weights_sha256(base) and first is not None
    known = json.loads((records / "none-s0" / "record.json").read_text())
    assert known["continued_from"] == {"init_from": str(base), "model_sha256": first}
    assert module.started_from(records / "none-s0") == {first}
    # the baseline trained again (another CPU: other weights); noising continued it again, none did not
    shutil.rmtree(out)
    run_dir("baseline-s0", b"baseline trained again", 91.0)
    module.cmd_archive(argparse.Namespace(out=str(out), records=str(records), parked=str(tmp_path / "parked")))
    again = module.weights_sha256(records / "baseline-s0")
    assert again != first
    noising = json.loads((records / "noising-s0" / "record.json").read_text())
    noising["jobs"][0]["init_sha256"] = noising["continued_from"]["model_sha256"] = again
    (records / "noising-s0" / "record.json").write_text(json.dumps(noising))

    def job(name: str) -> object:  # the continuations start from the baseline trained again, under out
        code = "import pathlib, sys; pathlib.Path(sys.argv[1]).mkdir(parents=True); print('{\"epoch\": 1}')"
        if name.startswith("baseline"):
            return module.Job(name, "baseline", 0, [sys.executable, "-c", code, str(out / name)])
        command = [sys.executable, "-c", code, str(out / name), f"run.init_from={out / 'baseline-s0'}"]
        return module.Job(name, name.rsplit("-s", 1)[0], 0, command, after="baseline-s0")

    jobs = [job("baseline-s0"), job("none-s0"), job("noising-s0")]
    log = tmp_path / "again.jsonl"
    module.run_jobs(jobs, 1, math.inf, out, log, records=records)
    trained = sorted(path.name for path in out.iterdir() if path.is_dir())
    assert trained == ["baseline-s0", "none-s0"]  # noising is a record, the baseline one too
    assert "none-s0: its record continued other weights than" in capsys.readouterr().err
    started = module.read_jsonl(log)
    assert [line["init_sha256"] for line in started] == [again]  # the job record keeps what it started from


def test_imm_driver_parks_what_has_not_ended_and_lays_it_out_again(tmp_path: Path) -> None:
    """``park`` keeps the runs that have not ended (not those that have), the next ``train`` lays a
    parked run of its queue out again where none is, and a parked copy goes once its run is a record."""
    module = experiment("imm_ptb_table2_converged")
    out, parked, records = tmp_path / "out", tmp_path / "parked", tmp_path / "records"
    for name, ended in (("baseline-s1", False), ("none-s0", True)):
        step = out / name / "checkpoints" / "step-00000010"
        step.mkdir(parents=True)
        (step / "model.safetensors").write_bytes(name.encode())
        (step / "trainer.pt").write_bytes(b"state")
        (out / name / "metrics.jsonl").write_text("{}\n")
        if ended:
            (out / name / "train-summary.json").write_text("{}")
            for split in ("valid", "test"):
                (out / name / f"eval-{split}.json").write_text(json.dumps({"ppl": 90.0}))
    module.cmd_park(argparse.Namespace(out=str(out), parked=str(parked), records=str(records)))
    assert sorted(path.name for path in parked.iterdir()) == ["baseline-s1"]
    assert (records / "none-s0" / "record.json").is_file()  # ended and scored: archived, not parked
    new = tmp_path / "new"
    module.unpark(parked, new, ["baseline-s1", "none-s1"])
    step = new / "baseline-s1" / "checkpoints" / "step-00000010"
    assert (step / "model.safetensors").read_bytes() == b"baseline-s1" and (step / "trainer.pt").is_file()
    (records / "baseline-s1").mkdir(parents=True)
    (records / "baseline-s1" / "train-summary.json").write_text("{}")
    module.drop_parked(parked, records)
    assert (parked / "baseline-s1").is_dir()  # another run of it is recorded: this one is being trained again
    (out / "baseline-s1" / "train-summary.json").write_text("{}")
    for split in ("valid", "test"):
        (out / "baseline-s1" / f"eval-{split}.json").write_text(json.dumps({"ppl": 90.0}))
    best = out / "baseline-s1" / "checkpoints" / "best"
    best.mkdir()
    (best / "model.safetensors").write_bytes(b"best")
    (out / "baseline-s1" / "vocab.json").write_text('["<unk>"]')
    shutil.rmtree(records / "baseline-s1")
    module.cmd_archive(argparse.Namespace(out=str(out), records=str(records), parked=str(parked)))
    assert not any(parked.iterdir())  # its record is the parked run, ended: the parked copy is dropped


@pytest.mark.parametrize("recorded", [True, False])
def test_imm_driver_waits_for_a_baseline_the_other_lane_trains(recorded: bool, tmp_path: Path, capsys) -> None:
    """A baseline that another call (the other lane) is training, again (its record kept no weights) or
    for the first time, is not started a second time; its continuations wait for it and start once it
    has ended, instead of being skipped."""
    import threading

    from infolm.training.run_lock import run_dir_lock

    module = experiment("imm_ptb_table2_converged")
    out, records = tmp_path / "out", tmp_path / "records"
    if recorded:
        (records / "baseline-s0").mkdir(parents=True)
        (records / "baseline-s0" / "train-summary.json").write_text("{}")
        (records / "baseline-s0" / "record.json").write_text("{}")
    baseline = out / "baseline-s0"
    baseline.mkdir(parents=True)
    (baseline / "metrics.jsonl").write_text("{}\n")
    locked, release = threading.Event(), threading.Event()

    def other_lane() -> None:
        with run_dir_lock(baseline):
            locked.set()
            release.wait(30)
            (baseline / "train-summary.json").write_text("{}")

    thread = threading.Thread(target=other_lane)
    thread.start()
    locked.wait(30)
    code = "import pathlib, sys; pathlib.Path(sys.argv[1]).mkdir(parents=True); print('{\"epoch\": 1}')"
    command = [sys.executable, "-c", code, str(out / "noising-s0")]
    noising = module.Job("noising-s0", "noising", 0, command, after="baseline-s0")
    jobs = [module.Job("baseline-s0", "baseline", 0, ["false"]), noising]
    threading.Timer(2.0, release.set).start()
    module.run_jobs(jobs, 1, math.inf, out, tmp_path / "jobs.jsonl", records=records)
    thread.join()
    assert (out / "noising-s0").is_dir()
    assert [job["run"] for job in module.read_jsonl(tmp_path / "jobs.jsonl")] == ["noising-s0"]  # no second baseline
    assert "skipping noising-s0" not in capsys.readouterr().err


def test_table2_driver_reads_its_arms_seeds_and_controls_from_the_protocol() -> None:
    """The driver trains what experiments/protocols/imm.yaml declares for its records: every arm there is
    one it can train, and each arm is paired with the control its comparison names."""
    module = experiment("imm_ptb_table2_converged")
    seeds, arms, control = module.declared()
    assert seeds == [0, 1, 2]
    assert set(arms) <= set(module.ARMS) and "baseline" not in arms
    assert {"none", "noising", "imm-positions-8", "none-halve-reload", "imm-released-positions-8"} <= set(arms)
    assert control["noising"] == control["imm-positions-8"] == "none"
    assert control["imm-released-positions-8"] == "none-halve-reload"
    assert arms.index("none") < arms.index("noising") and arms.index("none-halve-reload") < arms.index(
        "imm-released-positions-8"
    )


def test_table2_driver_dry_run_lists_the_protocol_runs_and_writes_nothing(tmp_path: Path, monkeypatch, capsys) -> None:
    """``train --dry-run`` prints each run the protocol asks for (an arm named brings its matched control),
    whether it is recorded, and its command; it creates, lays out and drops nothing."""
    module = experiment("imm_ptb_table2_converged")
    out, parked = tmp_path / "out", tmp_path / "parked"
    (parked / "none-s1").mkdir(parents=True)
    argv = ["driver", "train", "--dry-run", "--out", str(out), "--parked", str(parked), "--records", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [*argv, "--arms", "imm-released-positions-8", "--seeds", "1"])
    module.main()
    printed = capsys.readouterr()
    names = [line.split(" ", 1)[0] for line in printed.out.splitlines()]
    assert names == ["baseline-s1", "none-halve-reload-s1", "imm-released-positions-8-s1"]
    assert all("(to train)" in line for line in printed.out.splitlines())
    assert "none-halve-reload: the matched control" in printed.err
    assert not out.exists() and (parked / "none-s1").is_dir()


def test_table5_1_train_defaults_to_the_protocols_runs() -> None:
    """``train`` without a grid trains what ``experiments/protocols/thesis-ch5.yaml`` reads from the records."""
    module = experiment("thesis_table5_1")
    arms, lams, alpha, seeds = module.protocol_grid()
    assert set(arms) == {module.LM, *module.ARMS} and lams == [0.3] and alpha == 2.0 and seeds == [0, 1, 2]
