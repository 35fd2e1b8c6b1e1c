"""NLL-vs-MI Pareto frontiers of latent-variable runs (Melis thesis Sec. 5.7: "only the
measurements on the Pareto frontier are shown").

A run is one point: the NLL and MI estimate of its selected checkpoint's validation record in
``metrics.jsonl`` (the evaluation at the step the trainer saved ``checkpoints/best``, by the task's
selection metric), or of its last evaluation (``at="last"``, ``--at last``). ``split="train"``
(``--split train``) reads the same record's training-split estimates, ``train_<nll_key>`` and
``train_<mi_key>``, which ``sentence-latent`` logs with ``task.train_eval_sentences`` > 0: the thesis's
training frontiers (Figs. 5.8-5.9). Runs are grouped into curves by a label (by default the objective
terms with their estimator and sample counts, from the run's ``config.yaml``). Within a group a point is
on the frontier when no other point has at least its MI with a lower NLL. ``infolm pareto RUN_DIRS... --out DIR`` writes
``DIR/pareto.csv`` (every run, flagged) and ``DIR/pareto.png`` (the frontiers only).
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infolm.errors import InfolmError


@dataclasses.dataclass
class Point:
    run: str
    group: str
    mi: float
    nll: float
    on_frontier: bool = False


def frontier(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For (mi, nll) points: True where no other point has mi >= this mi and a lower nll
    (ties in both are kept once, the first)."""
    flags = [False] * len(points)
    best = math.inf
    for index in sorted(range(len(points)), key=lambda i: (-points[i][0], points[i][1], i)):
        if points[index][1] < best:
            flags[index] = True
            best = points[index][1]
    return flags


def run_dirs(paths: Sequence[str]) -> list[Path]:
    """Run directories: each path itself, or the ``trial-*`` runs of a sweep directory (a grid sweep's
    ``trial-pII-NNNN`` too)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if (path / "metrics.jsonl").is_file():
            found.append(path)
        elif path.is_dir() and sorted(path.glob("trial-*/metrics.jsonl")):
            found.extend(p.parent for p in sorted(path.glob("trial-*/metrics.jsonl")))
        else:
            raise InfolmError(f"{raw}: not a run directory (no metrics.jsonl) nor a sweep directory (no trial-*/)")
    return found


def default_label(config: dict[str, Any]) -> str:
    """``mi-renyi dreg 16`` (``16/1`` with separate MI draws), one part per objective term."""
    parts = []
    for name, settings in sorted((config.get("objective") or {}).items()):
        settings = settings or {}
        label = name
        if "estimator" in settings:
            label += f" {settings['estimator']}"
        if "samples" in settings:
            mi = settings.get("mi_samples")
            label += f" {settings['samples']}" + (f"/{mi}" if mi not in (None, settings["samples"]) else "")
        parts.append(label)
    return ", ".join(parts) or "runs"


def _lookup(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


AT = ("best", "last")
SPLITS = ("valid", "train")


def run_record(run: Path, nll_key: str, mi_key: str, at: str = "best") -> dict[str, Any]:
    """The evaluation record a run stands for: its selected checkpoint's (``best``) or its last one with
    both keys (``last``)."""
    from infolm.training.metrics import read_metrics, selected_record

    records = read_metrics(run / "metrics.jsonl")
    if at == "best":
        record = selected_record(records)
        if record is None:
            raise InfolmError(f"{run}: no validation record set a best in metrics.jsonl (--at last reads the last one)")
        if nll_key not in record or mi_key not in record:
            hint = " (set task.train_eval_sentences to log them)" if nll_key.startswith("train_") else ""
            raise InfolmError(f"{run}: the selected validation record has no {nll_key!r} and {mi_key!r}{hint}")
        return record
    with_keys = [r for r in records if nll_key in r and mi_key in r]
    if not with_keys:
        raise InfolmError(f"{run}: no evaluation record with {nll_key!r} and {mi_key!r} in metrics.jsonl")
    return with_keys[-1]


def collect(
    paths: Sequence[str],
    nll_key: str,
    mi_key: str,
    label_keys: Sequence[str] = (),
    at: str = "best",
    split: str = "valid",
) -> list[Point]:
    """Every run's point, grouped and flagged; ``at``: best | last; ``split``: valid | train."""
    import yaml

    if at not in AT:
        raise InfolmError(f"--at must be one of {', '.join(AT)}; got {at!r}")
    if split not in SPLITS:
        raise InfolmError(f"--split must be one of {', '.join(SPLITS)}; got {split!r}")
    if split == "train":
        nll_key, mi_key = f"train_{nll_key}", f"train_{mi_key}"
    points = []
    for run in run_dirs(paths):
        record = run_record(run, nll_key, mi_key, at)
        if record[nll_key] is None or record[mi_key] is None:
            raise InfolmError(f"{run}: the {at} evaluation record's {nll_key!r} or {mi_key!r} is not finite")
        config_path = run / "config.yaml"
        config = yaml.safe_load(config_path.read_text()) if config_path.is_file() else {}
        if label_keys:
            group = ", ".join(f"{k}={_lookup(config, k)}" for k in label_keys)
        else:
            group = default_label(config)
        points.append(Point(str(run), group, float(record[mi_key]), float(record[nll_key])))
    for group in {p.group for p in points}:
        members = [p for p in points if p.group == group]
        for point, flag in zip(members, frontier([(p.mi, p.nll) for p in members])):
            point.on_frontier = flag
    return points


def write(points: Sequence[Point], out: Path, nll_key: str, mi_key: str, optimum: float | None = None) -> None:
    """``out/pareto.csv`` and ``out/pareto.png`` (written to temporary names, then renamed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "pareto.csv.tmp"
    with tmp.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["group", "run", mi_key, nll_key, "on_frontier"])
        for p in sorted(points, key=lambda p: (p.group, -p.mi)):
            writer.writerow([p.group, p.run, f"{p.mi:.6f}", f"{p.nll:.6f}", int(p.on_frontier)])
    tmp.replace(out / "pareto.csv")
    figure, axes = plt.subplots(figsize=(6, 4.5))
    for group in sorted({p.group for p in points}):
        curve = sorted((p.mi, p.nll) for p in points if p.group == group and p.on_frontier)
        axes.plot([c[0] for c in curve], [c[1] for c in curve], marker="o", label=group)
    if optimum is not None:
        axes.axhline(optimum, color="grey", linestyle="--", linewidth=1, label=f"optimum {optimum:.4f}")
    axes.set_xlabel(f"MI estimate ({mi_key})")
    axes.set_ylabel(f"NLL ({nll_key})")
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(out / "pareto.tmp.png", dpi=120)
    plt.close(figure)
    (out / "pareto.tmp.png").replace(out / "pareto.png")
