"""Paired statistics and the verdict rule of the reproduction pages (README.md beside this file)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scipy import stats as scipy_stats

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced at this scale"
OPPOSITE = "opposite"
NO_RECORD = "no record"
REPORTED = "reported (no test)"
ALPHA = 0.05


def transform(value: Any, name: str | None) -> float | None:
    """A recorded number in the metric's unit: ``exp`` (nats -> perplexity), ``x100``, ``bits``, ``neg``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    value = float(value)
    if name is None:
        return value
    if name == "exp":
        return math.exp(value)
    if name == "x100":
        return 100.0 * value
    if name == "bits":
        return value / math.log(2.0)
    if name == "neg":
        return -value
    raise ValueError(f"unknown transform {name!r}")


@dataclass
class Summary:
    n: int
    mean: float | None
    sd: float | None  # sample standard deviation (ddof 1); None below two values


def summarize(values: list[float]) -> Summary:
    if not values:
        return Summary(0, None, None)
    mean = sum(values) / len(values)
    if len(values) < 2:
        return Summary(len(values), mean, None)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return Summary(len(values), mean, math.sqrt(var))


@dataclass
class Paired:
    diffs: list[float]  # arm - control, one per seed present in both
    summary: Summary
    p: float | None  # two-sided paired t-test; None below two pairs


def paired(arm: dict[int, float], control: dict[int, float]) -> Paired:
    """Differences arm - control over the seeds both have, with the two-sided paired t-test's p-value."""
    seeds = sorted(set(arm) & set(control))
    diffs = [arm[s] - control[s] for s in seeds]
    summary = summarize(diffs)
    p: float | None = None
    if len(diffs) >= 2 and summary.sd is not None and summary.mean is not None:
        if summary.sd == 0.0:
            p = 1.0 if summary.mean == 0.0 else 0.0  # identical differences: the t statistic is infinite
        else:
            p = float(scipy_stats.ttest_1samp(diffs, 0.0).pvalue)
    return Paired(diffs=diffs, summary=summary, p=p)


def paper_sign(arm_paper: Any, control_paper: Any, expect: str | None, better: str) -> int:
    """The sign of the paper's arm - control: from its two numbers, else ``expect``, else an improvement."""
    if isinstance(arm_paper, (int, float)) and isinstance(control_paper, (int, float)) and arm_paper != control_paper:
        return 1 if arm_paper > control_paper else -1
    direction = expect or better
    return -1 if direction == "lower" else 1


def verdict(result: Paired, sign: int) -> str:
    """Reproduced: the paper's sign in every seed and p < 0.05; opposite: the other sign in every seed and
    p < 0.05; no record below two pairs; otherwise not reproduced at this scale."""
    if len(result.diffs) < 2 or result.p is None:
        return NO_RECORD
    if result.p < ALPHA and all(d * sign > 0 for d in result.diffs):
        return REPRODUCED
    if result.p < ALPHA and all(d * sign < 0 for d in result.diffs):
        return OPPOSITE
    return NOT_REPRODUCED


def tolerance_verdict(ours: Summary, paper: Any, tolerance: float | None, seeds: int = 1) -> str:
    """A single-model comparison with the paper's number: within ``tolerance`` (relative) or not; read on
    fewer than the ``seeds`` the protocol declares, the verdict says on how many."""
    if ours.mean is None:
        return NO_RECORD
    if tolerance is None or not isinstance(paper, (int, float)) or paper == 0:
        return REPORTED
    found = REPRODUCED if abs(ours.mean - paper) <= tolerance * abs(paper) else NOT_REPRODUCED
    return found if ours.n >= seeds else f"{found} ({ours.n} of {seeds} seeds)"
