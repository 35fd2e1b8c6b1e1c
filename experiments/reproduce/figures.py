"""Learning curves of a comparison: valid <field> against epoch, mean over seeds, one line an arm."""

from __future__ import annotations

from pathlib import Path

from experiments.reproduce.render import ComparisonResult


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
        by_epoch: dict[float, list[float]] = {}
        for record in arm.records:
            for line in record.curve:
                if isinstance(line.get(field_name), (int, float)) and "epoch" in line:
                    by_epoch.setdefault(float(line["epoch"]), []).append(float(line[field_name]))
        if not by_epoch:
            continue
        epochs = sorted(by_epoch)
        means = [sum(by_epoch[e]) / len(by_epoch[e]) for e in epochs]
        ax.plot(epochs, means, marker=".", label=arm.arm.label + (" (control)" if arm is result.control else ""))
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
