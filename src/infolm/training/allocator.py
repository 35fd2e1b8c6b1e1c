"""glibc malloc settings for CPU training loops.

A training step frees and reallocates the same large buffers (logits, their gradients, the LSTM
workspaces) every step. By default glibc returns large freed blocks to the operating system
(``mmap``/``munmap`` above a dynamic threshold, heap trimming above 128 KiB), so every step pays for
fresh zeroed pages: on the 2-core CPU this project is developed on, that is 15-20% of a PTB LSTM
step (``benchmarks/throughput.py``). Keeping freed memory in the heap removes that cost; the
process's resident size then stays at its peak instead of shrinking between steps.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1  # mallopt parameters from glibc's malloc.h
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD = 1 << 30  # keep up to 1 GiB of free memory at the top of the heap
MMAP_THRESHOLD = 32 << 20  # glibc's maximum: blocks up to 32 MiB come from the heap, never mmap


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory for reuse; returns whether the settings were applied (False
    on other platforms and C libraries, where nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
