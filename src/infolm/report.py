"""``infolm report RUN_DIR...``: runs compared by their numbers instead of by eye.

Each run's final numbers come from its ``metrics.jsonl``: the last validation record (every number
the task logged, the selection metric among them), the best selection metric so far (the record's
``best_<name>``), the last logged training loss, the steps and the trainer's elapsed time. Runs are
grouped by their config without ``run.dir``, ``run.seed`` and the keys that may change on resume
(``build.RESUMABLE_KEYS``); a group is named by the keys on which the groups differ. Each group
shows the mean ± sample standard deviation over its runs (its seeds). The learning curves (training
loss and the selection metric, against steps and against elapsed time) go to one PNG.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infolm.errors import InfolmError

IGNORED_KEYS = {"run.dir", "run.seed"}
NOT_METRICS = {"step", "epoch", "split", "event"}


@dataclasses.dataclass
class RunReport:
    run_dir: str
    config: dict[str, Any]  # flattened, dotted keys
    seed: int
    step: int
    elapsed: float | None  # trainer seconds at the last step record
    train_loss: float | None  # last logged training loss
    selection: str | None  # the name of the selection metric (from ``best_<name>``)
    final: dict[str, float]  # numbers of the last validation record
    curve_train: list[tuple[int, float, float | None]]  # (step, loss, elapsed)
    curve_valid: list[tuple[int, float, float | None]]  # (step, selection metric, elapsed)
    group: str = ""


@dataclasses.dataclass
class GroupReport:
    group: str
    runs: list[str]
    seeds: list[int]
    stats: dict[str, tuple[float, float]]  # metric -> (mean, sample std; 0 for one run)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out if out or not prefix else {prefix[:-1]: {}}
    return {prefix[:-1]: value}


def _read_records(path: Path) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            raise InfolmError(f"{path}, line {number}: not a JSON object") from None
    return records


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _interpolate(step: int, times: list[tuple[int, float]]) -> float | None:
    """Elapsed seconds at ``step`` from the step records' (step, elapsed), linear in between."""
    if not times:
        return None
    for (s0, t0), (s1, t1) in zip(times, times[1:]):
        if s0 <= step <= s1:
            return t0 if s1 == s0 else t0 + (t1 - t0) * (step - s0) / (s1 - s0)
    return times[-1][1] if step > times[-1][0] else times[0][1] * step / max(times[0][0], 1)


def read_run(run_dir: str | Path) -> RunReport:
    """One run's final numbers and curves (an ``InfolmError`` if it is not a run directory)."""
    from infolm.config import load_raw

    run_dir = Path(run_dir)
    config_path, metrics_path = run_dir / "config.yaml", run_dir / "metrics.jsonl"
    if not config_path.is_file() or not metrics_path.is_file():
        raise InfolmError(f"{run_dir} is not an infolm run directory (no config.yaml or metrics.jsonl)")
    config = _flatten(load_raw(config_path))
    records = _read_records(metrics_path)
    steps = [r for r in records if "split" not in r and "event" not in r and "loss" in r]
    valid = [r for r in records if r.get("split") == "valid"]
    times = [(int(r["step"]), float(r["elapsed"])) for r in steps if _number(r.get("elapsed")) is not None]
    selection = None
    final: dict[str, float] = {}
    if valid:
        last = valid[-1]
        for key, value in last.items():
            number = _number(value)
            if key not in NOT_METRICS and number is not None:
                final[key] = number
        best = [key for key in last if key.startswith("best_")]
        selection = best[0].removeprefix("best_") if best else ("loss" if "loss" in last else None)
    curve_valid = []
    if selection is not None:
        for r in valid:
            value = _number(r.get(selection))
            if value is not None:
                curve_valid.append((int(r["step"]), value, _interpolate(int(r["step"]), times)))
    curve_train = [(int(r["step"]), float(r["loss"]), _number(r.get("elapsed"))) for r in steps]
    last_step = max([int(r["step"]) for r in records if _number(r.get("step")) is not None], default=0)
    return RunReport(
        run_dir=str(run_dir),
        config=config,
        seed=int(config.get("run.seed", 0)),
        step=last_step,
        elapsed=times[-1][1] if times else None,
        train_loss=float(steps[-1]["loss"]) if steps else None,
        selection=selection,
        final=final,
        curve_train=curve_train,
        curve_valid=curve_valid,
    )


def assign_groups(runs: Sequence[RunReport]) -> None:
    """Name each run's group by the config keys on which the groups differ."""
    from infolm.build import RESUMABLE_KEYS

    ignored = IGNORED_KEYS | set(RESUMABLE_KEYS)
    keys = sorted({key for run in runs for key in run.config} - ignored)
    differing = [key for key in keys if len({json.dumps(run.config.get(key), sort_keys=True) for run in runs}) > 1]
    for run in runs:
        parts = [f"{key}={json.dumps(run.config.get(key), sort_keys=True)}" for key in differing]
        run.group = " ".join(parts) if parts else "all runs"


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def format_mean_std(values: Sequence[float], digits: int = 2, empty: str = "–", signed: bool = False) -> str:
    """A table cell: ``empty`` for no values, the value alone for one, else "mean ± sample std";
    ``signed`` writes the mean's sign always (a difference's cell)."""
    if not values:
        return empty
    sign = "+" if signed else ""
    if len(values) == 1:
        return f"{values[0]:{sign}.{digits}f}"
    mean, std = mean_std(values)
    return f"{mean:{sign}.{digits}f} ± {std:.{digits}f}"


def aggregate(runs: Sequence[RunReport]) -> list[GroupReport]:
    groups: dict[str, list[RunReport]] = {}
    for run in runs:
        groups.setdefault(run.group, []).append(run)
    out = []
    for name, members in groups.items():
        columns: dict[str, list[float]] = {}
        for run in members:
            numbers = dict(run.final, step=float(run.step))
            if run.train_loss is not None:
                numbers["train_loss"] = run.train_loss
            if run.elapsed is not None:
                numbers["elapsed"] = run.elapsed
            for key, value in numbers.items():
                columns.setdefault(key, []).append(value)
        stats = {key: mean_std(values) for key, values in columns.items() if len(values) == len(members)}
        out.append(GroupReport(name, [r.run_dir for r in members], [r.seed for r in members], stats))
    return out


def _columns(groups: Sequence[GroupReport]) -> list[str]:
    first = ["step", "train_loss"]
    rest = sorted({key for g in groups for key in g.stats} - set(first) - {"elapsed"})
    return [key for key in first if any(key in g.stats for g in groups)] + rest + ["elapsed"]


def _cell(stat: tuple[float, float] | None, runs: int) -> str:
    if stat is None:
        return "—"
    mean, std = stat
    text = f"{mean:.4g}"
    return text if runs == 1 else f"{text} ± {std:.2g}"


def table(groups: Sequence[GroupReport]) -> str:
    """A Markdown table: one row per group, mean ± std over its runs."""
    columns = _columns(groups)
    lines = ["| config | seeds | " + " | ".join(columns) + " |", "| --- " * (len(columns) + 2) + "|"]
    for g in groups:
        cells = [_cell(g.stats.get(key), len(g.runs)) for key in columns]
        seeds = ", ".join(str(s) for s in g.seeds)
        lines.append(f"| {g.group} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def to_json(groups: Sequence[GroupReport], runs: Sequence[RunReport]) -> str:
    def finite(x: float) -> float | None:
        return x if math.isfinite(x) else None

    payload = [
        {
            "group": g.group,
            "seeds": g.seeds,
            "runs": g.runs,
            "mean": {k: finite(m) for k, (m, _) in g.stats.items()},
            "std": {k: finite(s) for k, (_, s) in g.stats.items()},
            "per_run": [
                {"run_dir": r.run_dir, "seed": r.seed, "step": r.step, "train_loss": r.train_loss, **r.final}
                for r in runs
                if r.group == g.group
            ],
        }
        for g in groups
    ]
    return json.dumps(payload, indent=1)


def to_csv(groups: Sequence[GroupReport]) -> str:
    columns = _columns(groups)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["config", "seeds", "runs", *[f"{c}_{s}" for c in columns for s in ("mean", "std")]])
    for g in groups:
        cells = []
        for key in columns:
            mean, std = g.stats.get(key, (math.nan, math.nan))
            cells += [f"{mean:.6g}", f"{std:.6g}"]
        writer.writerow([g.group, " ".join(map(str, g.seeds)), len(g.runs), *cells])
    return buffer.getvalue()


def plot_curves(runs: Sequence[RunReport], path: str | Path) -> None:
    """Training loss and the selection metric against steps and against elapsed seconds, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), squeeze=False)
    colors = {group: f"C{i % 10}" for i, group in enumerate(dict.fromkeys(r.group for r in runs))}
    selections = sorted({r.selection for r in runs if r.selection})
    for run in runs:
        label = f"{run.group} (seed {run.seed})"
        for row, curve in ((0, run.curve_train), (1, run.curve_valid)):
            if not curve:
                continue
            steps = [c[0] for c in curve]
            axes[row][0].plot(steps, [c[1] for c in curve], color=colors[run.group], label=label, lw=1)
            timed = [(c[2], c[1]) for c in curve if c[2] is not None]
            if timed:
                axes[row][1].plot([t for t, _ in timed], [v for _, v in timed], color=colors[run.group], lw=1)
    metric = "/".join(selections) or "selection metric"
    for col, xlabel in ((0, "step"), (1, "elapsed seconds")):
        axes[0][col].set(xlabel=xlabel, ylabel="training loss")
        axes[1][col].set(xlabel=xlabel, ylabel=f"validation {metric}")
    handles, labels = axes[0][0].get_legend_handles_labels() or axes[1][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize="small")
    fig.tight_layout(rect=(0, 0.08 + 0.03 * math.ceil(len(labels) / 3), 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    tmp.replace(path)


def report(run_dirs: Sequence[str | Path]) -> tuple[list[RunReport], list[GroupReport]]:
    if not run_dirs:
        raise InfolmError("infolm report needs at least one run directory")
    runs = [read_run(d) for d in run_dirs]
    assign_groups(runs)
    return runs, aggregate(runs)
