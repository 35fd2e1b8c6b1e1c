"""A pilot's report: paired differences (arm − control per evaluation), the JSONL lines of an arm, the table."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def paired_differences(curve: list[dict[str, Any]], control: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per evaluation step both curves have: arm − control of every value both report."""
    by_step = {point["step"]: point["values"] for point in control}
    out = []
    for point in curve:
        base = by_step.get(point["step"])
        if base is None:
            continue
        values = {k: _difference(v, base[k]) for k, v in point["values"].items() if k in base}
        out.append({"step": point["step"], "values": values})
    return out


def _difference(value: Any, base: Any) -> float | None:
    if value is None or base is None:  # a non-finite value, as metrics.jsonl writes it
        return None
    return float(value) - float(base)


def write_jsonl(
    path: Path, arm: str, control: str, selection: str, curve: list[dict[str, Any]], differences: list[dict[str, Any]]
) -> None:
    """One line per evaluation of the arm: its values and, where the control has that step, arm − control."""
    paired = {point["step"]: point["values"] for point in differences}
    with open(path, "w") as handle:
        for point in curve:
            delta = paired.get(point["step"])
            line = {
                "step": point["step"],
                "arm": arm,
                "control": control,
                "selection": selection,
                "value": point["values"].get(selection),
                "difference": None if delta is None else delta.get(selection),
                "values": point["values"],
                "differences": delta,
            }
            handle.write(json.dumps(finite(line)) + "\n")


def finite(value: Any) -> Any:
    """JSON has no Infinity/NaN: non-finite floats become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def table(result: dict[str, Any]) -> str:
    """The selection metric of every arm at every evaluation, and arm − control beside each other arm."""
    selection, control = result["selection"], result["control"]
    direction = "higher" if result["higher_is_better"] else "lower"
    arms = result["arms"]
    lines = [
        f"pilot of {result['run_dir']} from step {result['start_step']} ({result['start']}), {result['steps']} steps; "
        f"valid {selection} ({direction} is better), arm - control beside each arm",
    ]
    names = [control, *(name for name in arms if name != control)]
    header = ["step"] + [f"{name} (control)" if name == control else name for name in names]
    rows = [header]
    steps = sorted({point["step"] for arm in arms.values() for point in arm["curve"]})
    for step in steps:
        row = [str(step)]
        for name in names:
            value = _at(arms[name]["curve"], step, selection)
            delta = _at(arms[name]["differences"], step, selection)
            cell = "-" if value is None else f"{value:.4f}"
            if name != control and delta is not None:
                cell += f" {delta:+.4f}"
            row.append(cell)
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows]
    lines += [f"{name}: {arm['stopped']}" for name, arm in arms.items() if arm["stopped"]]
    return "\n".join(lines)


def _at(points: list[dict[str, Any]], step: int, key: str) -> float | None:
    for point in points:
        if point["step"] == step:
            value = point["values"].get(key)
            return None if value is None else float(value)
    return None
