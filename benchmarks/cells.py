"""Step time (forward + backward over a sequence) of infolm's recurrent cells beside ``torch.nn.LSTM``.

    python benchmarks/cells.py --json                     # hidden 256 and 512, batch 32, T 35, 1 thread
    python benchmarks/cells.py --hidden 650 --backends fused,eager

Each measurement runs the cell on ``x (B, T, H)`` from a zero state and back-propagates ``sum(outputs)``.
Models are timed in interleaved rounds and the fastest round of each is reported (on a shared, noisy machine the
minimum estimates the uncontended cost best; ``--stat median`` reports medians instead).
With ``--json`` the top-level ``*_vs_nn_lstm`` keys are the largest ratio over the hidden sizes measured.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch
from process_flags import add_process_flags, apply_process_flags
from timing import interleaved  # benchmarks/timing.py, beside this script
from torch import nn

from infolm.models.cells import LSTMCell, MogrifierLSTMCell, RLSTMCell


def _step(module: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        outputs = module(x)[0]
        outputs.sum().backward()

    return run


def measure(
    hidden: int, batch: int, steps: int, rounds: int, rank: int, backends: list[str], repeats: int, stat: str
) -> dict:
    torch.manual_seed(0)
    x = torch.randn(batch, steps, hidden)
    models: dict[str, nn.Module] = {"nn_lstm": nn.LSTM(hidden, hidden, batch_first=True)}
    for backend in backends:
        suffix = "" if backend == "fused" else f"_{backend}"
        models[f"lstm{suffix}"] = LSTMCell(hidden, hidden, capped_input_gate=True, backend=backend)
        models[f"mogrifier{suffix}"] = MogrifierLSTMCell(hidden, hidden, rounds=rounds, rank=rank, backend=backend)
        models[f"rlstm{suffix}"] = RLSTMCell(hidden, hidden, backend=backend)
    runs = {name: _step(module, x) for name, module in models.items()}
    medians = {name: 1000.0 * seconds for name, seconds in interleaved(runs, repeats, stat).items()}
    ratios = {f"{name}_vs_nn_lstm": medians[name] / medians["nn_lstm"] for name in medians if name != "nn_lstm"}
    return {"hidden": hidden, "ms": medians, **ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 512], help="hidden (= input) sizes")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=35, help="sequence length T")
    parser.add_argument("--rounds", type=int, default=5, help="Mogrifier rounds r")
    parser.add_argument("--rank", type=int, default=64, help="Mogrifier rank k (<= 0: full rank)")
    parser.add_argument("--backends", default="fused", help="comma-separated: fused, eager")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--stat", choices=("min", "median"), default="min", help="statistic over the repeats")
    add_process_flags(parser, threads=1)
    args = parser.parse_args()
    apply_process_flags(args)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    sizes = [
        measure(h, args.batch, args.steps, args.rounds, args.rank, backends, args.repeats, args.stat)
        for h in args.hidden
    ]
    keys = [k for k in sizes[0] if k.endswith("_vs_nn_lstm")]
    summary = {key: max(size[key] for size in sizes) for key in keys}
    setup = {"batch": args.batch, "steps": args.steps, "rounds": args.rounds, "rank": args.rank, "stat": args.stat}
    setup.update(threads=args.threads, keep_freed_memory=args.keep_freed_memory, torch=torch.__version__)
    result = {**summary, "setup": setup, "sizes": sizes}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for size in sizes:
        cells = ", ".join(f"{name} {ms:.1f}" for name, ms in size["ms"].items())
        print(f"hidden {size['hidden']}: ms per step: {cells}")
    for key, value in summary.items():
        print(f"{key}: {value:.2f}x (worst over sizes)")


if __name__ == "__main__":
    main()
