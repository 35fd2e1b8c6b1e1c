"""Timing shared by the benchmarks: calls of several runs in alternating rounds, so that drift of the
machine's speed falls on all of them alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved(runs: dict[str, Callable[[], None]], repeats: int, stat: str) -> dict[str, float]:
    """Seconds per call of each run, timed in alternating rounds after two warm-up calls each."""
    for run in runs.values():
        run()
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    reduce = min if stat == "min" else statistics.median
    return {name: reduce(values) for name, values in times.items()}
