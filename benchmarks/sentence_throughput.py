"""Training throughput of infolm's trainer on ``sentence-lm`` against a plain PyTorch loop of the
same model on the same padded, length-bucketed batches.

    python benchmarks/sentence_throughput.py --hidden 128 --batch 32 --blocks 20 --json

Both loops train an embedding -> one-layer nn.LSTM -> linear softmax from a zero initial state with
cross-entropy over real (non-padding) targets, gradient clipping and Adam. The plain loop is written
out by hand; infolm's is ``Trainer.train_step`` on the task's batches (configs/ptb/sentence-lstm.yaml
sizes, dropout off). They alternate blocks of 10 steps (A B B A ...) in one process so both see the
same machine load. Prints real tokens per second of each, the ratio (summed times and the median of
the per-block-pair ratios) and the share of padded positions, bucketed and not.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

import torch
import torch.nn.functional as F
from process_flags import add_process_flags, apply_process_flags
from report import print_result  # benchmarks/report.py, beside this script
from torch import nn

from infolm.build import build_task, build_trainer
from infolm.config import load_config
from infolm.data.batching import IGNORE_INDEX


class PlainSentenceLSTM(nn.Module):
    def __init__(self, vocab: int, emb: int, hidden: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(x))  # zero initial state
        return self.decoder(out)


def plain_stepper(vocab_size: int, args: argparse.Namespace) -> Any:
    """One step of the plain loop: forward, masked cross-entropy, backward, clip, Adam."""
    model = PlainSentenceLSTM(vocab_size, args.hidden, args.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.0, 0.999))

    def step(batch: Any) -> None:
        logits = model(batch.inputs)
        loss = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), batch.targets.reshape(-1), ignore_index=IGNORE_INDEX
        )
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()

    return step


def padding_share(task: Any, steps: int) -> float:
    batches = task.train_batches()
    real = total = 0
    for _ in range(steps):
        batch = batches.next_batch() or batches.next_batch()
        real += batch.num_tokens()
        total += batch.inputs.numel()
    return 1 - real / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--blocks", type=int, default=20, help="pairs of 10-step blocks")
    add_process_flags(parser)
    args = parser.parse_args()
    apply_process_flags(args)
    with tempfile.TemporaryDirectory() as run_dir:
        overrides = [
            "model.dropout=0",
            "model.dropout_input=0",
            f"model.emb={args.hidden}",
            f"model.hidden={args.hidden}",
            f"data.batch_size={args.batch}",
            f"run.dir={run_dir}",
            "run.device=cpu",
            f"run.keep_freed_memory={args.keep_freed_memory}",
        ]
        config = load_config("configs/ptb/sentence-lstm.yaml", overrides)  # run.seed 0
        trainer, corpus = build_trainer(config)
        plain_step = plain_stepper(len(corpus.vocab), args)
        feed = build_task(config, corpus).train_batches()  # the same batches, drawn once for both loops

        times: dict[str, list[float]] = {"infolm": [], "plain": []}
        tokens: dict[str, int] = {"infolm": 0, "plain": 0}
        loops = [("infolm", trainer.train_step), ("plain", plain_step)]
        for block in range(2 * args.blocks + 1):
            batches = [feed.next_batch() or feed.next_batch() for _ in range(10)]
            for name, step in loops if block % 2 else loops[::-1]:  # A B B A ...
                start = time.perf_counter()
                for batch in batches:
                    step(batch)
                if block:  # the first block warms up
                    times[name].append(time.perf_counter() - start)
                    tokens[name] += sum(b.num_tokens() for b in batches)
        pairs = [p / o for p, o in zip(times["plain"], times["infolm"], strict=True)]
        unbucketed = build_task(
            load_config("configs/ptb/sentence-lstm.yaml", [*overrides, "task.bucket_batches=1"]), corpus
        )
        result = {
            "hidden": args.hidden,
            "batch": args.batch,
            "steps_each": 10 * 2 * args.blocks,
            "threads": torch.get_num_threads(),
            "train_tokens_per_s": tokens["infolm"] / sum(times["infolm"]),
            "plain_train_tokens_per_s": tokens["plain"] / sum(times["plain"]),
            "vs_plain_loop": sum(times["plain"]) / sum(times["infolm"]),
            "vs_plain_loop_median_pair": statistics.median(pairs),
            "padded_share": padding_share(build_task(config, corpus), 200),
            "padded_share_unbucketed": padding_share(unbucketed, 200),
        }
    print_result(result, args.json)


if __name__ == "__main__":
    main()
