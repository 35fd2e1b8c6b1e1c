"""``infolm pilot RUN --arm NAME:OVERRIDES ... --steps N --out DIR``: paired pilots of regularizer arms
from one checkpoint (``infolm/pilot.py``); a table of arm − control on valid, or JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_pilot_parser(subparsers: Any) -> None:
    from infolm.pilot import OPTIMIZER_STATES, STARTS

    p = subparsers.add_parser(
        "pilot", help="continue a run once per arm on common random numbers; arm - control on valid"
    )
    p.add_argument("run_dir", help="a run directory written by infolm train")
    p.add_argument(
        "--arm",
        action="append",
        default=[],
        metavar="NAME:OVERRIDES",
        help="an arm: a name and dotted overrides of the run's config, space-separated in one quoted argument, "
        "e.g. 'imm:objective.imm.weight=0.2' ('mle:' is the run's own config); once per arm",
    )
    p.add_argument(
        "--arms", default=None, metavar="YAML", help="arms from a file (arms: {NAME: [overrides]}, control: NAME)"
    )
    p.add_argument(
        "--only",
        default=None,
        metavar="NAMES",
        help="run only these arms (comma-separated) and the control: one arms file split over processes",
    )
    p.add_argument("--control", default=None, help="the arm the others are compared with (default: the first arm)")
    p.add_argument("--steps", type=int, required=True, help="optimizer steps of every arm")
    p.add_argument(
        "--eval-every",
        type=int,
        default=0,
        metavar="K",
        help="evaluate on valid at every step that is a multiple of K, and at the last (default: steps / 10)",
    )
    p.add_argument(
        "--from",
        dest="start",
        choices=STARTS,
        default="last",
        help="continue the latest step checkpoint (last) or best/ (best)",
    )
    p.add_argument(
        "--optimizer",
        choices=OPTIMIZER_STATES,
        default="checkpoint",
        help="start every arm from the checkpoint's optimizer state (under the arm's optim settings) or fresh",
    )
    p.add_argument("--seed", type=int, default=None, help="the seed every arm starts from (default: run.seed)")
    p.add_argument("--out", required=True, help="output folder: each arm's run directory and NAME.jsonl, pilot.json")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_pilot)


def cmd_pilot(args: argparse.Namespace) -> int:
    from infolm.pilot import PilotSettings, finite, parse_arm, read_arms_file, run_pilot, select_arms, table

    arms, control = read_arms_file(args.arms) if args.arms else ([], None)
    arms += [parse_arm(text) for text in args.arm]
    control = args.control or control
    if args.only is not None:
        arms = select_arms(arms, control, [name.strip() for name in args.only.split(",") if name.strip()])
    eval_every = args.eval_every or max(1, args.steps // 10)
    settings = PilotSettings(args.steps, eval_every, Path(args.out), args.start, args.optimizer, args.seed)
    result = run_pilot(args.run_dir, arms, control, settings)
    print(json.dumps(finite(result), allow_nan=False) if args.json else table(result))
    return 0
