"""The ``--keep-freed-memory`` flag shared by the benchmarks: the glibc setting the trainer applies
by default on CPU (``run.keep_freed_memory``), set once for the whole process so that every loop a
benchmark compares runs with the same allocator."""

from __future__ import annotations

import argparse

from infolm.training.allocator import keep_freed_memory


def add_allocator_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keep-freed-memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="glibc keeps freed memory, as the trainer does by default (run.keep_freed_memory); set for every loop",
    )


def apply_allocator_flag(args: argparse.Namespace) -> None:
    """Call before anything is timed."""
    if args.keep_freed_memory:
        keep_freed_memory()
