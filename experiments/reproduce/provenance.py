"""What a driver writes into a record about where it ran: the commit and the machine."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from experiments.reproduce.protocol import ROOT


def git_commit(root: Path = ROOT, dirty_paths: tuple[str, ...] = ("src",)) -> str:
    """The short commit of ``root``, with ``+dirty-src`` where ``dirty_paths`` hold uncommitted changes."""
    found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=root)
    dirty = subprocess.run(["git", "status", "--porcelain", *dirty_paths], capture_output=True, text=True, cwd=root)
    return found.stdout.strip() + ("+dirty-src" if dirty.stdout.strip() else "")


def machine_line() -> str:
    """The machine in one line: architecture, CPU count and the torch version."""
    import torch

    return f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}"
