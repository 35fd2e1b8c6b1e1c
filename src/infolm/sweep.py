"""Black-box hyperparameter search (Optuna) over ``infolm train`` runs: ``infolm sweep SWEEP.yaml``.

The thesis tunes with Google Vizier over ranges such as its Table 2.4 (Melis thesis Sec. 2.A); this is the
same loop with Optuna's TPE sampler. A sweep file names a base config, fixed overrides, a trial budget, an
output directory and the search space over dotted config keys::

    base: configs/ptb/melis-small-lstm.yaml
    dir: runs/sweeps/melis-small
    trials: 20
    overrides: [train.max_steps=200]
    params:
      optim.lr: {type: log_uniform, low: 1.0e-3, high: 4.0e-3}
      model.dropout_input: {type: uniform, low: 0.0, high: 0.9}
      model.rounds: {type: int, low: 0, high: 6}
      model.cell: {type: choice, values: [lstm, mogrifier]}

Each trial trains in ``DIR/trial-NNNN`` and is scored by its best validation loss. The study lives in
``DIR/study.db`` (SQLite), so rerunning the same file resumes it: finished trials count towards the
budget, and a trial cut off mid-run is retried with the same parameters in its own run directory (the
trainer resumes from its last checkpoint). A resumed sweep seeds its sampler from ``seed`` and the number
of trials already in the study, so that it proposes new points rather than those of its first trials
again. ``DIR/results.csv`` and ``DIR/sensitivity.png`` are rewritten after every trial.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import Any

from infolm.config import build_dataclass, load_raw
from infolm.errors import InfolmError

PARAM_TYPES = ("log_uniform", "uniform", "int", "choice")


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
class SweepConfig:
    base: str  # the base training config (YAML); a relative path is read from the working directory
    dir: str  # output directory: study.db, results.csv, sensitivity.png, trial-NNNN/ run directories
    trials: int = 20  # budget: trials to finish (completed or failed), counting earlier runs of the sweep
    params: dict[str, Any] = dataclasses.field(default_factory=dict)  # dotted config key -> ParamSpec mapping
    overrides: list[str] = dataclasses.field(default_factory=list)  # fixed key=value overrides of every trial
    seed: int = 0  # seed of the sampler (TPE); a resume seeds it from this and the trials already run
    name: str | None = None  # study name in study.db (default: the sweep file's stem)

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise InfolmError(f"sweep trials must be positive, got {self.trials}")
        if not self.params:
            raise InfolmError("sweep params is empty: name at least one dotted config key with a range")


def load_sweep(path: str | Path) -> tuple[SweepConfig, dict[str, ParamSpec]]:
    """Read and validate a sweep YAML; returns the sweep settings and the parsed search space."""
    raw = load_raw(path)
    sweep: SweepConfig = build_dataclass(SweepConfig, raw, "sweep")
    space = {key: build_dataclass(ParamSpec, spec, f"sweep.params.{key}") for key, spec in sweep.params.items()}
    for item in sweep.overrides:
        if "=" not in item:
            raise InfolmError(f"sweep override {item!r} is not of the form key=value")
    if sweep.name is None:
        sweep.name = Path(path).stem
    return sweep, space


def suggest(trial: Any, key: str, spec: ParamSpec) -> Any:
    """One value of ``spec`` from an Optuna trial."""
    if spec.type == "choice":
        assert spec.values is not None
        return trial.suggest_categorical(key, spec.values)
    assert spec.low is not None and spec.high is not None
    if spec.type == "int":
        return trial.suggest_int(key, int(spec.low), int(spec.high), log=spec.log)
    return trial.suggest_float(key, float(spec.low), float(spec.high), log=spec.type == "log_uniform")


def _override(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return f"{key}={str(value).lower()}"
    if value is None:
        return f"{key}=null"
    return f"{key}={value}"


def _trial_dir(sweep: SweepConfig, number: int) -> Path:
    return Path(sweep.dir) / f"trial-{number:04d}"


def run_trial(sweep: SweepConfig, params: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Train one configuration in-process in ``run_dir``; the training summary (best_valid_loss, ...)."""
    from infolm.build import train
    from infolm.config import load_config

    overrides = [*sweep.overrides, *(_override(k, v) for k, v in params.items()), f"run.dir={run_dir}"]
    config = load_config(sweep.base, overrides)
    return train(config, overrides)


def run_sweep(path: str | Path, trials: int | None = None) -> dict[str, Any]:
    """Run (or resume) the sweep of ``path`` until its budget of finished trials; write results.csv and
    sensitivity.png. ``trials`` overrides the file's budget. Returns the best trial's summary."""
    import optuna

    sweep, space = load_sweep(path)
    if trials is not None:
        if trials < 1:
            raise InfolmError(f"--trials must be positive, got {trials}")
        sweep.trials = trials
    out = Path(sweep.dir)
    out.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=sweep.name,
        storage=f"sqlite:///{(out / 'study.db').resolve()}",
        sampler=optuna.samplers.TPESampler(seed=sweep.seed),
        direction="minimize",
        load_if_exists=True,
    )
    earlier = len(study.trials)
    if earlier:  # a resumed sweep: the sampler seeded as at the start would propose trial 0's point again
        study.sampler = optuna.samplers.TPESampler(seed=resumed_seed(sweep.seed, earlier))
    _retry_interrupted(study, sweep)

    def objective(trial: Any) -> float:
        params = {key: suggest(trial, key, spec) for key, spec in space.items()}
        run_dir = Path(trial.user_attrs.get("run_dir") or _trial_dir(sweep, trial.number))
        trial.set_user_attr("run_dir", str(run_dir))
        start = time.perf_counter()
        try:
            summary = run_trial(sweep, params, run_dir)
        except InfolmError as error:  # a diverged or misconfigured trial fails; the sweep goes on
            trial.set_user_attr("error", str(error))
            trial.set_user_attr("wall_s", time.perf_counter() - start)
            print(f"trial {trial.number}: failed: {error}", file=sys.stderr, flush=True)
            raise
        loss = float(summary["best_valid_loss"])
        trial.set_user_attr("wall_s", time.perf_counter() - start)
        trial.set_user_attr("step", int(summary["step"]))
        print(f"trial {trial.number}: best valid loss {loss:.4f} {params}", file=sys.stderr, flush=True)
        if not math.isfinite(loss):
            raise InfolmError(f"trial {trial.number} has no finite validation loss")
        return loss

    def write_outputs(study: Any, _trial: Any = None) -> None:
        write_results(study, out / "results.csv")
        plot_sensitivity(study, space, out / "sensitivity.png")

    remaining = sweep.trials - _finished(study)
    if remaining > 0:
        study.optimize(objective, n_trials=remaining, catch=(InfolmError,), callbacks=[write_outputs])
    write_outputs(study)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    summary: dict[str, Any] = {"dir": str(out), "finished": _finished(study), "complete": len(complete)}
    if complete:
        best = study.best_trial
        summary.update(
            best_trial=best.number,
            best_valid_loss=best.value,
            best_params=best.params,
            best_run_dir=best.user_attrs.get("run_dir"),
        )
    return summary


def resumed_seed(seed: int, earlier_trials: int) -> int:
    """The sampler's seed when the sweep resumes with ``earlier_trials`` in its study: new draws, the same
    ones on every resume from that point (a fresh sweep uses ``seed`` itself)."""
    import numpy as np

    return int(np.random.SeedSequence([seed, earlier_trials]).generate_state(1)[0])


def _finished(study: Any) -> int:
    """Trials that count towards the budget: completed, pruned, or failed with an error (diverged,
    bad settings); trials cut off by an interrupt or a kill do not count (they are retried)."""
    counted = 0
    for t in study.trials:
        state = t.state.name
        counted += state in ("COMPLETE", "PRUNED") or (state == "FAIL" and "error" in t.user_attrs)
    return counted


def _retry_interrupted(study: Any, sweep: SweepConfig) -> None:
    """Trials cut off in an earlier run of the sweep (left RUNNING by a kill, or FAIL without an error by an interrupt)
    are enqueued again, once, with the same parameters and run directory, so that the next trial resumes
    that run from its last checkpoint. Assumes one process per sweep."""
    from optuna.trial import TrialState

    retried = set(study.user_attrs.get("retried", []))
    for trial in study.get_trials(deepcopy=False):
        cut_off = trial.state == TrialState.RUNNING or (
            trial.state == TrialState.FAIL and "error" not in trial.user_attrs
        )
        if not cut_off or trial.number in retried:
            continue
        if trial.state == TrialState.RUNNING:
            study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        run_dir = trial.user_attrs.get("run_dir") or str(_trial_dir(sweep, trial.number))
        study.enqueue_trial(trial.params, user_attrs={"run_dir": run_dir}, skip_if_exists=False)
        retried.add(trial.number)
    study.set_user_attr("retried", sorted(retried))


def write_results(study: Any, path: Path) -> None:
    """One row per trial: number, state, best validation loss and perplexity, parameters, wall time, run dir."""
    trials = sorted(study.trials, key=lambda t: t.number)
    keys = sorted({k for t in trials for k in t.params})
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trial", "state", "valid_loss", "valid_ppl", *keys, "wall_s", "run_dir", "error"])
        for t in trials:
            loss = t.value if t.value is not None else math.nan
            ppl = math.exp(min(loss, 700.0)) if math.isfinite(loss) else math.nan
            wall = t.user_attrs.get("wall_s", math.nan)
            writer.writerow(
                [
                    t.number,
                    t.state.name.lower(),
                    repr(loss),
                    f"{ppl:.6g}",
                    *(t.params.get(k, "") for k in keys),
                    f"{wall:.1f}",
                    t.user_attrs.get("run_dir", ""),
                    t.user_attrs.get("error", ""),
                ]
            )


def plot_sensitivity(study: Any, space: dict[str, ParamSpec], path: Path) -> None:
    """Validation loss of every completed trial against each parameter (one panel per parameter)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [t for t in study.trials if t.state.name == "COMPLETE" and t.value is not None]
    columns = min(3, len(space))
    rows = math.ceil(len(space) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.0 * columns, 3.2 * rows), squeeze=False)
    best = min((t.value for t in done), default=None)
    for ax, (key, spec) in zip(axes.flat, space.items()):
        points = [(t.params[key], t.value) for t in done if key in t.params]
        if spec.type == "choice":
            labels = [str(v) for v in spec.values or []]
            xs = [labels.index(str(x)) for x, _ in points]
            ax.set_xticks(range(len(labels)), labels)
        else:
            xs = [x for x, _ in points]
            if spec.type == "log_uniform" or spec.log:
                ax.set_xscale("log")
        ys = [y for _, y in points]
        ax.scatter(xs, ys, s=18, c=["tab:red" if y == best else "tab:blue" for y in ys])
        ax.set_xlabel(key)
        ax.set_ylabel("best valid loss")
    for ax in list(axes.flat)[len(space) :]:
        ax.axis("off")
    fig.suptitle(f"{study.study_name}: {len(done)} completed trials (best in red)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def add_sweep_parser(subparsers: Any) -> None:
    """Add ``infolm sweep SWEEP.yaml [--trials N] [--json]`` to the CLI's subparsers."""
    p = subparsers.add_parser("sweep", help="black-box hyperparameter search (Optuna) over training runs")
    p.add_argument("sweep", help="sweep YAML: base config, dir, trials, params ranges")
    p.add_argument("--trials", type=int, default=None, help="override the budget of finished trials")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args: Any) -> int:
    import json

    summary = run_sweep(args.sweep, args.trials)
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key}: {value}")
    return 0
