"""Resident memory and time of sampling from an AWD-LSTM-MoS: infolm's sampler against a plain loop.

    python benchmarks/sampling_memory.py --json
    python benchmarks/sampling_memory.py --steps 400 --calls 3 --rows 64 --json

Each variant runs in a fresh process (one thread, so that neither inherits the other's heap): the
model of ``configs/ptb/bmi-*.yaml`` (random weights, 10,000 words) samples ``--calls`` times ``--rows``
texts of ``--steps`` tokens each, and the process reports its resident size after each call and the
seconds per call. ``infolm`` is ``infolm.evaluation.generation.sample`` (one output buffer); ``plain``
is the usual hand-written loop (each step's B x 1 tokens kept in a list, concatenated at the end),
which is how the sampler worked before. Both draw the same tokens from the same generator (checked).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from mos import add_mos_arguments, mos_settings  # benchmarks/mos.py, beside this script
from report import print_result  # benchmarks/report.py, beside this script

from infolm.evaluation.generation import sample
from infolm.models import MODELS
from infolm.models.base import LanguageModel, detach_state

VOCAB = 10_000


def resident_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])  # Linux: resident pages
    return pages * 4096 / 2**20


@torch.no_grad()
def plain_sample(model: LanguageModel, prompt: torch.Tensor, steps: int, generator: torch.Generator) -> torch.Tensor:
    model.eval()
    output = model(prompt, model.init_state(prompt.size(0), prompt.device))
    out = []
    for _ in range(steps):
        token = torch.multinomial(output.logits[:, -1].float().softmax(-1), 1, generator=generator)
        out.append(token)
        output = model(token, detach_state(output.state))
    return torch.cat(out, 1)


def build(args: argparse.Namespace) -> LanguageModel:
    torch.manual_seed(0)
    settings = mos_settings(args)
    model = MODELS.build("awd-lstm-mos", settings, vocab_size=VOCAB)
    assert isinstance(model, LanguageModel)
    return model


def child(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    model = build(args)
    prompt = torch.zeros(args.rows, 1, dtype=torch.long)
    generator = torch.Generator().manual_seed(0)
    draw = {
        "infolm": lambda: sample(model, prompt, args.steps, generator=generator),
        "plain": lambda: plain_sample(model, prompt, args.steps, generator),
    }[args.child]
    start = resident_mb()
    resident, seconds = [], []
    for _ in range(args.calls):
        tick = time.perf_counter()
        draw()
        seconds.append(time.perf_counter() - tick)
        resident.append(round(resident_mb(), 1))
    print(json.dumps({"start_mb": round(start, 1), "resident_mb": resident, "seconds": seconds}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_mos_arguments(parser)
    parser.add_argument("--rows", type=int, default=64, help="texts sampled side by side (the BMI driver's 64)")
    parser.add_argument("--steps", type=int, default=400, help="tokens per text and call")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--child", choices=["infolm", "plain"], help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    model, prompt = build(args), torch.zeros(2, 1, dtype=torch.long)
    same = torch.equal(
        sample(model, prompt, 20, generator=torch.Generator().manual_seed(1)),
        plain_sample(model, prompt, 20, torch.Generator().manual_seed(1)),
    )
    if not same:
        raise SystemExit("the two samplers draw different tokens")
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("child", "json")]
    runs: dict[str, Any] = {}
    for name in ("plain", "infolm", "plain", "infolm"):  # A B A B: drift shows as a gap between repeats
        done = subprocess.run(
            [sys.executable, __file__, f"--child={name}", *flags], capture_output=True, text=True, check=True
        )
        runs.setdefault(name, []).append(json.loads(done.stdout))
    growth = {k: [r["resident_mb"][-1] - r["start_mb"] for r in v] for k, v in runs.items()}
    per_call = {k: statistics.median(s for r in v for s in r["seconds"]) for k, v in runs.items()}
    print_result(
        {
            "rows": args.rows,
            "steps_per_call": args.steps,
            "calls": args.calls,
            "resident_mb_plain": [r["resident_mb"] for r in runs["plain"]],
            "resident_mb_infolm": [r["resident_mb"] for r in runs["infolm"]],
            "growth_mb_plain": growth["plain"],
            "growth_mb_infolm": growth["infolm"],
            "seconds_per_call_plain": round(per_call["plain"], 2),
            "seconds_per_call_infolm": round(per_call["infolm"], 2),
            "infolm_vs_plain_time": round(per_call["infolm"] / per_call["plain"], 3),
        },
        args.json,
    )


if __name__ == "__main__":
    main()
