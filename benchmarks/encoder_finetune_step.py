"""Seconds per CoLA fine-tuning step of an encoder with the task loss alone, + MLM and + MLM + IMM,
and where the IMM step's time goes.

    OMP_NUM_THREADS=1 python benchmarks/encoder_finetune_step.py --init-from PRETRAINED_RUN --steps 10 --json

Each variant builds what ``infolm train configs/cola/finetune-{base,mlm,imm}.yaml run.init_from=RUN``
builds (same data, tokenizer, model, objective) and times ``Trainer.train_step`` on the same first
``--steps`` batches after one untimed step. For IMM it also times the parts of the objective's forward
(the Kneser-Ney target, the sampling of extended contexts, the future-masked rows, the encoder passes
over them) and counts the positions the encoder reads: the task batch's rows x width against the IMM
rows x width.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import torch

from infolm.build import build_model, build_objective, build_task, init_objective_state, init_weights, task_data
from infolm.config import load_config
from infolm.data.subwords import PAD_ID
from infolm.objectives import imm_mlm
from infolm.training import Trainer, seed_everything

VARIANTS = ("base", "mlm", "imm")


class Clock:
    """Wall seconds spent inside named functions (wrapped for the duration of a measurement)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def wrap(self, owner: Any, attribute: str, name: str) -> Iterator[None]:
        original = getattr(owner, attribute)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start

        setattr(owner, attribute, timed)
        try:
            yield
        finally:
            setattr(owner, attribute, original)


def build(variant: str, args: argparse.Namespace, run_dir: str) -> tuple[Trainer, Any]:
    overrides = [f"run.init_from={args.init_from}", f"run.dir={run_dir}", "train.progress=false", *args.overrides]
    config = load_config(f"configs/cola/finetune-{variant}.yaml", overrides)
    corpus = task_data(config)
    seed_everything(config.run.seed)
    model = build_model(config, len(corpus.vocab))
    init_weights(model, args.init_from, corpus)
    objective = build_objective(config)
    objective.setup(corpus, model)
    init_objective_state(objective, args.init_from)
    task = build_task(config, corpus)
    return Trainer(config, model, objective, task), objective


def measure(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as run_dir:
        trainer, objective = build(variant, args, run_dir)
        batches = trainer.task.train_batches()
        seed_everything(0)
        batch_list = [batches.next_batch() for _ in range(args.steps + 1)]
        trainer.train_step(batch_list[0])  # untimed: first-call allocations
        clock = Clock()
        widths = {"task_rows": 0.0, "task_positions": 0.0, "imm_rows": 0.0, "imm_positions": 0.0}
        imm_term = objective.term("imm-mlm") if variant == "imm" else None
        original_future = imm_mlm.future_masked

        def counted_future(*a: Any, **k: Any) -> torch.Tensor:
            rows = original_future(*a, **k)
            widths["imm_rows"] += rows.size(0)
            # the term cuts the rows after the chunk's longest sentence (one chunk when sample_chunk >= k)
            widths["imm_positions"] += rows.size(0) * int((rows != PAD_ID).sum(1).max())
            return rows

        with contextlib.ExitStack() as stack:
            if imm_term is not None:
                imm_mlm.future_masked = counted_future  # type: ignore[assignment]
                stack.callback(lambda: setattr(imm_mlm, "future_masked", original_future))
                stack.enter_context(clock.wrap(imm_term, "forward", "imm forward (all of it)"))
                stack.enter_context(clock.wrap(imm_term.restricted, "next_token_distribution", "imm KN target"))
                stack.enter_context(clock.wrap(imm_term.index, "sample", "imm sampling contexts"))
                stack.enter_context(clock.wrap(imm_mlm, "future_masked", "imm future-masked rows"))
            start = time.perf_counter()
            for batch in batch_list[1:]:
                widths["task_rows"] += batch.inputs.size(0)
                widths["task_positions"] += batch.inputs.numel()
                trainer.train_step(batch)
            total = time.perf_counter() - start
        trainer.metrics.close()
    result: dict[str, Any] = {"variant": variant, "s_per_step": total / args.steps}
    result.update({k: v / args.steps for k, v in widths.items() if v})
    result.update({f"s_per_step: {k}": v / args.steps for k, v in clock.seconds.items()})
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init-from", required=True, help="a pretraining run (configs/ptb/bert-*.yaml)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--json", action="store_true", help="print one JSON object per variant")
    parser.add_argument("overrides", nargs="*", help="dotted overrides for every variant")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for variant in args.variants:
        result = measure(variant, args)
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            print(", ".join(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
