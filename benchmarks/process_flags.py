"""The flags every benchmark shares, applied once for the whole process so that every loop a benchmark
compares runs under the same settings: ``--threads`` (torch's intra-op threads), ``--json`` and
``--keep-freed-memory`` (the glibc setting the trainer applies by default on CPU,
``run.keep_freed_memory``)."""

from __future__ import annotations

import argparse

import torch

from infolm.training.allocator import keep_freed_memory


def add_process_flags(parser: argparse.ArgumentParser, threads: int = 0) -> None:
    parser.add_argument("--threads", type=int, default=threads, help="torch threads (0: torch's default)")
    parser.add_argument(
        "--keep-freed-memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="glibc keeps freed memory, as the trainer does by default (run.keep_freed_memory); set for every loop",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def apply_process_flags(args: argparse.Namespace) -> None:
    """Call before anything is built or timed."""
    if args.keep_freed_memory:
        keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
