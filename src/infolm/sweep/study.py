"""One Optuna study of a sweep, kept in ``DIR/study.db``: opening (or resuming) it, scoring a trial from its
run's selected validation record, the budget of finished trials, and the retry of trials cut off."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infolm.errors import InfolmError
from infolm.sweep.spec import Sweep, SweepConfig, override, suggest

TrialDir = Callable[[int], Path]  # trial number -> its run directory


def run_trial(sweep: SweepConfig, params: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Train one configuration in-process in ``run_dir``; the training summary (best_valid_loss, ...)."""
    from infolm.build import train
    from infolm.config import load_config

    overrides = [*sweep.overrides, *(override(k, v) for k, v in params.items()), f"run.dir={run_dir}"]
    config = load_config(sweep.base, overrides)
    return train(config, overrides)


class ObjectiveMissing(InfolmError):
    """A declared objective that the run's validation record lacks: the sweep stops (``stop_if_refused``)."""


def selected_values(run_dir: Path, keys: list[str], at: str = "selected") -> tuple[int, dict[str, float]]:
    """The step of the run's selected checkpoint (``checkpoints/best``; ``at="last"``: its last evaluation)
    and ``keys`` of that validation record: the point the run stands for."""
    from infolm.training.metrics import read_metrics, selected_record

    records = read_metrics(run_dir / "metrics.jsonl")
    if at == "last":
        valid = [r for r in records if r.get("split") == "valid"]
        record = valid[-1] if valid else None
    else:
        record = selected_record(records)
    if record is None:
        raise InfolmError(f"{run_dir}: no validation record set a best (metrics.jsonl); the trial has no point")
    missing = [key for key in keys if key not in record]
    if missing:
        known = ", ".join(k for k in record if k not in ("step", "epoch", "split"))
        raise ObjectiveMissing(f"objective {missing[0]!r} is not in the run's validation record (it has {known})")
    values = {key: math.nan if record[key] is None else float(record[key]) for key in keys}
    return int(record["step"]), values


def trial_objective(sweep: Sweep, fixed: dict[str, Any], trial_dir: TrialDir, scored: int | None = None) -> Any:
    """The function Optuna calls per trial: train with the trial's parameters (and the grid point's
    ``fixed`` values), then return its objective values; ``scored``: return only that objective's value
    (a grid point tunes on the first), keeping the others in the trial's ``objectives`` attribute."""

    def objective(trial: Any) -> float | list[float]:
        params = {key: suggest(trial, key, spec) for key, spec in sweep.space.items()}
        run_dir = Path(trial.user_attrs.get("run_dir") or trial_dir(trial.number))
        trial.set_user_attr("run_dir", str(run_dir))
        start = time.perf_counter()
        try:
            summary = run_trial(sweep.config, {**fixed, **params}, run_dir)
            keys = [o.key for o in sweep.objectives]
            if sweep.config.declared:
                step, values = selected_values(run_dir, keys, sweep.config.at)
            else:  # today's score: the trainer's best selection metric, as a loss
                step, values = int(summary["step"]), {keys[0]: float(summary["best_valid_loss"])}
        except ObjectiveMissing as error:  # the sweep file's mistake, not the trial's: stop the sweep
            trial.set_user_attr("error", str(error))
            trial.set_user_attr("refused", True)
            trial.study.stop()
            raise
        except InfolmError as error:  # a diverged or misconfigured trial fails; the sweep goes on
            trial.set_user_attr("error", str(error))
            trial.set_user_attr("wall_s", time.perf_counter() - start)
            print(f"trial {trial.number}: failed: {error}", file=sys.stderr, flush=True)
            raise
        trial.set_user_attr("wall_s", time.perf_counter() - start)
        trial.set_user_attr("step", step)
        trial.set_user_attr("objectives", values)
        shown = " ".join(f"{k} {v:.4f}" for k, v in values.items())
        print(f"trial {trial.number}: {shown} {fixed or ''}{params}", file=sys.stderr, flush=True)
        bad = [k for k, v in values.items() if not math.isfinite(v)]
        if bad:  # a failure that counts towards the budget (not a cut-off trial to retry)
            trial.set_user_attr("error", f"no finite {bad[0]}")
            raise InfolmError(f"trial {trial.number} has no finite {bad[0]}")
        ordered = [values[k] for k in keys]
        if scored is not None:
            return ordered[scored]
        return ordered if len(ordered) > 1 else ordered[0]

    return objective


def sampler(seed: int) -> Any:
    """The sampler of every study: TPE, seeded. With several objectives it is Optuna's multi-objective
    TPE (MOTPE): after 10 random trials it proposes from the Pareto-ranked trials, whereas NSGA-II's
    first generation (50 trials by default) is random search, more than a thesis sweep's whole budget."""
    import optuna

    return optuna.samplers.TPESampler(seed=seed)


def open_study(sweep: Sweep, name: str, directions: list[str], seed: int, trial_dir: TrialDir) -> Any:
    """Create or resume the study ``name`` in ``DIR/study.db``. A resumed study's sampler is seeded from
    ``seed`` and its trials so far (new points, not its first ones again); trials cut off are enqueued."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{(Path(sweep.config.dir) / 'study.db').resolve()}"
    try:
        study = optuna.create_study(
            study_name=name,
            storage=storage,
            sampler=sampler(seed),
            directions=[optuna.study.StudyDirection[d.upper()] for d in directions],
            load_if_exists=True,
        )
    except ValueError as error:  # Optuna refuses other directions than the stored study's
        raise InfolmError(f"{sweep.config.dir}/study.db: study {name!r}: {error}; use another dir or name") from None
    stored = [d.name.lower() for d in study.directions]
    if stored != directions:
        raise InfolmError(
            f"{sweep.config.dir}/study.db: study {name!r} was run with objectives of directions {stored}, "
            f"this sweep declares {directions}; use another dir or name"
        )
    earlier = len(study.trials)
    if earlier:  # a resumed sweep: the sampler seeded as at the start would propose trial 0's point again
        study.sampler = sampler(resumed_seed(seed, earlier))
    retry_interrupted(study, trial_dir)
    return study


def resumed_seed(seed: int, earlier_trials: int) -> int:
    """The sampler's seed when the sweep resumes with ``earlier_trials`` in its study: new draws, the same
    ones on every resume from that point (a fresh sweep uses ``seed`` itself)."""
    import numpy as np

    return int(np.random.SeedSequence([seed, earlier_trials]).generate_state(1)[0])


def finished(study: Any) -> int:
    """Trials that count towards the budget: completed, pruned, or failed with an error (diverged,
    bad settings); trials cut off by an interrupt or a kill do not count (they are retried), nor those
    whose record lacked a declared objective (the sweep file's mistake)."""
    counted = 0
    for t in study.trials:
        state = t.state.name
        failed = state == "FAIL" and "error" in t.user_attrs and not t.user_attrs.get("refused")
        counted += state in ("COMPLETE", "PRUNED") or failed
    return counted


def stop_if_refused(study: Any, since: int) -> None:
    """One line for a trial (numbered ``since`` or later) whose record lacked a declared objective (the
    sweep stopped at it)."""
    for t in study.trials[since:]:
        if t.user_attrs.get("refused"):
            raise InfolmError(f"{t.user_attrs['error']}; fix the sweep's objectives")


def retry_interrupted(study: Any, trial_dir: TrialDir) -> None:
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
        run_dir = trial.user_attrs.get("run_dir") or str(trial_dir(trial.number))
        study.enqueue_trial(trial.params, user_attrs={"run_dir": run_dir}, skip_if_exists=False)
        retried.add(trial.number)
    study.set_user_attr("retried", sorted(retried))


def run_study(sweep: Sweep, write_outputs: Callable[[list[tuple[int | None, Any]]], None]) -> Any:
    """The sweep without a grid: one study of every declared objective (``directions`` of each), run
    until its budget of finished trials; ``write_outputs`` rewrites the results after every trial."""
    config = sweep.config
    assert config.name is not None and config.trials is not None
    out = Path(config.dir)
    study = open_study(sweep, config.name, sweep.directions, config.seed, lambda n: out / f"trial-{n:04d}")
    objective = trial_objective(sweep, {}, lambda n: out / f"trial-{n:04d}")

    def callback(study: Any, _trial: Any = None) -> None:
        write_outputs([(None, t) for t in study.trials])

    remaining, before = config.trials - finished(study), len(study.trials)
    if remaining > 0:
        study.optimize(objective, n_trials=remaining, catch=(InfolmError,), callbacks=[callback])
    callback(study)
    stop_if_refused(study, before)
    return study
