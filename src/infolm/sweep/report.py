"""A sweep's outputs: ``results.csv`` (a row per trial, the front marked), the plot (``front.png`` for two
objectives: the trials and their Pareto front; otherwise ``sensitivity.png``) and the summary."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infolm.sweep.spec import ParamSpec, Sweep

Entry = tuple[int | None, Any]  # (grid point index or None, Optuna FrozenTrial)


def objective_values(trial: Any, sweep: Sweep) -> list[float] | None:
    """A completed trial's objective values in declared order; None for any other trial."""
    if trial.state.name != "COMPLETE":
        return None
    keys = [o.key for o in sweep.objectives]
    stored = trial.user_attrs.get("objectives") or {}
    if all(key in stored for key in keys):
        return [float(stored[key]) for key in keys]
    return [float(v) for v in trial.values] if trial.values else None  # a trial of an earlier version


def nondominated(points: Sequence[Sequence[float]], directions: Sequence[str]) -> list[bool]:
    """True where no other point is at least as good in every objective and better in one (of points equal
    in every objective, the first is kept)."""
    signs = [1.0 if d == "minimize" else -1.0 for d in directions]
    keys = [[s * v for s, v in zip(signs, p)] for p in points]  # every objective as one to minimise
    flags = []
    for i, a in enumerate(keys):
        beaten = any(all(bk <= ak for ak, bk in zip(a, b)) and (b != a or j < i) for j, b in enumerate(keys) if j != i)
        flags.append(not beaten)
    return flags


def front_flags(entries: Sequence[Entry], sweep: Sweep) -> list[bool]:
    """Which trials are on the front: with a grid, the best trial of each point by the first objective;
    otherwise the completed trials no other completed trial dominates."""
    values = [objective_values(t, sweep) for _, t in entries]
    done = [i for i, v in enumerate(values) if v is not None]
    flags = [False] * len(entries)
    if not sweep.points:
        for i, flag in zip(done, nondominated([values[i] or [] for i in done], sweep.directions)):
            flags[i] = flag
        return flags
    sign = 1.0 if sweep.directions[0] == "minimize" else -1.0
    for point in range(len(sweep.points)):
        members = [i for i in done if entries[i][0] == point]
        if members:  # the point's best trial by the objective it was tuned on (the first of equals)
            flags[min(members, key=lambda i: (sign * (values[i] or [])[0], entries[i][1].number))] = True
    return flags


def write_results(entries: Sequence[Entry], sweep: Sweep, path: Path) -> None:
    """One row per trial: number, state, objective values (or, for a sweep that declares none, the best
    validation loss and perplexity), front flag, parameters, wall time, run dir, error."""
    keys = sorted({k for _, t in entries for k in t.params})
    legacy = not sweep.config.declared and not sweep.points
    names = [o.key for o in sweep.objectives]
    grid_keys = list(sweep.points[0]) if sweep.points else []
    flags = front_flags(entries, sweep)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.writer(f)
        scored = ["valid_loss", "valid_ppl"] if legacy else [*names, "on_front"]
        point_columns = ["point", *grid_keys] if sweep.points else []
        writer.writerow(["trial", "state", *point_columns, *scored, *keys, "wall_s", "run_dir", "error"])
        order = sorted(range(len(entries)), key=lambda i: (entries[i][0] or 0, entries[i][1].number))
        for i in order:
            point, t = entries[i]
            values = objective_values(t, sweep)
            if legacy:
                loss = values[0] if values is not None else math.nan
                ppl = math.exp(min(loss, 700.0)) if math.isfinite(loss) else math.nan
                scores = [repr(loss), f"{ppl:.6g}"]
            else:
                scores = [repr(v) for v in values or [math.nan] * len(names)] + [str(int(flags[i]))]
            grid = [point, *(sweep.points[point][k] for k in grid_keys)] if point is not None else []
            writer.writerow(
                [
                    t.number,
                    t.state.name.lower(),
                    *grid,
                    *scores,
                    *(t.params.get(k, "") for k in keys),
                    f"{t.user_attrs.get('wall_s', math.nan):.1f}",
                    t.user_attrs.get("run_dir", ""),
                    t.user_attrs.get("error", ""),
                ]
            )
    tmp.replace(path)


def plot(entries: Sequence[Entry], sweep: Sweep, out: Path) -> None:
    """``front.png`` for two objectives, else ``sensitivity.png`` (the first objective per parameter)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    title = f"{sweep.config.name}: {sum(objective_values(t, sweep) is not None for _, t in entries)} completed trials"
    if len(sweep.objectives) == 2:
        figure = plot_front(plt, entries, sweep, title)
        name = "front.png"
    else:
        done = [(t.params, v[0]) for _, t in entries if (v := objective_values(t, sweep)) is not None]
        label = "best valid loss" if not sweep.config.declared else sweep.objectives[0].key
        figure = plot_sensitivity(plt, done, sweep.space, label, sweep.directions[0], title)
        name = "sensitivity.png"
    figure.tight_layout()
    figure.savefig(out / f"{name}.tmp.png", dpi=100)
    plt.close(figure)
    (out / f"{name}.tmp.png").replace(out / name)


def plot_front(plt: Any, entries: Sequence[Entry], sweep: Sweep, title: str) -> Any:
    """The trials in the plane of the two objectives (second across, first up) and their front."""
    flags = front_flags(entries, sweep)
    first, second = (o.key for o in sweep.objectives)
    done = [(v, flag) for (_, t), flag in zip(entries, flags) if (v := objective_values(t, sweep)) is not None]
    figure, axes = plt.subplots(figsize=(6, 4.5))
    axes.scatter([v[1] for v, _ in done], [v[0] for v, _ in done], s=14, color="tab:blue", label="trials")
    front = sorted((v[1], v[0]) for v, flag in done if flag)
    kind = "best of each grid point" if sweep.points else "Pareto front"
    axes.plot([x for x, _ in front], [y for _, y in front], marker="o", color="tab:red", label=kind)
    axes.set_xlabel(f"{second} ({sweep.directions[1]})")
    axes.set_ylabel(f"{first} ({sweep.directions[0]})")
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=7)
    return figure


def plot_sensitivity(
    plt: Any,
    done: list[tuple[dict[str, Any], float]],
    space: dict[str, ParamSpec],
    label: str,
    direction: str,
    title: str,
) -> Any:
    """The first objective of every completed trial against each parameter (one panel per parameter)."""
    columns = min(3, len(space))
    rows = math.ceil(len(space) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.0 * columns, 3.2 * rows), squeeze=False)
    choose = min if direction == "minimize" else max
    best = choose((value for _, value in done), default=None)
    for ax, (key, spec) in zip(axes.flat, space.items()):
        points = [(params[key], value) for params, value in done if key in params]
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
        ax.set_ylabel(label)
    for ax in list(axes.flat)[len(space) :]:
        ax.axis("off")
    figure.suptitle(f"{title} (best in red)")
    return figure


def summarize(entries: Sequence[Entry], sweep: Sweep, finished: int) -> dict[str, Any]:
    """What ``infolm sweep`` prints: counts, and the best trial (no objectives declared) or the front."""
    complete = [(p, t) for p, t in entries if objective_values(t, sweep) is not None]
    summary: dict[str, Any] = {"dir": sweep.config.dir, "finished": finished, "complete": len(complete)}
    flags = front_flags(entries, sweep)
    front = [entry for entry, flag in zip(entries, flags) if flag]
    if not sweep.config.declared and not sweep.points:
        if front:
            (_, best), *_ = front
            summary.update(
                best_trial=best.number,
                best_valid_loss=objective_values(best, sweep)[0],  # type: ignore[index]
                best_params=best.params,
                best_run_dir=best.user_attrs.get("run_dir"),
            )
        return summary
    keys = [o.key for o in sweep.objectives]
    summary["front"] = [
        {
            "trial": t.number,
            **({"point": point, **sweep.points[point]} if point is not None else {}),
            "values": dict(zip(keys, objective_values(t, sweep) or [])),
            "params": t.params,
            "run_dir": t.user_attrs.get("run_dir"),
        }
        for point, t in front
    ]
    return summary
