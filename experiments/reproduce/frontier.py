"""Frontiers read where they were measured: each curve's NLL at a given MI, per seed, from its own points.

A curve is a set of arms (one per λ, say) whose records give, at each seed, points (x, y) such as (MI,
NLL). Its frontier at a seed is the set of its points that no other of its points dominates (at least
as good on both axes, better on one); between two neighbouring frontier points the curve is read on the
straight line joining them. A reading is kept only where it was measured: at a frontier point, or between
two frontier points at most ``max_gap`` apart in x. A reading across a wider gap, or outside the x range
the frontier spans, is left out of the values and named in a note under the table, so that no claim rests
on a line drawn through unmeasured MI. The readings then pair like any arm and control.

A curve listed in ``measured_only`` is a set of separate models whose x its design fixes (a VQ-VAE's
D ln K): it is read at its own points alone, a point whose x rounds to the reading's at the x metric's
digits, with no frontier and no line, so a point is read even where another of its points dominates it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from experiments.reproduce import stats
from experiments.reproduce.protocol import Comparison, FrontierSpec, Metric

GAP = "gap"  # bracketing frontier points further apart in x than max_gap
OUTSIDE = "outside"  # x beyond the frontier's measured range


@dataclass
class Reading:
    value: float | None  # y at x, or None where not read
    low: float | None = None  # x of the frontier point at or below x
    high: float | None = None  # x of the frontier point at or above x
    reason: str | None = None  # None (read), GAP or OUTSIDE


def pareto_front(points: list[tuple[float, float]], x_better: str, y_better: str) -> list[tuple[float, float]]:
    """The points no other point dominates, sorted by x; duplicates kept once."""
    sx = 1.0 if x_better == "higher" else -1.0
    sy = 1.0 if y_better == "higher" else -1.0
    unique = sorted(set(points))
    kept = []
    for x, y in unique:
        dominated = any(sx * (ox - x) >= 0 and sy * (oy - y) >= 0 and (ox, oy) != (x, y) for ox, oy in unique)
        if not dominated:
            kept.append((x, y))
    return kept


def read_at(front: list[tuple[float, float]], x: float, max_gap: float) -> Reading:
    """The frontier's y at ``x``: a point's own y where one lies at ``x``, else the straight line between
    the two neighbouring points that bracket ``x``, provided they are at most ``max_gap`` apart in x."""
    if not front or x < front[0][0] or x > front[-1][0]:
        return Reading(None, reason=OUTSIDE)
    for (x0, y0), (x1, y1) in zip(front, front[1:]):
        if x0 <= x <= x1:
            if x1 - x0 > max_gap and x not in (x0, x1):
                return Reading(None, x0, x1, GAP)
            value = y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
            return Reading(value, x0, x1)
    return Reading(front[0][1], front[0][0], front[0][0])  # a frontier of one point, at x


def reading_metric(spec: FrontierSpec, y: Metric, at: float) -> Metric:
    return Metric(name=f"{y.name} at {spec.x} {at:g}", path="", better=y.better, digits=y.digits)


Readings = dict[str, dict[str, dict[int, float]]]  # curve -> reading metric name -> seed -> y


def read(comparison: Comparison, points: Readings) -> tuple[list[Metric], Readings, list[str]]:
    """The reading metrics, each curve's readings, and the readings left out (in words).

    ``points`` is arm -> metric name -> seed -> value, as collected for the comparison's arms."""
    spec = comparison.frontier
    assert spec is not None
    by_name = {metric.name: metric for metric in comparison.metrics}
    x_metric, y_metric = by_name[spec.x], by_name[spec.y]
    metrics = [reading_metric(spec, y_metric, at) for at in spec.at]
    readings: Readings = {}
    skipped: list[str] = []
    for label, names in spec.curves.items():
        found = readings.setdefault(label, {})
        for seed in comparison.seeds:
            seed_points = [
                (points[name][spec.x][seed], points[name][spec.y][seed])
                for name in names
                if seed in points.get(name, {}).get(spec.x, {}) and seed in points.get(name, {}).get(spec.y, {})
            ]
            if not seed_points:
                continue
            if label in spec.measured_only:
                skipped += _read_points(label, seed, seed_points, spec, metrics, x_metric, y_metric, found)
                continue
            front = pareto_front(seed_points, x_metric.better, y_metric.better)
            for at, metric in zip(spec.at, metrics):
                reading = read_at(front, at, spec.max_gap)
                if reading.value is not None and math.isfinite(reading.value):
                    found.setdefault(metric.name, {})[seed] = reading.value
                elif reading.reason == GAP:
                    skipped.append(
                        f"{label} at {spec.x} {at:g}, seed {seed}: between measured points at "
                        f"{reading.low:.{x_metric.digits}f} and {reading.high:.{x_metric.digits}f} "
                        f"(a gap wider than {spec.max_gap:g})"
                    )
                else:
                    span = f"{front[0][0]:.{x_metric.digits}f}-{front[-1][0]:.{x_metric.digits}f}"
                    skipped.append(
                        f"{label} at {spec.x} {at:g}, seed {seed}: outside the span of its frontier, {span} "
                        "(points beyond it are dominated or absent)"
                    )
    return metrics, readings, skipped


def _read_points(
    label: str,
    seed: int,
    seed_points: list[tuple[float, float]],
    spec: FrontierSpec,
    metrics: list[Metric],
    x_metric: Metric,
    y_metric: Metric,
    found: dict[str, dict[int, float]],
) -> list[str]:
    """A measured-only curve's readings at one seed (into ``found``) and the readings left out."""
    tolerance = 0.5 * 10.0**-x_metric.digits  # the x shown in the runs table is the reading's
    best = min if y_metric.better == "lower" else max
    skipped = []
    for at, metric in zip(spec.at, metrics):
        ys = [y for x, y in seed_points if abs(x - at) <= tolerance and math.isfinite(y)]
        if ys:
            found.setdefault(metric.name, {})[seed] = best(ys)
        else:
            where = f"{label} at {spec.x} {at:g}, seed {seed}"
            skipped.append(f"{where}: no point of its own there (read at its points only)")
    return skipped


def verdict_of(arm_paired: dict[str, stats.Paired], metrics: list[Metric], spec: FrontierSpec) -> str:
    """One verdict per reading, in words: 'at MI 5.5: reproduced; at MI 6: no record'."""
    sign = stats.paper_sign(None, None, spec.expect, metrics[0].better)
    parts = []
    for at, metric in zip(spec.at, metrics):
        parts.append(f"at {spec.x} {at:g} {stats.verdict(arm_paired[metric.name], sign)}")
    return ", ".join(parts)
