"""How far IMM on a few drawn positions, clipped as the paper clips, stands from the every-position default.

IMM's default sums Eq. 15 over every position of the batch (Eq. 10); ``objective.imm.positions_per_batch=P``
draws P of them, which has the same expected gradient. The paper clips ∇IMM apart from the main gradient
before λ weights it (App. D.2, Alg. 1 line 9), and a clip is not linear: the mean of clipped draws is not
the clipped mean. This script measures by how much, on a trained model's batches, with the IMM term alone:

* per batch, ``--draws-all`` gradients of the default (every position, fresh samples) and ``--draws-drawn``
  of P drawn positions, each clipped at ``objective.imm.clip`` as the trainer clips it;
* the mean step of each (the expectation over the samples and the drawn positions that SGD averages
  over steps), unclipped and clipped: the norm of the drawn one's mean against the default's, and the
  cosine between them; the cosine between two halves of the draws says how much of a gap is noise, and
  the ``_denoised`` values remove it (the two halves' means are independent estimates of the same
  expectation, so their dot product estimates its squared norm without the noise's share).

    OMP_NUM_THREADS=1 python experiments/imm_positions_clip_bias.py \\
        experiments/records/imm-ptb-table2-converged/baseline-s0 --json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import time

import torch
from torch import Tensor

CONTINUE = "configs/ptb/imm-table2-cpu-continue.yaml"


def clipped(gradient: Tensor, clip: float) -> Tensor:
    """The trainer's norm clip of one group's gradient (torch.nn.utils.clip_grad_norm_'s rule)."""
    return gradient * min(1.0, clip / (float(gradient.norm()) + 1e-6))


def cosine(a: Tensor, b: Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


class Draws:
    """Running sums of gradient draws, unclipped and clipped, by half (even and odd draws): O(D) memory."""

    def __init__(self, clip: float) -> None:
        self.clip = clip
        self.sums: dict[tuple[str, int], Tensor] = {}
        self.count = [0, 0]
        self.norms: list[float] = []

    def add(self, gradient: Tensor) -> None:
        half = len(self.norms) % 2
        self.norms.append(float(gradient.norm()))
        for kind, step in (("unclipped", gradient), ("clipped", clipped(gradient, self.clip))):
            key = (kind, half)
            self.sums[key] = step.clone() if key not in self.sums else self.sums[key].add_(step)
        self.count[half] += 1

    def means(self, kind: str) -> tuple[Tensor, Tensor, Tensor]:
        """The mean step of every draw and those of the two halves."""
        first, second = self.sums[(kind, 0)], self.sums[(kind, 1)]
        return (first + second) / sum(self.count), first / self.count[0], second / self.count[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a trained run (or record with weights) of configs/ptb/imm-table2-cpu.yaml")
    parser.add_argument("--positions", type=int, default=8, help="P, the positions drawn per batch")
    parser.add_argument("--k", type=int, default=1, help="samples per short context (1: the 1-sample steps, 4 of 5)")
    parser.add_argument("--batches", type=int, default=4, help="training batches measured, spread over the epoch")
    parser.add_argument("--draws-all", type=int, default=16, help="gradient draws of the default per batch")
    parser.add_argument("--draws-drawn", type=int, default=512, help="gradient draws of P positions per batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from infolm.build import build_trainer, init_weights
    from infolm.config import load_config
    from infolm.data.batch import Batch
    from infolm.errors import InfolmError

    start = time.perf_counter()
    imm = f"{{weight: 0.2, k: {args.k}, j: 5, restricted_order: 2, sample_chunk: {max(args.k, 1)}}}"
    with tempfile.TemporaryDirectory() as scratch:
        config = load_config(CONTINUE, [f"run.dir={scratch}", f"objective.imm={imm}"])
        trainer, corpus = build_trainer(config)
        try:
            init_weights(trainer.model, args.run, corpus)
        except InfolmError as failure:
            sys.exit(f"imm_positions_clip_bias: {failure}")
    model = trainer.model
    term = trainer.objective.term("imm")
    clip = float(term.config.clip)
    params = [p for p in model.parameters() if p.requires_grad]
    step = 0 if args.k > 1 else 1  # batch.step % j == 0 selects k samples, any other step 1

    def draw(batch: Batch) -> Tensor:  # one gradient of the IMM term alone (λ not applied), flattened
        output = model(batch.inputs, batch.state)
        loss = term(model, batch, output).losses["imm"]
        return torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)])

    torch.manual_seed(args.seed)
    model.train()
    spacing = max(1, len(corpus.stream("train")) // (config.data.batch_size * config.data.bptt) // args.batches)
    rows = []
    batch = None
    for index in range(args.batches):
        for _ in range(spacing if index else 1):
            batch = trainer.batches.next_batch()
        assert batch is not None
        batch = dataclasses.replace(batch, step=step)
        every, drawn = Draws(clip), Draws(clip)
        term.config.positions_per_batch = 0
        for _ in range(args.draws_all):
            every.add(draw(batch))
        term.config.positions_per_batch = args.positions
        for _ in range(args.draws_drawn):
            drawn.add(draw(batch))
        row: dict[str, float] = {"batch": index}
        for name, draws in (("every", every), ("drawn", drawn)):
            norms = torch.tensor(draws.norms)
            row[f"median_norm_{name}"] = float(norms.median())
            row[f"clipped_share_{name}"] = float((norms > clip).float().mean())
        for kind in ("unclipped", "clipped"):
            (mean_every, *halves_every), (mean_drawn, *halves_drawn) = every.means(kind), drawn.means(kind)
            row[f"{kind}_norm_every"] = float(mean_every.norm())
            row[f"{kind}_norm_ratio"] = float(mean_drawn.norm() / mean_every.norm())
            row[f"{kind}_cosine"] = cosine(mean_every, mean_drawn)
            row[f"{kind}_halves_cosine_every"] = cosine(*halves_every)
            row[f"{kind}_halves_cosine_drawn"] = cosine(*halves_drawn)
            # without the noise of a finite number of draws: the halves are independent, so
            # E[h1 · h2] = ‖μ‖² and E[mean_every · mean_drawn] = μ_every · μ_drawn
            square_every = float(halves_every[0] @ halves_every[1])
            square_drawn = float(halves_drawn[0] @ halves_drawn[1])
            positive = square_every > 0 and square_drawn > 0
            row[f"{kind}_norm_ratio_denoised"] = math.sqrt(square_drawn / square_every) if positive else math.nan
            denoised = float(mean_every @ mean_drawn) / math.sqrt(square_every * square_drawn) if positive else math.nan
            row[f"{kind}_cosine_denoised"] = denoised
        rows.append(row)
        if not args.json:
            print(json.dumps({key: round(value, 4) for key, value in row.items()}))
    report = {
        "run": args.run,
        "positions": args.positions,
        "k": args.k,
        "clip": clip,
        "draws_all": args.draws_all,
        "draws_drawn": args.draws_drawn,
        "rows": rows,
        "wall_s": round(time.perf_counter() - start, 1),
    }
    print(json.dumps(report, indent=1) if args.json else f"wall {report['wall_s']} s")


if __name__ == "__main__":
    main()
