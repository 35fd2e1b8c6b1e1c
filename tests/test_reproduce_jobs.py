"""A record whose driver kept its one job in record.json's top level shows that job's command."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.reproduce.records import load_record


def test_a_top_level_command_is_the_records_job(tmp_path: Path) -> None:
    top = {"command": "infolm train c.yaml", "commit": "abc1234", "machine": "x86_64", "wall_s": 7.0}
    (tmp_path / "record.json").write_text(json.dumps(top))
    (job,) = load_record(tmp_path).jobs
    assert (job.command, job.commit, job.machine, job.wall_s) == ("infolm train c.yaml", "abc1234", "x86_64", 7.0)
    listed = {**top, "jobs": [{"command": "infolm evaluate run", "wall_s": 2.0}]}  # a jobs list wins
    (tmp_path / "record.json").write_text(json.dumps(listed))
    assert [(j.command, j.wall_s) for j in load_record(tmp_path).jobs] == [("infolm evaluate run", 2.0)]
