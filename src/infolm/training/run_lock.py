"""One process per run directory: ``infolm train`` holds ``RUN_DIR/.lock`` while it runs.

The lock is an OS file lock (``filelock``, ``flock`` on Linux): the kernel releases it when its
holder exits, however it exits, SIGKILL included, so a lock left by a killed run is never waited on
-- the next ``infolm train`` takes it at once and resumes the run. A second process that finds the
lock held refuses with one line naming the holder (``RUN_DIR/.lock.owner``: its PID and host).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from infolm.errors import InfolmError

LOCK = ".lock"
OWNER = ".lock.owner"


@contextlib.contextmanager
def run_dir_lock(run_dir: str | Path) -> Iterator[None]:
    """Hold the run directory's lock for the ``with`` block; ``InfolmError`` if another process holds it."""
    import filelock

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(run_dir / LOCK), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        try:
            holder = (run_dir / OWNER).read_text().strip() or "unknown"
        except OSError:
            holder = "unknown"
        raise InfolmError(
            f"run directory {run_dir} is in use by another infolm process ({holder}); "
            "wait for it to finish or use another run.dir"
        ) from None
    try:
        (run_dir / OWNER).write_text(f"pid {os.getpid()} on {socket.gethostname()}\n")
        yield
    finally:
        lock.release()


def run_dir_in_use(run_dir: str | Path) -> bool:
    """Whether an ``infolm train`` process holds the run directory's lock now (it is training)."""
    import filelock

    path = Path(run_dir) / LOCK
    if not path.is_file():
        return False
    lock = filelock.FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        return True
    lock.release()
    return False
