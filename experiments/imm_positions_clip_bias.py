"""How far a cheaper IMM setting, clipped as the paper clips, stands from the every-position default.

IMM's default sums Eq. 15 over every position of the batch (Eq. 10) with fresh replayed samples;
``objective.imm.positions_per_batch=P`` draws P of them, which has the same expected gradient before
the clip. The paper clips ∇IMM apart from the main gradient before λ weights it (App. D.2, Alg. 1 line
9), and a clip is not linear: the mean of clipped draws is not the clipped mean. This script measures,
on a trained model's batches and with the IMM term alone, the step that SGD averages over steps (the
expectation over the samples and drawn positions) of the default and of a compared setting (``--arm``:
IMM config overrides; by default 8 drawn positions):

* per batch, ``--draws-default`` gradients of the default and ``--draws-arm`` of the compared setting,
  each also clipped at the default's ``objective.imm.clip`` (the arm's own clip, if it sets one);
* the norm of the arm's mean step against the default's, and the cosine between them, unclipped and
  clipped; the cosine between two halves of the draws says how much of a gap is noise, and the
  ``_denoised`` values remove it (the two halves' means are independent estimates of the same
  expectation, so their dot product estimates its squared norm without the noise's share).

The recurrent state before each batch is carried as the trainer carries it (the in-batch realization
reads the primary pass). The model is a run directory with best weights, e.g. a baseline of the IMM
Table 2 protocol (its record keeps no weights: ``experiments/imm_ptb_table2_converged.py train --seeds 0
--arms none --retrain-baselines`` trains it again)::

    OMP_NUM_THREADS=1 python experiments/imm_positions_clip_bias.py \\
        runs/imm-ptb-table2-converged/baseline-s0 --arm positions_per_batch=8 --json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import time
from typing import Any

import torch
from torch import Tensor

CONTINUE = "configs/ptb/imm-table2-cpu-continue.yaml"


def clipped(gradient: Tensor, clip: float) -> Tensor:
    """The trainer's norm clip of one group's gradient (torch.nn.utils.clip_grad_norm_'s rule); 0: none."""
    return gradient if clip <= 0 else gradient * min(1.0, clip / (float(gradient.norm()) + 1e-6))


def cosine(a: Tensor, b: Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


class Draws:
    """Running sums of gradient draws, unclipped and clipped, by half (even and odd draws): O(D) memory."""

    def __init__(self, clip: float) -> None:
        self.clip = clip
        self.sums: dict[tuple[str, int], Tensor] = {}
        self.norms: list[float] = []

    def add(self, gradient: Tensor) -> None:
        half = len(self.norms) % 2
        self.norms.append(float(gradient.norm()))
        for kind, step in (("unclipped", gradient), ("clipped", clipped(gradient, self.clip))):
            key = (kind, half)
            self.sums[key] = step.clone() if key not in self.sums else self.sums[key].add_(step)

    def means(self, kind: str) -> tuple[Tensor, Tensor, Tensor]:
        """The mean step of every draw and those of the two halves."""
        first, second = self.sums[(kind, 0)], self.sums[(kind, 1)]
        count = len(self.norms)  # draws alternate between the halves: the first has the odd one out
        return (first + second) / count, first / ((count + 1) // 2), second / (count // 2)


def compare(default: Draws, arm: Draws) -> dict[str, float]:
    row: dict[str, float] = {}
    for name, draws in (("default", default), ("arm", arm)):
        norms = torch.tensor(draws.norms)
        row[f"median_norm_{name}"] = float(norms.median())
        row[f"clipped_share_{name}"] = float((norms > draws.clip).float().mean()) if draws.clip > 0 else 0.0
    for kind in ("unclipped", "clipped"):
        (mean_default, *halves_default), (mean_arm, *halves_arm) = default.means(kind), arm.means(kind)
        row[f"{kind}_norm_default"] = float(mean_default.norm())
        row[f"{kind}_norm_ratio"] = float(mean_arm.norm() / mean_default.norm())
        row[f"{kind}_cosine"] = cosine(mean_default, mean_arm)
        row[f"{kind}_halves_cosine_default"] = cosine(*halves_default)
        row[f"{kind}_halves_cosine_arm"] = cosine(*halves_arm)
        # E[h1 · h2] = ‖μ‖² for independent halves, and E[mean_default · mean_arm] = μ_default · μ_arm
        square_default = float(halves_default[0] @ halves_default[1])
        square_arm = float(halves_arm[0] @ halves_arm[1])
        positive = square_default > 0 and square_arm > 0
        row[f"{kind}_norm_ratio_denoised"] = math.sqrt(square_arm / square_default) if positive else math.nan
        cross = float(mean_default @ mean_arm)
        row[f"{kind}_cosine_denoised"] = cross / math.sqrt(square_default * square_arm) if positive else math.nan
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a trained run directory (with best weights) of configs/ptb/imm-table2-cpu.yaml")
    parser.add_argument(
        "--arm",
        nargs="+",
        default=["positions_per_batch=8"],
        help="objective.imm overrides of the compared setting (KEY=VALUE, e.g. realization=in-batch clip=0)",
    )
    parser.add_argument("--k", type=int, default=1, help="samples per short context (1: the 1-sample steps, 4 of 5)")
    parser.add_argument("--batches", type=int, default=3, help="training batches measured, spread over the epoch")
    parser.add_argument("--draws-default", type=int, default=32, help="gradient draws of the default per batch")
    parser.add_argument("--draws-arm", type=int, default=1024, help="gradient draws of the compared setting per batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from infolm.build import build_objective, build_trainer, init_weights
    from infolm.config import load_config
    from infolm.data.batch import Batch
    from infolm.errors import InfolmError

    if args.draws_default < 2 or args.draws_arm < 2 or args.batches < 1 or args.k < 1:
        sys.exit("imm_positions_clip_bias: --draws-default and --draws-arm need 2 or more, --batches and --k 1 or more")
    start = time.perf_counter()
    imm = f"{{weight: 0.2, k: {args.k}, j: 5, restricted_order: 2, sample_chunk: {args.k}}}"
    with tempfile.TemporaryDirectory() as scratch:
        try:
            config = load_config(CONTINUE, [f"run.dir={scratch}", f"objective.imm={imm}"])
            trainer, corpus = build_trainer(config)
            arm_objective = build_objective(
                load_config(
                    CONTINUE,
                    [f"run.dir={scratch}", f"objective.imm={imm}", *(f"objective.imm.{item}" for item in args.arm)],
                )
            )
            arm_objective.setup(corpus, trainer.model)
            init_weights(trainer.model, args.run, corpus)
        except InfolmError as failure:
            sys.exit(f"imm_positions_clip_bias: {failure}")
    terms = {"default": trainer.objective.term("imm"), "arm": arm_objective.term("imm")}
    model = trainer.model
    params = [p for p in model.parameters() if p.requires_grad]
    step = 0 if args.k > 1 else 1  # batch.step % j == 0 selects k samples, any other step 1

    def draw(term: Any, batch: Batch) -> Tensor:  # one gradient of the IMM term alone (λ not applied), flattened
        output = model(batch.inputs, batch.state)
        loss = term(model, batch, output).losses["imm"]
        return torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)])

    torch.manual_seed(args.seed)
    model.train()
    per_epoch = len(corpus.stream("train")) // (config.data.batch_size * config.data.bptt)
    spacing = max(1, per_epoch // args.batches)
    rows = []
    state: Any = None
    previous: Any = None
    for index in range(args.batches):
        for _ in range(spacing):  # the state carried into the measured batch, as the trainer carries it
            batch = trainer.batches.next_batch()
            assert batch is not None
            with torch.no_grad():
                previous, state = state, model(batch.inputs, state).state
        batch = dataclasses.replace(batch, step=step, state=previous)
        default, arm = Draws(float(terms["default"].config.clip)), Draws(float(terms["arm"].config.clip))
        for _ in range(args.draws_default):
            default.add(draw(terms["default"], batch))
        for _ in range(args.draws_arm):
            arm.add(draw(terms["arm"], batch))
        row = {"batch": float(index), **compare(default, arm)}
        rows.append(row)
        if not args.json:
            print(json.dumps({key: round(value, 4) for key, value in row.items()}), flush=True)
    report = {
        "run": args.run,
        "arm": args.arm,
        "k": args.k,
        "draws_default": args.draws_default,
        "draws_arm": args.draws_arm,
        "rows": rows,
        "wall_s": round(time.perf_counter() - start, 1),
    }
    print(json.dumps(report, indent=1) if args.json else f"wall {report['wall_s']} s")


if __name__ == "__main__":
    main()
