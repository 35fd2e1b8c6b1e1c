"""An arm of a pilot: a name and dotted overrides of the run's config, from ``--arm NAME:OVERRIDES`` or a
YAML file; the keys the pilot keeps the same for every arm are refused."""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from infolm.config import load_raw
from infolm.errors import InfolmError

ARM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
# What the pilot sets for every arm alike: the batches, the scored tokens, the length and the cadence.
PILOT_SECTIONS = ("run", "data", "task")
PILOT_KEYS = {
    "train",
    "train.max_steps",
    "train.epochs",
    "train.eval_every",
    "train.early_stopping",
    "train.patience_from_step",
    "train.checkpoint_every",
    "train.checkpoint_minutes",
    "train.keep_checkpoints",
}


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str
    overrides: tuple[str, ...] = ()


def make_arm(name: str, overrides: Sequence[str], where: str) -> Arm:
    """An arm, its name and overrides checked (``where`` names it in a refusal)."""
    if not ARM_NAME.match(name):
        raise InfolmError(f"{where}: an arm's name is letters, digits, '_', '.' or '-' (a folder name), got {name!r}")
    for item in overrides:
        if not isinstance(item, str) or (not item.startswith("~") and "=" not in item):
            raise InfolmError(f"{where}: override {item!r} is not of the form key=value (or ~key)")
        key = item.lstrip("~").split("=", 1)[0].strip()
        if key.split(".")[0] in PILOT_SECTIONS or key in PILOT_KEYS:
            raise InfolmError(
                f"{where}: {key} is set by the pilot, the same for every arm (run.*, data.*, task.* and the "
                "training length and cadence): the arms continue one run on the same batches and are scored "
                "on the same tokens"
            )
    return Arm(name, tuple(overrides))


def parse_arm(text: str) -> Arm:
    """``NAME:OVERRIDES`` of ``--arm``: the overrides split as a shell splits words (quotes group)."""
    name, colon, rest = text.partition(":")
    if not colon:
        raise InfolmError(
            f"--arm {text!r}: write NAME:OVERRIDES, e.g. imm:objective.imm.weight=0.2 (mle: for the run's own config)"
        )
    try:
        overrides = shlex.split(rest)
    except ValueError as error:
        raise InfolmError(f"--arm {text!r}: {error}") from None
    return make_arm(name.strip(), overrides, f"--arm {text!r}")


def read_arms_file(path: str | Path) -> tuple[list[Arm], str | None]:
    """Arms from YAML, and the control it names (if any)::

    control: mle                            # optional; default: the first arm
    arms:
      mle: []                               # the run's own config
      imm: [objective.imm.weight=0.2]       # overrides as on the command line
    """
    raw = load_raw(path)
    unknown = sorted(set(raw) - {"arms", "control"})
    if unknown:
        raise InfolmError(f"arms file {path}: unknown key {unknown[0]!r}; known: arms, control")
    arms = raw.get("arms")
    if not isinstance(arms, dict) or not arms:
        raise InfolmError(f"arms file {path}: 'arms' must map arm names to lists of overrides")
    out = []
    for name, overrides in arms.items():
        if overrides is None:
            overrides = []
        if not isinstance(overrides, list):
            raise InfolmError(f"arms file {path}: arm {name!r} must be a list of key=value overrides")
        out.append(make_arm(str(name), [str(item) for item in overrides], f"arms file {path}, arm {name!r}"))
    control = raw.get("control")
    if control is not None and not isinstance(control, str):
        raise InfolmError(f"arms file {path}: control must be an arm's name, got {control!r}")
    return out, control


def select_arms(arms: Sequence[Arm], control: str | None, names: Sequence[str]) -> list[Arm]:
    """The control (``control``, default the first arm) and the arms named in ``names``, in their order:
    one arms file split over processes, each with the control beside its share (``--only``)."""
    known = [arm.name for arm in arms]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise InfolmError(f"--only: unknown arm {unknown[0]!r}; the arms are {', '.join(known)}")
    if control is not None and control not in known:
        raise InfolmError(f"unknown control arm {control!r}; the arms are {', '.join(known)}")
    keep = {control if control is not None else (known[0] if known else ""), *names}
    return [arm for arm in arms if arm.name in keep]


def check_arms(arms: Sequence[Arm], control: str | None) -> str:
    """The control's name (default: the first arm's) once the arms are distinct and at least two."""
    names = [arm.name for arm in arms]
    if len(names) < 2:
        raise InfolmError("a pilot compares at least two arms (--arm NAME:OVERRIDES, twice or more)")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise InfolmError(f"arm {twice[0]!r} is given twice; arms need distinct names")
    control = names[0] if control is None else control
    if control not in names:
        raise InfolmError(f"unknown control arm {control!r}; the arms are {', '.join(names)}")
    return control
