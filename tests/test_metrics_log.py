"""Reading a training run's metrics log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_read_metrics_leaves_out_a_torn_last_line_only(tmp_path: Path) -> None:
    from infolm.training.metrics import read_metrics

    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    assert [r["step"] for r in read_metrics(log)] == [1, 2]
    log.write_text('{"step": 1}\n{"step": 2}')
    assert [r["step"] for r in read_metrics(log)] == [1, 2]
    log.write_text('{"step": 1}\n{"ste\n{"step": 3}\n')
    with pytest.raises(json.JSONDecodeError):
        read_metrics(log)
