"""Plot helpers for experiment curves: mean lines with percentile bands, written to PNG.

Uses matplotlib's object-oriented API on the Agg canvas (no pyplot, no global backend switch),
so it works headless and in worker processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def new_figure(ncols: int = 1, width_per_panel: float = 5.5, height: float = 4.0) -> tuple[Figure, list[Axes]]:
    """A figure with `ncols` side-by-side panels on an Agg canvas."""
    fig = Figure(figsize=(width_per_panel * ncols, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def percentile_band(
    ax: Axes,
    x: Sequence[float] | np.ndarray,
    samples: np.ndarray,
    label: str,
    color: str,
    lower: float = 10.0,
    upper: float = 90.0,
    marker: str = "o",
    linestyle: str = "-",
) -> dict[str, np.ndarray]:
    """Plot the mean over runs and a shaded [lower, upper] percentile band.

    `samples` is (runs, len(x)); the band is taken over runs at each x. Returns the plotted
    statistics (mean, lo, hi), each of shape (len(x),).
    """
    samples = np.asarray(samples, dtype=float)
    x = np.asarray(x, dtype=float)
    if samples.ndim != 2 or samples.shape[1] != x.shape[0]:
        raise ValueError(f"samples must be (runs, {x.shape[0]}), got {samples.shape}")
    mean = samples.mean(axis=0)  # (len(x),)
    lo, hi = np.percentile(samples, [lower, upper], axis=0)  # (len(x),) each
    ax.plot(x, mean, linestyle=linestyle, marker=marker, markersize=3, color=color, label=label)
    ax.fill_between(x, lo, hi, color=color, alpha=0.2, linewidth=0)
    return {"mean": mean, "lo": lo, "hi": hi}


def save_figure(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Write the figure as PNG (parent folders created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path
