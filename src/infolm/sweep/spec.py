"""The sweep file: search space, objectives, an optional grid, budget; read and validated by ``load_sweep``."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

from infolm.config import build_dataclass, load_raw
from infolm.errors import InfolmError

PARAM_TYPES = ("log_uniform", "uniform", "int", "choice")
DIRECTIONS = ("minimize", "maximize")
DEFAULT_TRIALS = 20  # the budget when a sweep file gives none


@dataclasses.dataclass
class ParamSpec:
    type: str  # log_uniform | uniform | int | choice
    low: float | None = None  # lower bound (log_uniform, uniform, int)
    high: float | None = None  # upper bound, inclusive (log_uniform, uniform, int)
    log: bool = False  # int: sample on a log scale
    values: list[Any] | None = None  # choice: the candidates

    def __post_init__(self) -> None:
        if self.type not in PARAM_TYPES:
            raise InfolmError(f"parameter type must be one of {', '.join(PARAM_TYPES)}; got {self.type!r}")
        if self.type == "choice":
            if not self.values:
                raise InfolmError("a choice parameter needs a non-empty list of values")
            return
        if self.low is None or self.high is None:
            raise InfolmError(f"a {self.type} parameter needs low and high")
        if self.low > self.high:
            raise InfolmError(f"low ({self.low}) must not exceed high ({self.high})")
        if (self.type == "log_uniform" or self.log) and self.low <= 0:
            raise InfolmError(f"a log-scale parameter needs low > 0, got {self.low}")
        if self.type == "int" and not (float(self.low).is_integer() and float(self.high).is_integer()):
            raise InfolmError(f"an int parameter needs integer bounds, got {self.low}..{self.high}")


@dataclasses.dataclass
class Objective:
    key: str  # a field of the run's selected validation record in metrics.jsonl (loss, mi, train_loss, ...)
    direction: str = "minimize"  # minimize | maximize

    def __post_init__(self) -> None:
        if not self.key:
            raise InfolmError("an objective needs a key (a field of the validation record, e.g. loss or mi)")
        if self.direction not in DIRECTIONS:
            raise InfolmError(f"objective {self.key!r}: direction must be minimize or maximize, got {self.direction!r}")


# Absent ``objectives``: the trial's best validation loss as the trainer reports it (its selection metric
# as a loss), the behaviour of sweeps before objectives could be declared.
DEFAULT_OBJECTIVES = [Objective("loss", "minimize")]


@dataclasses.dataclass
class SweepConfig:
    base: str  # the base training config (YAML); a relative path is read from the working directory
    dir: str  # output directory: study.db, results.csv, the plot, trial-* run directories
    trials: int | None = None  # budget: trials to finish (completed or failed), earlier runs counted (default 20)
    params: dict[str, Any] = dataclasses.field(default_factory=dict)  # dotted config key -> ParamSpec mapping
    overrides: list[str] = dataclasses.field(default_factory=list)  # fixed key=value overrides of every trial
    seed: int = 0  # seed of the sampler (TPE); a resume seeds it from this and the trials already run
    name: str | None = None  # study name in study.db (default: the sweep file's stem)
    # what a trial scores, read from its selected validation record; absent: the best validation loss
    objectives: list[Objective] | None = None
    grid: dict[str, list[Any]] | None = None  # dotted config key -> values: one tuned point per combination
    trials_per_point: int | None = None  # with a grid: trials per grid point, tuning params on the first objective
    # which validation record a declared objective reads: selected (the checkpoint the task's selection metric
    # chose) | last (the end of the schedule; a frontier run's lowest-NLL checkpoint is an early one whose
    # latents are still unused, so frontier sweeps read the last)
    at: str = "selected"

    def __post_init__(self) -> None:
        if self.at not in ("selected", "last"):
            raise InfolmError(f"sweep at must be selected or last, got {self.at!r}")
        if self.grid is None:
            if self.trials_per_point is not None:
                raise InfolmError("sweep trials_per_point needs a grid (without one the budget is trials)")
            self.trials = DEFAULT_TRIALS if self.trials is None else self.trials
            if self.trials < 1:
                raise InfolmError(f"sweep trials must be positive, got {self.trials}")
        else:
            if self.trials is not None:
                raise InfolmError("a grid sweep's budget is trials_per_point (trials per grid point), not trials")
            if self.trials_per_point is None or self.trials_per_point < 1:
                raise InfolmError(f"a grid sweep needs trials_per_point >= 1, got {self.trials_per_point}")
        if not self.params:
            raise InfolmError("sweep params is empty: name at least one dotted config key with a range")

    @property
    def declared(self) -> bool:
        """Whether the file declares its objectives (values read from the selected validation record)."""
        return self.objectives is not None


@dataclasses.dataclass
class Sweep:
    """A validated sweep file: its settings, search space, objectives and grid points."""

    config: SweepConfig
    space: dict[str, ParamSpec]
    objectives: list[Objective]
    points: list[dict[str, Any]]  # the grid's points (key -> value), in the file's order; [] without a grid

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]


def parse_objectives(objectives: list[Objective] | None) -> list[Objective]:
    """The declared objectives, checked (none twice); the default when the file declares none."""
    if objectives is None:
        return list(DEFAULT_OBJECTIVES)
    if not objectives:
        raise InfolmError("sweep objectives is empty: name at least one, e.g. {key: loss, direction: minimize}")
    keys = [o.key for o in objectives]
    duplicated = sorted({k for k in keys if keys.count(k) > 1})
    if duplicated:
        raise InfolmError(f"sweep objective {duplicated[0]!r} is declared twice")
    return objectives


def grid_points(grid: dict[str, list[Any]] | None, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every combination of the grid's values (the first key varies slowest), as key -> value mappings."""
    if grid is None:
        return []
    if not grid:
        raise InfolmError("sweep grid is empty: name a dotted config key with a list of values")
    for key, values in grid.items():
        if key in params:
            raise InfolmError(f"sweep key {key!r} is both in grid and in params")
        if not isinstance(values, list) or not values:
            raise InfolmError(f"sweep grid {key!r} needs a non-empty list of values")
        if len({repr(v) for v in values}) < len(values):
            raise InfolmError(f"sweep grid {key!r} lists a value twice")
    keys = list(grid)
    return [dict(zip(keys, combination)) for combination in itertools.product(*grid.values())]


def load_sweep(path: str | Path) -> tuple[SweepConfig, dict[str, ParamSpec]]:
    """Read and validate a sweep YAML; returns the sweep settings and the parsed search space."""
    raw = load_raw(path)
    sweep: SweepConfig = build_dataclass(SweepConfig, raw, "sweep")
    space = {key: build_dataclass(ParamSpec, spec, f"sweep.params.{key}") for key, spec in sweep.params.items()}
    for item in sweep.overrides:
        if "=" not in item:
            raise InfolmError(f"sweep override {item!r} is not of the form key=value")
    parse_objectives(sweep.objectives)
    grid_points(sweep.grid, sweep.params)
    if sweep.name is None:
        sweep.name = Path(path).stem
    return sweep, space


def read_sweep(path: str | Path) -> Sweep:
    """``load_sweep`` with the objectives and grid points parsed."""
    config, space = load_sweep(path)
    return Sweep(config, space, parse_objectives(config.objectives), grid_points(config.grid, config.params))


def suggest(trial: Any, key: str, spec: ParamSpec) -> Any:
    """One value of ``spec`` from an Optuna trial."""
    if spec.type == "choice":
        assert spec.values is not None
        return trial.suggest_categorical(key, spec.values)
    assert spec.low is not None and spec.high is not None
    if spec.type == "int":
        return trial.suggest_int(key, int(spec.low), int(spec.high), log=spec.log)
    return trial.suggest_float(key, float(spec.low), float(spec.high), log=spec.type == "log_uniform")


def override(key: str, value: Any) -> str:
    """``key=value`` as a command-line override (YAML spelling of booleans and null)."""
    if isinstance(value, bool):
        return f"{key}={str(value).lower()}"
    if value is None:
        return f"{key}=null"
    return f"{key}={value}"
