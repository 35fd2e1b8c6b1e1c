"""One finished run, read from its record folder into one nested mapping that metrics address by
dotted paths (the key table is in README.md beside this file)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_NOT_SCORES = {"record.json", "overrides.json", "train-summary.json"}


@dataclass
class Job:
    """What produced a record: the command, the commit, the machine and the wall time, as far as kept."""

    command: str | None = None
    commit: str | None = None
    machine: str | None = None
    wall_s: float | None = None


@dataclass
class Record:
    name: str
    data: dict[str, Any]
    curve: list[dict[str, Any]] = field(default_factory=list)  # the metrics.jsonl lines with split: valid
    jobs: list[Job] = field(default_factory=list)

    def get(self, path: str) -> Any:
        """The value at a dotted path, or None where any part is missing."""
        node: Any = self.data
        for part in path.split("."):
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

    @property
    def last_epoch(self) -> int | None:
        epochs = [line["epoch"] for line in self.curve if isinstance(line.get("epoch"), (int, float))]
        return int(max(epochs)) if epochs else None

    def best_valid_up_to(self, epoch: int, field_name: str) -> float | None:
        """The lowest valid ``field_name`` over evaluations at epochs <= ``epoch`` (the early-stopping read)."""
        values = [
            float(line[field_name])
            for line in self.curve
            if line.get("epoch", math.inf) <= epoch and isinstance(line.get(field_name), (int, float))
        ]
        return min(values) if values else None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _machine(value: Any) -> str | None:
    """A machine as one line: a driver's description mapping (``cuda``, ``cpus``, ``torch``) or its text."""
    if isinstance(value, dict):
        parts = [str(value["cuda"])] if value.get("cuda") else []
        parts += [f"{value['cpus']} CPUs"] if value.get("cpus") else []
        parts += [f"torch {value['torch']}"] if value.get("torch") else []
        return ", ".join(parts) or None
    return None if value is None else str(value)


def _jobs(record_json: dict[str, Any]) -> list[Job]:
    best = (record_json.get("checkpoints") or {}).get("best") or {}
    commit = best.get("git_commit") or record_json.get("commit")
    # the driver's line (CPU model, cores) over the checkpoint's (the architecture alone)
    machine = record_json.get("machine") or best.get("machine")
    jobs = []
    for entry in [*(record_json.get("jobs") or []), *(record_json.get("log") or [])]:
        if not isinstance(entry, dict):
            continue
        jobs.append(
            Job(
                command=entry.get("command"),
                commit=entry.get("commit", commit),
                machine=_machine(entry.get("machine", machine)),
                wall_s=entry.get("wall_s"),
            )
        )
    if not jobs and (commit or machine or record_json.get("command")):
        # a driver that keeps one job in record.json's top level (command, and wall_s where it has one)
        jobs.append(
            Job(
                command=record_json.get("command"),
                commit=commit,
                machine=_machine(machine),
                wall_s=record_json.get("wall_s"),
            )
        )
    return jobs


def load_record(folder: Path) -> Record:
    """Read ``folder`` (one run's record) into a :class:`Record`."""
    data: dict[str, Any] = {}
    for path in sorted(folder.glob("*.json")):
        if path.name not in _NOT_SCORES:
            data[path.stem] = _read_json(path)
    summary = _read_json(folder / "train-summary.json")
    if summary is not None:
        data["summary"] = summary
    config_path = folder / "config.yaml"
    if config_path.exists():
        data["config"] = yaml.safe_load(config_path.read_text())
    record_json = _read_json(folder / "record.json") or {}
    log: dict[str, Any] = {}
    for entry in record_json.get("log") or []:
        if isinstance(entry, dict) and "key" in entry and "result" in entry:
            log[str(entry["key"]).split("/", 1)[0]] = entry["result"]
    if log:
        data["log"] = log
    curve: list[dict[str, Any]] = []
    metrics = folder / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and row.get("split") == "valid":
                curve.append(row)
    if curve:
        data["valid"] = curve[-1]
        with_loss = [row for row in curve if isinstance(row.get("loss"), (int, float))]
        if with_loss:
            data["best_valid"] = min(with_loss, key=lambda row: row["loss"])
    return Record(name=folder.name, data=data, curve=curve, jobs=_jobs(record_json))


def load_records(folder: Path) -> dict[str, Record]:
    """Every record of one driver's folder, by run name (``<arm>-s<seed>``); empty when it is missing."""
    if not folder.is_dir():
        return {}
    return {path.name: load_record(path) for path in sorted(folder.iterdir()) if path.is_dir()}
