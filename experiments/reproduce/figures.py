"""Learning curves of a comparison: valid <field> against epoch, mean over seeds, one line an arm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.reproduce.records import Record
from experiments.reproduce.render import ComparisonResult


def mean_curve(records: list[Record], field_name: str) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """The mean over seeds of valid ``field_name`` by epoch, split where a seed's run ends: the epochs that
    every run with a curve reached, then the later ones (the mean of fewer seeds, drawn apart: where early
    stopping ends some seeds first, the rest of the line is no longer the same mean)."""
    by_epoch: dict[float, list[float]] = {}
    runs = 0
    for record in records:
        points = [
            (float(line["epoch"]), float(line[field_name]))
            for line in record.curve
            if isinstance(line.get(field_name), (int, float)) and isinstance(line.get("epoch"), (int, float))
        ]
        runs += bool(points)
        for epoch, value in points:
            by_epoch.setdefault(epoch, []).append(value)
    full: list[tuple[float, float]] = []
    fewer: list[tuple[float, float]] = []
    for epoch in sorted(by_epoch):
        values = by_epoch[epoch]
        (full if len(values) == runs else fewer).append((epoch, sum(values) / len(values)))
    return full, fewer


def write_curve(result: ComparisonResult, path: Path) -> bool:
    """Write the PNG; False (nothing written) where no arm has a curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = result.comparison.curve or {}
    field_name = str(spec.get("field", "ppl"))
    arms = ([result.control] if result.control else []) + result.arms
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    drawn = False
    for arm in arms:
        full, fewer = mean_curve(arm.records, field_name)
        if not full and not fewer:
            continue
        label = arm.arm.label + (" (control)" if arm is result.control else "")
        (line,) = ax.plot([e for e, _ in full], [m for _, m in full], marker=".", label=label)
        if fewer:  # after a seed's run ended: the mean of the seeds still running, joined dotted
            joined = full[-1:] + fewer
            ax.plot(
                [e for e, _ in joined],
                [m for _, m in joined],
                linestyle=":",
                color=line.get_color(),
                label=f"{label}, fewer seeds",
            )
        drawn = True
    if not drawn:
        plt.close(fig)
        return False
    if spec.get("log"):
        ax.set_yscale("log")
    if "ylim" in spec:
        ax.set_ylim(*spec["ylim"])
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"valid {field_name} (mean over seeds)")
    return _save(fig, ax, result.comparison.title, path)


def write_frontier(result: ComparisonResult, path: Path) -> bool:
    """The measured points of each curve of a frontier comparison (mean over seeds, ± one sd on both axes),
    the frontier of those means joined (not for a curve read at its own points only), and a dotted line at
    each x the comparison reads; False (nothing written) where no point has a record."""
    spec = result.points.comparison.frontier if result.points is not None else None
    if spec is None or result.points is None:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.reproduce.frontier import pareto_front
    from experiments.reproduce.stats import summarize

    by_arm = {arm.arm.arm: arm for arm in result.points.arms}
    metrics = {metric.name: metric for metric in result.points.comparison.metrics}
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    drawn = False
    for label, names in spec.curves.items():
        means = []
        for name in names:
            values = by_arm[name].values
            x, y = summarize(list(values.get(spec.x, {}).values())), summarize(list(values.get(spec.y, {}).values()))
            if x.mean is None or y.mean is None:
                continue
            means.append((x.mean, y.mean, x.sd or 0.0, y.sd or 0.0))
        if not means:
            continue
        bars = ax.errorbar(
            [m[0] for m in means], [m[1] for m in means], xerr=[m[2] for m in means], yerr=[m[3] for m in means],
            fmt="o", markersize=4, capsize=2, label=label,
        )  # fmt: skip
        drawn = True
        if label in spec.measured_only:  # separate models: points only, no frontier to join
            continue
        front = pareto_front([(m[0], m[1]) for m in means], metrics[spec.x].better, metrics[spec.y].better)
        ax.plot([p[0] for p in front], [p[1] for p in front], color=bars.lines[0].get_color(), linewidth=1)
    if not drawn:
        plt.close(fig)
        return False
    for at in spec.at:
        ax.axvline(at, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel(f"{spec.x} (mean over seeds)")
    ax.set_ylabel(f"{spec.y} (mean over seeds)")
    return _save(fig, ax, result.comparison.title, path)


def _save(fig: Any, ax: Any, title: str, path: Path) -> bool:
    """Title, grid and legend, then the PNG (no software tag, so that a rebuild writes the same bytes)."""
    import matplotlib.pyplot as plt

    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return True
