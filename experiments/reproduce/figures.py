"""Learning curves of a comparison: valid <field> against epoch, mean over seeds, one line an arm."""

from __future__ import annotations

from pathlib import Path

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
    ax.set_title(result.comparison.title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return True
