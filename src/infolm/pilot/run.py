"""Running a pilot: the source checkpoint, each arm's config, trainer and continuation, the result."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infolm.config import Config, load_config
from infolm.errors import InfolmError
from infolm.pilot.arms import Arm, check_arms
from infolm.pilot.report import finite, paired_differences, write_jsonl

STARTS = ("last", "best")
OPTIMIZER_STATES = ("checkpoint", "fresh")


@dataclasses.dataclass(frozen=True)
class PilotSettings:
    steps: int  # optimizer steps of every arm
    eval_every: int  # evaluate on valid at every step that is a multiple of this (and at the last)
    out: Path  # the output folder
    start: str = "last"  # last | best: the checkpoint the arms continue
    optimizer: str = "checkpoint"  # checkpoint | fresh: the optimizer state the arms start from
    seed: int | None = None  # the common seed (None: the run's run.seed)

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise InfolmError(f"--steps must be positive, got {self.steps}")
        if self.eval_every < 1:
            raise InfolmError(f"--eval-every must be positive, got {self.eval_every}")
        if self.start not in STARTS:
            raise InfolmError(f"--from must be one of {', '.join(STARTS)}, got {self.start!r}")
        if self.optimizer not in OPTIMIZER_STATES:
            raise InfolmError(f"--optimizer must be one of {', '.join(OPTIMIZER_STATES)}, got {self.optimizer!r}")


# --------------------------------------------------------------------------------------------- source
@dataclasses.dataclass
class Source:
    """What every arm starts from."""

    run_dir: Path
    config: Config
    weights: Path  # the checkpoint folder whose training weights the arms load
    step: int
    trainer_state: dict[str, Any] | None  # optimizer, data position, carried state; None: none kept


def find_source(run_dir: str | Path, start: str, optimizer: str) -> Source:
    from infolm.training import checkpoint as ckpt

    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise InfolmError(f"{run_dir} is not an infolm run directory (no config.yaml)")
    config = load_config(run_dir / "config.yaml")
    config.run.dir = str(run_dir)
    step = 0
    if start == "last":
        weights = ckpt.latest_checkpoint(run_dir)
        if weights is None:
            raise InfolmError(f"run directory {run_dir} has no step checkpoint to continue")
        state_folder: Path | None = weights
    else:
        weights = run_dir / ckpt.CHECKPOINTS / ckpt.BEST
        if not (weights / "meta.json").is_file():
            raise InfolmError(f"run directory {run_dir} has no best/ checkpoint (--from last continues its latest)")
        step = int(json.loads((weights / "meta.json").read_text()).get("step", 0))
        state_folder = run_dir / ckpt.CHECKPOINTS / f"step-{step:08d}"
        if not (state_folder / "trainer.pt").is_file():
            if optimizer == "checkpoint":
                raise InfolmError(
                    f"{run_dir}: best/ was written at step {step} and no step checkpoint of that step is kept, so "
                    "its optimizer state is not either; use --optimizer fresh or --from last"
                )
            sys.stderr.write(f"infolm: note: pilot: no step checkpoint of best/'s step {step}: the data starts over\n")
            state_folder = None
    try:
        state = ckpt.load_trainer_state(state_folder) if state_folder is not None else None
    except Exception as error:  # torch.load raises its own types on damaged files
        raise InfolmError(f"cannot read {state_folder}/trainer.pt: {str(error).strip().splitlines()[0]}") from None
    if state is not None:
        step = int(state["step"])
    return Source(run_dir, config, weights, step, state)


def arm_config(source: Source, arm: Arm, settings: PilotSettings, seed: int) -> Config:
    """The run's config with the arm's overrides and the pilot's settings (the same for every arm)."""
    from infolm.build import validate_plugins

    try:
        config = load_config(source.run_dir / "config.yaml", list(arm.overrides))
        validate_plugins(config)
    except InfolmError as error:
        raise InfolmError(f"arm {arm.name}: {error}") from None
    if settings.optimizer == "checkpoint" and config.optim.name != source.config.optim.name:
        raise InfolmError(
            f"arm {arm.name}: optim.name={config.optim.name} cannot continue the run's {source.config.optim.name} "
            "state; use --optimizer fresh"
        )
    last = source.step + settings.steps
    epoch = int(source.trainer_state["epoch"]) if source.trainer_state is not None else 0
    config.run.dir = str(settings.out / arm.name)
    config.run.seed = seed
    config.train = dataclasses.replace(
        config.train,
        max_steps=last,
        epochs=max(config.train.epochs, epoch + settings.steps + 1),  # the step limit ends every arm
        eval_every=settings.eval_every,
        early_stopping=0,  # every arm runs every step: the curves stay paired
        checkpoint_every=last + 1,  # no checkpoint on the way; the Trainer writes one at the end
        checkpoint_minutes=None,
        keep_checkpoints=1,
    )
    return config


# ---------------------------------------------------------------------------------------------- arms run
def continue_from(trainer: Any, source: Source, optimizer: str, same_terms: bool) -> None:
    """Put ``source``'s step, data position, carried state, averager and (``checkpoint``) optimizer state
    into a freshly built trainer, keeping the arm's optimizer settings."""
    state = source.trainer_state
    trainer.step = source.step
    if state is not None:
        trainer.epoch = int(state["epoch"])
        trainer.batches.load_state_dict(state["batcher"])
        trainer.state = state["recurrent_state"]
        if trainer.averager is not None and "averager" in state:
            try:
                trainer.averager.load_state_dict(state["averager"])
            except (ValueError, KeyError, RuntimeError) as error:
                first = str(error).strip().splitlines()[0]
                raise InfolmError(
                    f"arm {Path(trainer.run_dir).name}: optim.average cannot continue the checkpoint's ({first})"
                ) from None
    if optimizer == "checkpoint":
        assert state is not None  # find_source refuses a checkpoint without one
        saved = state["optimizers"] if same_terms else state["optimizers"][:1]  # a term's own: only its own
        for opt, opt_state in zip(trainer.optimizers, saved):
            settings = [{k: v for k, v in group.items() if k != "params"} for group in opt.param_groups]
            try:
                opt.load_state_dict(opt_state)
            except (ValueError, KeyError, RuntimeError) as error:
                first = str(error).strip().splitlines()[0]
                raise InfolmError(
                    f"arm {Path(trainer.run_dir).name}: cannot continue the checkpoint's optimizer state ({first}); "
                    "use --optimizer fresh"
                ) from None
            for group, own in zip(opt.param_groups, settings):
                group.update(own)  # the moments are the checkpoint's, the settings the arm's
    trainer.initial_restart_state = copy.deepcopy(trainer.restart_state())  # a divergence restart's fallback


def run_arm(source: Source, arm: Arm, config: Config, corpus: Any, settings: PilotSettings) -> dict[str, Any]:
    """Train one arm; its evaluations (the start's first) and why it stopped early, if it did."""
    from infolm.build import (
        build_averager,
        build_model,
        build_objective,
        build_task,
        eos_of,
        init_objective_state,
        prepare_run_dir,
        run_meta,
        unk_of,
    )
    from infolm.objectives.own_streams import OwnStreams
    from infolm.training import Trainer, seed_everything
    from infolm.training import checkpoint as ckpt

    seed_everything(config.run.seed)  # the same objects (a term's own weights) in every arm
    model = build_model(config, len(corpus.vocab), eos_of(corpus.vocab), unk_of(corpus.vocab))
    try:
        missing = ckpt.load_weights(model, source.weights, raw=True)
    except Exception as error:  # safetensors and load_state_dict raise their own types
        raise InfolmError(f"arm {arm.name}: cannot load {source.weights}: {str(error).splitlines()[0]}") from None
    if missing:
        raise InfolmError(f"arm {arm.name}: {source.weights} lacks weights the arm's model needs: {missing[0]}, ...")
    objective = OwnStreams(build_objective(config), config.run.seed)
    objective.setup(corpus, model)
    init_objective_state(objective, source.run_dir, settings.start)
    averager = build_averager(config, model)
    prepare_run_dir(config, corpus, list(arm.overrides))
    trainer = Trainer(config, model, objective, build_task(config, corpus), averager, run_meta(config, corpus))
    same_terms = set(config.objective) == set(source.config.objective)
    continue_from(trainer, source, settings.optimizer, same_terms)
    first = trainer.evaluate("valid")
    selection = first.log_name(first.selection)
    curve: list[dict[str, Any]] = [{"step": trainer.step, "values": first.logged()}]
    stopped = None
    try:
        trainer.fit()  # seeds everything with run.seed (a fresh start), then trains to train.max_steps
    except InfolmError as error:
        if not getattr(trainer, "_diverged", False):
            raise
        stopped = str(error)  # the divergence rule's line: where and why
    for line in (Path(config.run.dir) / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("split") == "valid":
            curve.append({"step": record["step"], "values": {k: record[k] for k in curve[0]["values"]}})
    return {"curve": curve, "selection": selection, "higher_is_better": first.higher_is_better, "stopped": stopped}


def run_pilot(run_dir: str | Path, arms: Sequence[Arm], control: str | None, settings: PilotSettings) -> dict[str, Any]:
    """Every arm continued from ``run_dir``'s checkpoint as ``settings`` say; the result (also written to
    ``settings.out``): each arm's curve and its paired differences from the control's."""
    import torch

    from infolm.build import check_train_data, git_commit, task_data, versions
    from infolm.data.vocab import Vocab

    control = check_arms(arms, control)
    source = find_source(run_dir, settings.start, settings.optimizer)
    seed = source.config.run.seed if settings.seed is None else settings.seed
    configs = {arm.name: arm_config(source, arm, settings, seed) for arm in arms}  # every arm checked first
    if settings.out.resolve() == source.run_dir.resolve():
        raise InfolmError(f"--out {settings.out} is the run directory itself; give another folder")
    for arm in arms:
        taken = settings.out / arm.name
        if (taken.exists() and any(taken.iterdir())) or (settings.out / f"{arm.name}.jsonl").exists():
            raise InfolmError(f"{taken} holds an earlier pilot's arm; give another --out or remove it")
    corpus = task_data(configs[control])  # the arms share data and task settings
    check_train_data(configs[control], corpus)
    if Vocab.load(source.run_dir / "vocab.json").itos != corpus.vocab.itos:
        raise InfolmError(f"the data of {source.run_dir} no longer gives the vocabulary the run was trained with")
    if source.config.run.deterministic:
        torch.use_deterministic_algorithms(True)
    settings.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[str, Any]] = {}
    wall: dict[str, float] = {}
    for index, arm in enumerate(arms, 1):
        steps = f"steps {source.step}..{source.step + settings.steps}"
        sys.stderr.write(f"infolm: pilot: arm {arm.name} ({index}/{len(arms)}): {steps}\n")
        began = time.monotonic()
        runs[arm.name] = run_arm(source, arm, configs[arm.name], corpus, settings)
        wall[arm.name] = round(time.monotonic() - began, 1)
    first = runs[control]
    result: dict[str, Any] = {
        "run_dir": str(source.run_dir),
        "start": settings.start,
        "start_step": source.step,
        "steps": settings.steps,
        "eval_every": settings.eval_every,
        "optimizer": settings.optimizer,
        "seed": seed,
        "control": control,
        "selection": first["selection"],
        "higher_is_better": first["higher_is_better"],
        "out": str(settings.out),
        # where and how long it ran, so that a pilot's folder describes its own job
        "job": {
            "argv": list(sys.argv),
            "commit": git_commit(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} threads",
            "versions": versions(),
            "wall_s": wall,
        },
        "arms": {},
    }
    for arm in arms:
        run = runs[arm.name]
        differences = paired_differences(run["curve"], first["curve"])
        result["arms"][arm.name] = {
            "overrides": list(arm.overrides),
            "run_dir": str(settings.out / arm.name),
            "stopped": run["stopped"],
            "curve": run["curve"],
            "differences": differences,
        }
        write_jsonl(
            settings.out / f"{arm.name}.jsonl", arm.name, control, first["selection"], run["curve"], differences
        )
    (settings.out / "pilot.json").write_text(json.dumps(finite(result), indent=1) + "\n")
    return result
