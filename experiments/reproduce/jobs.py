"""How the experiment drivers run a job: one command in the repository root on one thread, with its exit
status, wall time and printed JSON result, shown as a reader would type it; and the job log a driver keeps
across invocations (``jobs.jsonl``), so that a record of a run made by an earlier invocation still names the
command, commit, machine and wall time of the job that made it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.reproduce.protocol import ROOT
from experiments.reproduce.provenance import git_commit, machine_line


def shown(command: list[str]) -> str:
    """The command as a reader would type it (``infolm`` for this interpreter's module call)."""
    if command[:3] == [sys.executable, "-m", "infolm"]:
        return shlex.join(["infolm", *command[3:]])
    return shlex.join(command)


def one_thread_env() -> dict[str, str]:
    """The environment with one intra-op thread: drivers run one job per core."""
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


@dataclass(frozen=True)
class Done:
    """A finished command: what it printed, its exit status and its wall seconds."""

    command: list[str]
    rc: int
    wall_s: float
    stdout: str
    stderr: str

    def result(self) -> Any:
        """The last line it printed, read as JSON (``infolm ... --json`` prints its result there)."""
        return json.loads(self.stdout.strip().splitlines()[-1])

    def entry(self, **fields: Any) -> dict[str, Any]:
        """The job as a record keeps it: ``fields``, then the command as shown, its status and wall time."""
        return {**fields, "command": shown(self.command), "rc": self.rc, "wall_s": round(self.wall_s, 2)}

    def failure(self) -> str:
        """One line naming the command that failed, its status and the end of what it wrote to stderr."""
        return f"error: {shown(self.command)} failed ({self.rc}): {self.stderr.strip()[-500:]}"


def run_command(command: list[str], env: dict[str, str] | None = None, stderr: bool = True) -> Done:
    """Run ``command`` in the repository root (one thread unless ``env`` says otherwise), stdout captured;
    stderr too, unless ``stderr`` is False (then it reaches the terminal: progress bars, warnings)."""
    tick = time.perf_counter()
    done = subprocess.run(
        command,
        cwd=ROOT,
        env=env if env is not None else one_thread_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stderr else None,
        text=True,
    )
    return Done(command, done.returncode, time.perf_counter() - tick, done.stdout, done.stderr or "")


class JobLog:
    """A driver's job log (``OUT/jobs.jsonl``): each command with the run it made, its wall time, commit and
    machine. A dry run prints each command once and runs nothing."""

    def __init__(self, out: Path, dry_run: bool = False) -> None:
        self.path = out / "jobs.jsonl"
        self.dry_run = dry_run
        self.planned: set[Path] = set()  # a dry run's runs, each printed once

    def run(self, run: Path, command: list[str], driver: str) -> str:
        """Run ``command`` for ``run`` and log it; what it printed. ``driver`` names the driver in the one
        line that a failed command ends it with."""
        if self.dry_run and run in self.planned:
            return ""
        print("$", shlex.join(command), flush=True)
        if self.dry_run:
            self.planned.add(run)
            return ""
        done = run_command(command, env=dict(os.environ), stderr=False)
        sys.stdout.write(done.stdout)
        entry = {"run": str(run), "command": shlex.join(command), "rc": done.rc, "wall_s": round(done.wall_s, 1)}
        entry |= {"commit": git_commit(), "machine": machine_line()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as handle:
            handle.write(json.dumps(entry) + "\n")
        if done.rc != 0:
            raise SystemExit(f"{driver}: the command above failed (exit {done.rc})")
        return done.stdout

    def of(self, run: Path) -> list[dict[str, Any]]:
        """The successful jobs that made ``run``, oldest first."""
        if not self.path.is_file():
            return []
        lines = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
        return [line for line in lines if line.get("run") == str(run) and line.get("rc") == 0]
