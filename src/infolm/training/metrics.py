"""The run's canonical log: ``metrics.jsonl`` (one JSON object per record), optionally mirrored to TensorBoard."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any


class MetricsLog:
    def __init__(self, path: Path, enabled: bool = True, tensorboard_dir: Path | None = None) -> None:
        self.path = path
        self.enabled = enabled
        self.writer: Any = None
        if enabled and tensorboard_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(tensorboard_dir))

    def lines(self) -> int:
        if not self.path.exists():
            return 0
        with open(self.path, "rb") as handle:
            return sum(1 for _ in handle)

    def truncate(self, lines: int) -> None:
        """Keep the first ``lines`` records (resume drops records written after the checkpoint); a log
        with nothing to drop is left untouched (its modification time dates the last record)."""
        if not self.enabled or not self.path.exists():
            return
        with open(self.path, "rb") as handle:
            records = handle.readlines()
        if len(records) <= lines:
            return
        kept = records[:lines]
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(b"".join(kept))
        tmp.replace(self.path)

    def set_aside(self) -> Path | None:
        """Rename a non-empty log to ``metrics.jsonl.attempt-N`` (the first free N) so that a run that
        starts over logs afresh; the renamed path, or None when there was nothing to keep."""
        if not self.enabled or not self.path.exists():
            return None
        if self.path.stat().st_size == 0:
            self.path.unlink()
            return None
        attempt = 1
        while (aside := self.path.with_name(f"{self.path.name}.attempt-{attempt}")).exists():
            attempt += 1
        self.path.replace(aside)
        return aside

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        with open(self.path, "a") as handle:
            handle.write(json.dumps(clean) + "\n")
            handle.flush()
        if self.writer is not None:
            prefix = record.get("split", "train")
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step":
                    self.writer.add_scalar(f"{prefix}/{key}", value, record["step"])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics log. A process killed while writing leaves a last line without its newline:
    that torn line is left out; any other line that is not JSON raises."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")
    torn = lines.pop()  # "" when the log ends with its newline
    records = [json.loads(line) for line in lines if line.strip()]
    if torn.strip():
        with contextlib.suppress(json.JSONDecodeError):
            records.append(json.loads(torn))
    return records


def selected_record(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The validation record of the checkpoint the run selected (``checkpoints/best``): the last one that
    set a new best of the task's selection metric. The trainer writes ``best_<metric>`` on every
    validation record; it changes exactly when an evaluation improves on the best so far (the step it
    saves ``best/``). None when no record did (no finite validation value, or a log without the field)."""
    selected: dict[str, Any] | None = None
    previous: Any = None
    for record in records:
        if record.get("split") != "valid":
            continue
        names = [key for key in record if key.startswith("best_") and key[len("best_") :] in record]
        if not names:
            continue
        best = record[names[0]]
        if best is not None and best != previous and best == record[names[0][len("best_") :]]:
            selected = record
        previous = best
    return selected
