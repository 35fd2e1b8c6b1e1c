"""What a driver writes into a record about where it ran: the commit and the machine."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from experiments.reproduce.protocol import ROOT


def git_commit(root: Path = ROOT) -> str:
    """The working tree's full commit, with ``-dirty`` where tracked files differ from it; ``unknown``
    outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=40"], cwd=root, capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def machine_line() -> str:
    """The machine in one line: the CPU's model name (Linux) or architecture, its cores, the GPU's name where
    torch sees one, the torch version."""
    import torch

    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
    return f"{name}, {os.cpu_count()} cores{gpu}, torch {torch.__version__}"
