"""``infolm report RUN_DIR...``: runs compared by their numbers instead of by eye.

Each run's final numbers come from its ``metrics.jsonl``, each named by the split it is from: the
last training loss (``train_loss``), every number of the last validation record (``valid_loss``,
``valid_ppl``, ...), the best selection metric so far (``best_valid_<name>``), the steps and the
trainer's elapsed seconds. A folder that is not a run but holds runs (a finetune's ``seed-N/``, a
sweep's ``trial-NNNN/``) stands for those runs. Runs are grouped by their config without ``run.dir``,
``run.seed`` and the keys that may change on resume (``build.RESUMABLE_KEYS``); a group is named by
the keys on which the groups differ, shortened to a label (the full keys are printed beside it).
Each group shows the mean ± sample standard deviation over its runs (its seeds). The learning curves
go to one PNG: per group the mean over seeds with a ± 1 sd band, the seeds faint behind it.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infolm.errors import InfolmError

IGNORED_KEYS = {"run.dir", "run.seed"}
NOT_METRICS = {"step", "epoch", "split", "event"}
LABEL_KEYS = 3  # config keys a group's label shows at most (the rest: "…")
LABEL_CHARS = 40  # characters of a group's label at most
VALUE_CHARS = 14  # characters of a value in a label at most
LEGEND_GROUPS = 10  # groups the plot's legend names at most
TRAIN_LOSS_UNITS = {"classification": "nats per sentence", "copy": "nats per copied symbol"}  # else per token


@dataclasses.dataclass
class RunReport:
    run_dir: str
    config: dict[str, Any]  # flattened, dotted keys
    seed: int
    step: int
    elapsed: float | None  # trainer seconds at the last step record
    train_loss: float | None  # last logged training loss
    selection: str | None  # the name of the selection metric (from ``best_<name>``)
    final: dict[str, float]  # numbers of each split's last evaluation, named "<split>_<name>"
    curve_train: list[tuple[int, float, float | None]]  # (step, loss, elapsed)
    curve_valid: list[tuple[int, float, float | None]]  # (step, selection metric, elapsed)
    group: str = ""  # the differing config keys in full, "key=value key=value"
    label: str = ""  # the group's short name (legend, table)
    group_config: dict[str, Any] = dataclasses.field(default_factory=dict)  # the differing keys, this run's values


@dataclasses.dataclass
class GroupReport:
    group: str  # the differing config keys in full
    label: str  # short name
    config: dict[str, Any]  # the differing config keys and this group's values (keys it lacks are left out)
    runs: list[str]
    seeds: list[int]
    stats: dict[str, tuple[float, float]]  # metric -> (mean, sample std; 0 for one run)


@dataclasses.dataclass(frozen=True)
class SummaryCurve:
    """A group's curve over seeds: at each x, the mean and sample sd of the seeds' interpolated values."""

    x: np.ndarray  # (P,) every x some seed logged, within the range all seeds cover
    mean: np.ndarray  # (P,)
    sd: np.ndarray  # (P,) 0 for one seed
    seeds: int


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


def is_run_dir(path: Path) -> bool:
    return (path / "config.yaml").is_file() and (path / "metrics.jsonl").is_file()


def _natural_key(path: Path) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def expand_run_dirs(paths: Sequence[str | Path]) -> tuple[list[Path], list[str]]:
    """The run directories ``paths`` stand for, and notes for stderr: a run directory stands for itself, a
    folder of runs (a finetune's ``seed-N/``, a sweep's ``trial-NNNN/``) for the runs directly inside it."""
    runs: list[Path] = []
    notes: list[str] = []
    for given in map(Path, paths):
        if is_run_dir(given):
            runs.append(given)
            continue
        if not given.is_dir():
            problem = "not a folder" if given.exists() else "no such folder"
            raise InfolmError(f"{given} is not an infolm run directory ({problem})")
        inside = sorted((p for p in given.iterdir() if p.is_dir() and is_run_dir(p)), key=_natural_key)
        if not inside:
            raise InfolmError(
                f"{given} is not an infolm run directory (no config.yaml or metrics.jsonl), nor is any folder in it"
            )
        started = [p for p in given.iterdir() if p.is_dir() and (p / "config.yaml").is_file() and p not in inside]
        kind = "finetune" if (given / "summary.json").is_file() else "sweep" if (given / "study.db").is_file() else ""
        names = ", ".join(p.name for p in inside)
        notes.append(f"{given}: {len(inside)} runs{f' of a {kind}' if kind else ''} ({names})")
        notes += [f"{p}: no metrics.jsonl yet, left out" for p in sorted(started, key=_natural_key)]
        runs += inside
    return runs, notes


def read_run(run_dir: str | Path) -> RunReport:
    """One run's final numbers and curves (an ``InfolmError`` if it is not a run directory)."""
    from infolm.config import load_raw

    run_dir = Path(run_dir)
    config_path, metrics_path = run_dir / "config.yaml", run_dir / "metrics.jsonl"
    if not is_run_dir(run_dir):
        raise InfolmError(f"{run_dir} is not an infolm run directory (no config.yaml or metrics.jsonl)")
    config = _flatten(load_raw(config_path))
    records = _read_records(metrics_path)
    steps = [r for r in records if "split" not in r and "event" not in r and "loss" in r]
    valid = [r for r in records if r.get("split") == "valid"]
    times = [(int(r["step"]), float(r["elapsed"])) for r in steps if _number(r.get("elapsed")) is not None]
    selection = None
    final: dict[str, float] = {}
    for split in dict.fromkeys(str(r["split"]) for r in records if "split" in r):
        last = [r for r in records if r.get("split") == split][-1]
        for key, value in last.items():
            number = _number(value)
            if key not in NOT_METRICS and number is not None:
                name = f"best_{split}_{key.removeprefix('best_')}" if key.startswith("best_") else f"{split}_{key}"
                final[name] = number
    if valid:
        best = [key for key in valid[-1] if key.startswith("best_")]
        selection = best[0].removeprefix("best_") if best else ("loss" if "loss" in valid[-1] else None)
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


# ---- group names -------------------------------------------------------------------------------------


def _short_value(value: Any, limit: int | None = VALUE_CHARS) -> str:
    """A config value for a label: a float as ``%g``, a path by its last part; longer than ``limit``, its
    start and end around "…" (file names differ at their end)."""
    if isinstance(value, bool) or value is None:
        text = json.dumps(value)
    elif isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, str):
        text = value.rstrip("/").rsplit("/", 1)[-1] if limit and "/" in value.rstrip("/") else value
    else:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    if limit is None or len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return text[:head] + "…" + text[len(text) - (limit - 1 - head) :]


def _grouped_keys(config: dict[str, Any]) -> dict[str, Any]:
    """The keys that tell groups apart: all but the run's directory, its seed and the resumable ones."""
    from infolm.build import RESUMABLE_KEYS

    return {key: value for key, value in config.items() if key not in IGNORED_KEYS and key not in RESUMABLE_KEYS}


def _differing_keys(configs: Sequence[dict[str, Any]]) -> list[str]:
    keys = sorted({key for config in configs for key in config})
    missing = object()
    return [key for key in keys if len({repr(config.get(key, missing)) for config in configs}) > 1]


def _has(config: dict[str, Any], section: str) -> bool:
    return any(key.startswith(section + ".") for key in config)


def _sections(configs: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, str]:
    """Keys missing from some configs -> the outermost section that some configs have and others lack
    (``objective.imm.k`` -> ``objective.imm`` when only some runs train with IMM)."""
    out = {}
    for key in keys:
        if all(key in config for config in configs):
            continue
        parts = key.split(".")
        for n in range(1, len(parts)):
            section = ".".join(parts[:n])
            if len({_has(config, section) for config in configs}) > 1:
                out[key] = section
                break
    return out


def _short_names(names: Sequence[str], sections: dict[str, str]) -> dict[str, str]:
    """Each dotted name by its shortest ending that no other name shares (``optim.lr`` -> ``lr``); a key
    inside a section keeps the section's last part (``objective.imm.weight`` -> ``imm.weight``)."""
    out = {}
    for name in names:
        parts = name.split(".")
        least = len(parts) - len(sections[name].split(".")) + 1 if name in sections else 1
        for n in range(least, len(parts) + 1):
            ending = ".".join(parts[-n:])
            if not any(other != name and (other == ending or other.endswith("." + ending)) for other in names):
                break
        out[name] = ending
    return out


def _telling(names: list[str], values: list[list[Any]], cost: list[float]) -> list[str]:
    """The fewest of ``names`` (greedily) whose ``values`` (one list per name, one value per config) tell
    the configs apart, most telling first; a tie goes to the lower ``cost`` (how many labels the name
    lengthens), then to the earlier name."""
    classes: list[tuple[Any, ...]] = [() for _ in values[0]] if values else []
    wanted = len({tuple(column) for column in zip(*values)})
    chosen: list[int] = []
    while len(set(classes)) < wanted:
        split = {i: len(set(zip(classes, values[i]))) for i in range(len(names)) if i not in chosen}
        best = max(split, key=lambda i: (split[i], -cost[i], -i))
        chosen.append(best)
        classes = [(*c, v) for c, v in zip(classes, values[best])]
    return [names[i] for i in chosen]


def group_labels(configs: Sequence[dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    """For each of the flattened ``configs``: (the differing keys in full, a short unique label,
    the differing keys with its values). A label names the fewest keys that tell the groups apart, each by
    its shortest unambiguous ending; a section that only some groups have is ``+name`` on those (unless one
    of its keys is named), or ``no name`` on the others where most groups have it. Long values are
    abbreviated, at most ``LABEL_KEYS`` keys and ``LABEL_CHARS`` characters shown; labels that would
    still coincide are told apart by a prefix ``gN``."""
    configs = [_grouped_keys(config) for config in configs]
    differing = _differing_keys(configs)
    sections = _sections(configs, differing)
    shown = [key for key in differing if key not in sections]
    for key, section in sections.items():
        if section not in shown:
            shown.append(section)
        values = [repr(config.get(key)) for config in configs if _has(config, section)]
        if len(set(values)) > 1:
            shown.append(key)  # the key tells apart groups that all have its section
    shown.sort(key=lambda name: (not name.endswith(".name"), name))  # ties: a plug-in's name, then A-Z
    identities = [json.dumps(config, sort_keys=True, default=str) for config in configs]
    number = {identity: n for n, identity in enumerate(dict.fromkeys(identities), 1)}
    having = {name: sum(_has(c, name) for c in configs) for name in shown if name not in differing}
    common = {name for name, count in having.items() if 2 * count > len(configs)}  # shown as "no name"
    columns: list[list[Any]] = [
        [repr(c.get(name)) if name in differing else _has(c, name) for c in configs] for name in shown
    ]
    cost = [
        len(configs) if name in differing else len(configs) - having[name] + 0.5 if name in common else having[name]
        for name in shown
    ]
    shown = _telling(shown, columns, cost)
    short = _short_names(shown, sections)

    def parts(config: dict[str, Any], limit: int | None) -> list[str]:
        named = {sections[key] for key in shown if key in sections and key in config}
        out = []
        for name in shown:
            if name in differing and name in config:
                out.append(f"{short[name]}={_short_value(config[name], limit)}")
            elif name not in differing and name not in named and _has(config, name) != (name in common):
                out.append(f"no {short[name]}" if name in common else f"+{short[name]}")
        if not out:
            absent = [sections[n].rsplit(".", 1)[-1] if n in sections else short[n] for n in shown if n not in config]
            out.append("no " + "/".join(list(dict.fromkeys(absent))[:LABEL_KEYS]) if absent else "all runs")
        return out

    def label(config: dict[str, Any], limit: int | None, prefix: str = "") -> str:
        items = parts(config, limit)
        text = prefix + ", ".join(items[:LABEL_KEYS]) + (", …" if len(items) > LABEL_KEYS else "")
        return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"

    def clash(labels: list[str]) -> bool:
        return len(set(labels)) < len(number)

    labels = [label(config, VALUE_CHARS) for config in configs]
    if clash(labels):
        labels = [label(config, None) for config in configs]
    if clash(labels):
        labels = [label(c, VALUE_CHARS, f"g{number[i]} ") for i, c in zip(identities, configs)]
    out = []
    for config, text in zip(configs, labels):
        full = {key: config[key] for key in differing if key in config}
        name = " ".join(f"{key}={json.dumps(value, sort_keys=True)}" for key, value in full.items())
        out.append((name or "all runs", text, full))
    return out


def assign_groups(runs: Sequence[RunReport]) -> None:
    """Name each run's group by the config keys on which the groups differ, in full and as a short label."""
    keys = [json.dumps(_grouped_keys(run.config), sort_keys=True, default=str) for run in runs]
    distinct = dict(zip(keys, runs))
    names = dict(zip(distinct, group_labels([run.config for run in distinct.values()])))
    for run, key in zip(runs, keys):
        run.group, run.label, run.group_config = names[key]


# ---- numbers -----------------------------------------------------------------------------------------


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
            for key, value in run_numbers(run).items():
                columns.setdefault(key, []).append(value)
        stats = {key: mean_std(values) for key, values in columns.items() if len(values) == len(members)}
        seeds = [r.seed for r in members]
        first = members[0]
        out.append(GroupReport(name, first.label, first.group_config, [r.run_dir for r in members], seeds, stats))
    return out


def run_numbers(run: RunReport) -> dict[str, float]:
    """A run's final numbers, each named by its split (``train_loss``, ``valid_ppl``, ``best_valid_loss``)."""
    numbers = {"step": float(run.step)}
    if run.train_loss is not None:
        numbers["train_loss"] = run.train_loss
    numbers.update(run.final)
    if run.elapsed is not None:
        numbers["elapsed_s"] = run.elapsed
    return numbers


def _columns(groups: Sequence[GroupReport]) -> list[str]:
    present = list(dict.fromkeys(key for g in groups for key in g.stats))

    def rank(key: str) -> tuple[int, str]:
        if key in ("step", "train_loss"):
            return (0 if key == "step" else 1), ""
        if key == "elapsed_s":
            return 9, ""
        split = key.removeprefix("best_").split("_", 1)[0]
        return (2 if split == "valid" else 3), key.removeprefix("best_") + ("~" if key.startswith("best_") else "")

    return sorted(present, key=rank)


def _cell(stat: tuple[float, float] | None, runs: int) -> str:
    if stat is None:
        return "—"
    mean, std = stat
    text = f"{mean:.4g}"
    return text if runs == 1 else f"{text} ± {std:.2g}"


def group_key(groups: Sequence[GroupReport]) -> list[str]:
    """Lines naming each group's label by its differing config keys in full (empty for one group)."""
    if len(groups) < 2:
        return []
    return [f"- {g.label}: {g.group}" for g in groups]


def table(groups: Sequence[GroupReport]) -> str:
    """A Markdown table: one row per group (its label), mean ± std over its runs; then each label's keys."""
    columns = _columns(groups)
    lines = ["| group | seeds | " + " | ".join(columns) + " |", "| --- " * (len(columns) + 2) + "|"]
    for g in groups:
        cells = [_cell(g.stats.get(key), len(g.runs)) for key in columns]
        seeds = ", ".join(str(s) for s in g.seeds)
        lines.append(f"| {g.label} | {seeds} | " + " | ".join(cells) + " |")
    key = group_key(groups)
    if key:
        lines += ["", "Groups (the config keys on which they differ):", *key]
    return "\n".join(lines)


def to_json(groups: Sequence[GroupReport], runs: Sequence[RunReport]) -> str:
    def finite(x: float | None) -> float | None:
        return x if x is not None and math.isfinite(x) else None

    payload = [
        {
            "label": g.label,
            "group": g.group,
            "config": g.config,
            "seeds": g.seeds,
            "runs": g.runs,
            "mean": {k: finite(m) for k, (m, _) in g.stats.items()},
            "std": {k: finite(s) for k, (_, s) in g.stats.items()},
            "per_run": [
                {"run_dir": r.run_dir, "seed": r.seed, **{k: finite(v) for k, v in run_numbers(r).items()}}
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
    writer.writerow(["group", "config", "seeds", "runs", *[f"{c}_{s}" for c in columns for s in ("mean", "std")]])
    for g in groups:
        cells = []
        for key in columns:
            mean, std = g.stats.get(key, (math.nan, math.nan))
            cells += [f"{mean:.6g}", f"{std:.6g}"]
        writer.writerow([g.label, g.group, " ".join(map(str, g.seeds)), len(g.runs), *cells])
    return buffer.getvalue()


# ---- curves ------------------------------------------------------------------------------------------


def summary_curve(curves: Sequence[Sequence[tuple[float, float]]]) -> SummaryCurve | None:
    """Mean and sample sd over seeds of (x, value) curves, at every x any seed logged within the x range all
    seeds cover; each seed is interpolated linearly between its own points (a repeated x keeps its last
    value, as a resumed run logs a step again). None if a seed has no point or the ranges do not overlap."""
    grids = []
    for curve in curves:
        points = dict(sorted(curve, key=lambda p: p[0]))  # x -> last value logged at x
        if not points:
            return None
        grids.append((np.array(list(points), dtype=float), np.array(list(points.values()), dtype=float)))
    if not grids:
        return None
    low, high = max(xs[0] for xs, _ in grids), min(xs[-1] for xs, _ in grids)
    if low > high:
        return None
    x = np.unique(np.concatenate([xs[(xs >= low) & (xs <= high)] for xs, _ in grids]))  # (P,)
    values = np.stack([np.interp(x, xs, ys) for xs, ys in grids])  # (seeds, P)
    sd = values.std(axis=0, ddof=1) if len(grids) > 1 else np.zeros_like(x)
    return SummaryCurve(x=x, mean=values.mean(axis=0), sd=sd, seeds=len(grids))


def _perplexity(nll: float) -> float:
    return math.exp(nll) if nll < 700 or math.isnan(nll) else math.inf


def validation_scale(selection: str) -> tuple[str, Callable[[float], float]]:
    """How the validation panel shows a selection metric: a per-token NLL as perplexity (its exp), any other
    metric (MCC, accuracy, a bound) as itself."""
    if selection == "loss" or selection.endswith("nll"):
        name = "perplexity" if selection == "loss" else f"{selection.removesuffix('nll')}perplexity"
        return f"validation {name} (exp of nats per token)", _perplexity
    if selection in ("neg_elbo", "amim_loss"):
        return f"validation {selection} (nats per token)", float
    return f"validation {selection.upper() if len(selection) <= 3 else selection}", float


def time_scale(seconds: float) -> tuple[float, str]:
    """Seconds per unit and the unit's name for an elapsed axis reaching ``seconds``."""
    if seconds >= 2 * 3600:
        return 3600.0, "hours"
    if seconds >= 120:
        return 60.0, "minutes"
    return 1.0, "seconds"


def plot_warnings(runs: Sequence[RunReport]) -> list[str]:
    """Runs whose curve has a single point (drawn as a marker) or no point at all, and groups whose seeds
    stopped at different steps (the mean covers only the steps all of them reached)."""
    out = []
    for run in runs:
        for what, curve in (("training loss", run.curve_train), ("validation", run.curve_valid)):
            if len(curve) == 1:
                out.append(f"{run.run_dir}: one {what} point only (step {curve[0][0]}), drawn as a marker")
            elif not curve:
                out.append(f"{run.run_dir}: no {what} point logged, nothing drawn")
    groups: dict[str, list[RunReport]] = {}
    for run in runs:
        groups.setdefault(run.group, []).append(run)
    for members in groups.values():
        ends = [run.curve_train[-1][0] for run in members if run.curve_train]
        if len(set(ends)) > 1:
            steps = ", ".join(map(str, ends))
            out.append(f"{members[0].label}: its seeds end at steps {steps}; the mean stops at step {min(ends)}")
    return out


PANELS = (("train", "step"), ("train", "time"), ("valid", "step"), ("valid", "time"))  # (curve, x axis)


@dataclasses.dataclass
class GroupCurves:
    """What the plot draws for one group: per panel, each seed's (x, y) points and their summary."""

    group: str
    label: str
    seeds: list[int]
    panels: dict[tuple[str, str], tuple[list[list[tuple[float, float]]], SummaryCurve | None]]


def _points(run: RunReport, curve: str) -> list[tuple[int, float, float | None]]:
    """(step, shown value, elapsed seconds) of a run's training loss or validation metric."""
    if curve == "train":
        return run.curve_train
    show = validation_scale(run.selection or "loss")[1]
    return [(step, show(value), elapsed) for step, value, elapsed in run.curve_valid]


def group_curves(runs: Sequence[RunReport], seconds_per_unit: float = 1.0) -> list[GroupCurves]:
    """Each group's curves as the plot draws them: the training loss and the validation metric (a per-token
    NLL as perplexity) of every seed against steps and against elapsed time (in units of
    ``seconds_per_unit``), and the mean ± sd over the seeds that have points, on the common step grid
    (``summary_curve``); against time, that mean is drawn at the seeds' mean elapsed time of each step."""
    groups: dict[str, list[RunReport]] = {}
    for run in runs:
        groups.setdefault(run.group, []).append(run)
    out = []
    for name, members in groups.items():
        panels = {}
        for curve in ("train", "valid"):
            points = [_points(run, curve) for run in members]
            by_step = [[(float(step), value) for step, value, _ in seed] for seed in points]
            panels[curve, "step"] = (by_step, summary_curve([seed for seed in by_step if seed]))
            timed = [[(s, v, t / seconds_per_unit) for s, v, t in seed if t is not None] for seed in points]
            values = summary_curve([[(s, v) for s, v, _ in seed] for seed in timed if seed])
            times = summary_curve([[(s, t) for s, _, t in seed] for seed in timed if seed])
            summary = None
            if values is not None and times is not None:
                summary = SummaryCurve(x=times.mean, mean=values.mean, sd=values.sd, seeds=values.seeds)
            panels[curve, "time"] = ([[(t, v) for _, v, t in seed] for seed in timed], summary)
        out.append(GroupCurves(name, members[0].label, [run.seed for run in members], panels))
    return out


def plot_curves(runs: Sequence[RunReport], path: str | Path) -> Any:
    """Training loss and the validation metric against steps and against elapsed time, as a PNG at ``path``:
    per group the mean over seeds with a ± 1 sd band, each seed faint behind it in the group's colour, a
    marker where a line has one point. Returns the figure (its lines' ``gid``: "LABEL/mean", "LABEL/seed N")."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    elapsed = [c[2] for r in runs for c in r.curve_train if c[2] is not None]
    seconds_per_unit, unit = time_scale(max(elapsed, default=0.0))
    groups = group_curves(runs, seconds_per_unit)
    cmap = matplotlib.colormaps["tab10" if len(groups) <= 10 else "tab20"]

    fig = Figure(figsize=(12, 8.5), layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.subplots(2, 2, squeeze=False)
    axes = {panel: grid[i // 2][i % 2] for i, panel in enumerate(PANELS)}
    handles: list[Any] = []
    for index, group in enumerate(groups):
        color, style = cmap(index % cmap.N), ("-", "--", ":")[(index // cmap.N) % 3]
        for panel, (seeds, summary) in group.panels.items():
            ax = axes[panel]
            for seed, points in zip(group.seeds, seeds if len(seeds) > 1 else []):
                if points:
                    marker = "o" if len(points) == 1 else None
                    x, y = zip(*points)
                    ax.plot(x, y, color=color, lw=0.8, alpha=0.35, marker=marker, gid=f"{group.label}/seed {seed}")
            if summary is None:
                continue
            marker, size = ("o", 7) if len(summary.x) == 1 else ("." if len(summary.x) <= 30 else None, 5)
            mean = ax.plot(summary.x, summary.mean, color=color, lw=2, ls=style, marker=marker, ms=size)
            mean[0].set_gid(f"{group.label}/mean")
            if summary.seeds > 1:
                low, high = summary.mean - summary.sd, summary.mean + summary.sd
                ax.fill_between(summary.x, low, high, color=color, alpha=0.18, lw=0)
                if len(summary.x) == 1:
                    ax.errorbar(summary.x, summary.mean, yerr=summary.sd, color=color, capsize=4)
        seeds_text = f"seed {group.seeds[0]}" if len(group.seeds) == 1 else f"{len(group.seeds)} seeds"
        handles.append(Line2D([], [], color=color, lw=2, ls=style, label=f"{group.label} ({seeds_text})"))

    task = str(runs[0].config.get("task.name", "stream-lm")) if runs else "stream-lm"
    train_unit = TRAIN_LOSS_UNITS.get(task, "nats per token")
    valid_names = sorted({validation_scale(r.selection)[0] for r in runs if r.selection})
    xlabels = {"step": "step (optimizer updates)", "time": f"elapsed time ({unit}, trainer clock)"}
    for (curve, axis), ax in axes.items():
        ylabel = f"training loss ({train_unit})" if curve == "train" else " / ".join(valid_names) or "validation"
        ax.set(xlabel=xlabels[axis], ylabel=ylabel)
        ax.grid(alpha=0.3)
    ppl = [v for g in groups for points in g.panels["valid", "step"][0] for _, v in points if 0 < v < math.inf]
    if valid_names and all("perplexity" in name for name in valid_names) and ppl and max(ppl) / min(ppl) > 5:
        axes["valid", "step"].set_yscale("log")
        axes["valid", "time"].set_yscale("log")
    axes["train", "step"].set_title("training loss (the objective on training batches)", fontsize="medium")
    axes["valid", "step"].set_title("validation (the task's selection metric)", fontsize="medium")
    shown = handles[:LEGEND_GROUPS]
    if len(handles) > LEGEND_GROUPS:
        more = f"… {len(handles) - LEGEND_GROUPS} more groups (see the text)"
        shown.append(Line2D([], [], color="none", label=more))
    fig.suptitle("line: mean over seeds; band: ± 1 sample sd over seeds; faint: each seed", fontsize="medium")
    fig.legend(handles=shown, loc="outside lower center", ncols=min(3, len(shown)), fontsize="small")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=110, format="png")
    tmp.replace(path)
    return fig


def report(run_dirs: Sequence[str | Path]) -> tuple[list[RunReport], list[GroupReport]]:
    if not run_dirs:
        raise InfolmError("infolm report needs at least one run directory")
    runs = [read_run(d) for d in run_dirs]
    assign_groups(runs)
    return runs, aggregate(runs)
