"""The drivers' job runner and job log: a command's result, status and wall time, shown as a reader types
it; a failed command ends a driver with one line; the log keeps each run's successful jobs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from experiments.reproduce.jobs import JobLog, run_command, shown


def test_a_command_gives_its_last_json_line_status_and_wall_time() -> None:
    done = run_command(
        [
            sys.executable,
            "-c",
            "import json, os; print('progress'); print(json.dumps({'threads': os.environ['OMP_NUM_THREADS']}))",
        ]
    )
    assert done.rc == 0 and done.result() == {"threads": "1"} and done.wall_s > 0
    entry = done.entry(run="r", seed=0)
    assert (
        entry["run"] == "r" and entry["seed"] == 0 and entry["rc"] == 0 and entry["command"].startswith(sys.executable)
    )
    failed = run_command([sys.executable, "-c", "import sys; sys.exit('no data here')"])
    assert failed.rc == 1 and failed.failure().endswith("failed (1): no data here") and "\n" not in failed.failure()


def test_the_module_call_is_shown_as_infolm() -> None:
    assert (
        shown([sys.executable, "-m", "infolm", "train", "a b.yaml", "run.seed=0"])
        == "infolm train 'a b.yaml' run.seed=0"
    )
    assert shown(["bash", "x.sh"]) == "bash x.sh"


def test_the_log_keeps_each_runs_successful_jobs_and_a_failure_ends_the_driver(tmp_path: Path, capsys) -> None:
    log = JobLog(tmp_path)
    ok = [sys.executable, "-c", "print('{}')"]
    assert log.run(tmp_path / "a", ok, "driver.py").strip() == "{}"
    with pytest.raises(SystemExit, match=r"^driver.py: the command above failed \(exit 3\)$"):
        log.run(tmp_path / "a", [sys.executable, "-c", "import sys; sys.exit(3)"], "driver.py")
    lines = [json.loads(line) for line in log.path.read_text().splitlines()]
    assert [line["rc"] for line in lines] == [0, 3] and all("commit" in line and "machine" in line for line in lines)
    assert [job["rc"] for job in log.of(tmp_path / "a")] == [0] and log.of(tmp_path / "b") == []
    dry = JobLog(tmp_path / "dry", dry_run=True)
    assert dry.run(tmp_path / "c", ok, "d") == "" and dry.run(tmp_path / "c", ok, "d") == ""
    assert capsys.readouterr().out.count("$ ") == 3 and not dry.path.exists()  # 2 real, the dry one once
