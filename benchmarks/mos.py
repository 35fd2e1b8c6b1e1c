"""The AWD-LSTM-MoS of ``configs/ptb/bmi-*.yaml`` as the benchmarks build it: sizes as command-line flags."""

from __future__ import annotations

import argparse


def add_mos_arguments(parser: argparse.ArgumentParser) -> None:
    """Sizes of the model; the defaults are the configs'."""
    parser.add_argument("--emb", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--last-hidden", type=int, default=32)
    parser.add_argument("--experts", type=int, default=2)


def mos_settings(args: argparse.Namespace) -> dict[str, int]:
    """The model settings ``MODELS.build("awd-lstm-mos", ...)`` takes."""
    return {"emb": args.emb, "hidden": args.hidden, "last_hidden": args.last_hidden, "n_experts": args.experts}
