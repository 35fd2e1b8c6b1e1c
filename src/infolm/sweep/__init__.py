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

**Objectives.** A file may declare what a trial scores: fields of the run's *selected* validation
record in ``metrics.jsonl`` (the evaluation at the step the trainer saved ``checkpoints/best``, by the
task's selection metric; not the last evaluation), each minimised or maximised::

    objectives:
      - {key: loss, direction: minimize}
      - {key: mi, direction: maximize}

With several, the study is multi-objective (Optuna's multi-objective TPE) and traces a Pareto front, as
the thesis evaluates its objectives by NLL-vs-MI frontiers (Melis thesis Sec. 5.7): minimising NLL alone
over λ would drive every trial to posterior collapse. ``results.csv`` then has a column per objective and
``on_front``; with two objectives the plot is ``front.png`` (the trials and their front). ``at: last``
reads each run's last evaluation instead of its selected one: the lowest-NLL checkpoint of a run trained
on a fixed schedule towards a frontier point is an early one whose latents are still unused.

**Grid.** Alternatively the file fixes some keys on a grid and tunes the params afresh at each grid
point, for ``trials_per_point`` trials on the first objective (the thesis tunes lr per frontier point)::

    grid: {objective.mi-kl.lam: [0.0, 0.5, 0.9]}
    trials_per_point: 8
    objectives: [{key: loss, direction: minimize}, {key: mi, direction: maximize}]

Each point is its own study (``NAME/point-II``), its trials in ``DIR/trial-pII-NNNN``; the front is
the best trial of each point. ``--trials`` overrides ``trials_per_point`` there. ``infolm pareto DIR``
reads any sweep's trials as points of a frontier.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infolm.errors import InfolmError
from infolm.sweep.spec import ParamSpec, SweepConfig, load_sweep, override, read_sweep
from infolm.sweep.study import resumed_seed, run_trial

__all__ = ["ParamSpec", "SweepConfig", "add_sweep_parser", "load_sweep", "resumed_seed", "run_sweep", "run_trial"]

_override = override  # the name tests and callers have used


def run_sweep(path: str | Path, trials: int | None = None) -> dict[str, Any]:
    """Run (or resume) the sweep of ``path`` until its budget of finished trials; write results.csv and
    the plot. ``trials`` overrides the file's budget (per grid point with a grid). Returns the summary:
    the best trial, or, where the file declares objectives, the front."""
    from infolm.sweep.grid import run_grid
    from infolm.sweep.report import Entry, plot, summarize, write_results
    from infolm.sweep.study import finished, run_study

    sweep = read_sweep(path)
    if trials is not None:
        if trials < 1:
            raise InfolmError(f"--trials must be positive, got {trials}")
        if sweep.points:
            sweep.config.trials_per_point = trials
        else:
            sweep.config.trials = trials
    out = Path(sweep.config.dir)
    out.mkdir(parents=True, exist_ok=True)

    def write_outputs(entries: list[Entry]) -> None:
        write_results(entries, sweep, out / "results.csv")
        plot(entries, sweep, out)

    studies = run_grid(sweep, write_outputs) if sweep.points else [run_study(sweep, write_outputs)]
    entries: list[Entry] = [
        (index if sweep.points else None, t) for index, study in enumerate(studies) for t in study.trials
    ]
    return summarize(entries, sweep, sum(finished(study) for study in studies))


def add_sweep_parser(subparsers: Any) -> None:
    """Add ``infolm sweep SWEEP.yaml [--trials N] [--json]`` to the CLI's subparsers."""
    p = subparsers.add_parser("sweep", help="black-box hyperparameter search (Optuna) over training runs")
    p.add_argument("sweep", help="sweep YAML: base config, dir, trials, params ranges (objectives, grid)")
    p.add_argument(
        "--trials", type=int, default=None, help="override the budget of finished trials (per point with a grid)"
    )
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
