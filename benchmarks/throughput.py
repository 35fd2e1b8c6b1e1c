"""Training and evaluation throughput of infolm's trainer against a plain PyTorch loop.

    python benchmarks/throughput.py --model lstm --hidden 200 --layers 2 --batch 20 --bptt 35 --steps 200 --json

Prints ``train_tokens_per_s`` (infolm's ``Trainer.train_step`` on PTB windows),
``plain_train_tokens_per_s`` (embedding, nn.LSTM, linear, cross-entropy, SGD written out by hand,
same sizes, same run), ``vs_plain_loop``, ``eval_tokens_per_s``, ``gemm_gflops`` (fp32 matmul rate
measured here) and ``mfu`` (model FLOPs per second of infolm's training over that rate). With
``--precision bf16`` it also trains a bf16 copy for the same steps and reports the speed-up and the
validation perplexity of both.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from process_flags import add_process_flags, apply_process_flags
from report import print_result  # benchmarks/report.py, beside this script
from torch import nn

from infolm.build import build_model, build_objective, build_task
from infolm.config import load_config
from infolm.data import load_corpus
from infolm.data.batching import StreamBatcher
from infolm.evaluation.perplexity import stream_nll
from infolm.training import Trainer


def gemm_gflops(n: int = 1024, dtype: torch.dtype = torch.float32, seconds: float = 1.0) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
    return 2 * n**3 * count / (time.perf_counter() - start) / 1e9


def model_flops_per_token(model: nn.Module) -> float:
    """6 x (weights used in matmuls per token): forward 2, backward 4 (LSTM gates + softmax)."""
    matmul = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and "embedding" not in name)
    decoder = getattr(model, "decoder", None)
    if decoder is not None and decoder.weight is getattr(model, "embedding", nn.Embedding(1, 1)).weight:
        matmul += decoder.weight.numel()  # tied: the softmax GEMM uses the embedding matrix
    return 6.0 * matmul


class PlainLSTM(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden)
        self.lstm = nn.LSTM(hidden, hidden, layers, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
        out, state = self.lstm(self.embedding(x), state)
        return self.decoder(out), state


def plain_stepper(vocab_size: int, args: argparse.Namespace) -> Callable[[Any], None]:
    """One step of the plain loop: embedding, nn.LSTM, linear, cross-entropy, clip 0.25, SGD lr 20."""
    model = PlainLSTM(vocab_size, args.hidden, args.layers)
    opt = torch.optim.SGD(model.parameters(), lr=20.0)
    zeros = torch.zeros(args.layers, args.batch, args.hidden)
    state = (zeros, zeros)

    def step(window: Any) -> None:
        nonlocal state
        state = (state[0].detach(), state[1].detach())
        logits, state = model(window.inputs, state)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), window.targets.reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()

    return step


def plain_loop(corpus, args: argparse.Namespace) -> float:
    torch.manual_seed(0)
    step = plain_stepper(len(corpus.vocab), args)
    batcher = StreamBatcher(corpus.stream("train"), args.batch, args.bptt)
    tokens, start = 0, 0.0
    for index in range(args.steps + args.warmup):
        if index == args.warmup:
            tokens, start = 0, time.perf_counter()
        window = batcher.next_window()
        assert window is not None
        step(window)
        tokens += window.inputs.numel()
    return tokens / (time.perf_counter() - start)


def infolm_run(corpus, args: argparse.Namespace, precision: str) -> tuple[float, float, float, Trainer]:
    overrides = [
        f"model.name={args.model}",
        f"data.batch_size={args.batch}",
        f"data.bptt={args.bptt}",
        f"train.precision={precision}",
        "run.device=cpu",
        f"run.keep_freed_memory={args.keep_freed_memory}",
    ]
    if args.model == "lstm":
        overrides += [
            f"model.emb={args.hidden}",
            f"model.hidden={args.hidden}",
            f"model.layers={args.layers}",
            "model.tie_weights=false",
        ]
    else:
        overrides += [f"model.dim={args.hidden}", f"model.layers={args.layers}", f"model.max_len={max(args.bptt, 64)}"]
    with tempfile.TemporaryDirectory() as run_dir:
        config = load_config(None, [*overrides, f"run.dir={run_dir}"])
        torch.manual_seed(0)
        model = build_model(config, len(corpus.vocab))
        trainer = Trainer(config, model, build_objective(config), build_task(config, corpus))
        tokens, start = 0, 0.0
        for step in range(args.steps + args.warmup):
            if step == args.warmup:
                tokens, start = 0, time.perf_counter()
            batch = trainer.batches.next_batch()
            assert batch is not None
            trainer.train_step(batch)
            tokens += batch.num_tokens()
        train_rate = tokens / (time.perf_counter() - start)
        valid = corpus.stream("valid")[: args.eval_tokens]
        start = time.perf_counter()
        with trainer.autocast():
            nll, count = stream_nll(model, valid, corpus.vocab.eos_id, 10, args.bptt)
        eval_rate = count / (time.perf_counter() - start)
        return train_rate, eval_rate, float(torch.tensor(nll / count).exp()), trainer


def interleaved_ratio(corpus, args: argparse.Namespace) -> tuple[float, float]:
    """infolm steps per second over plain-loop steps per second, alternating blocks of 10 steps in one
    process (in A B B A order) so that both see the same machine load: the ratio of the summed times
    and the median of the per-pair ratios (robust to load that changes between pairs)."""
    with tempfile.TemporaryDirectory() as run_dir:
        overrides = ["model.name=lstm", f"model.emb={args.hidden}", f"model.hidden={args.hidden}"]
        overrides += [f"model.layers={args.layers}", "model.tie_weights=false", f"data.batch_size={args.batch}"]
        overrides += [f"data.bptt={args.bptt}", f"run.dir={run_dir}", "run.device=cpu"]
        config = load_config(None, [*overrides, f"run.keep_freed_memory={args.keep_freed_memory}"])
        torch.manual_seed(0)
        model = build_model(config, len(corpus.vocab))
        trainer = Trainer(config, model, build_objective(config), build_task(config, corpus))
        plain_step = plain_stepper(len(corpus.vocab), args)

        times: dict[str, list[float]] = {"infolm": [], "plain": []}
        loops = [("infolm", trainer.train_step), ("plain", plain_step)]
        for block in range(args.interleave + 1):
            for name, step in loops if block % 2 else loops[::-1]:  # A B B A ...: neither loop always goes first
                start = time.perf_counter()
                for _ in range(10):
                    batch = trainer.batches.next_batch() or trainer.batches.next_batch()
                    step(batch)
                if block:  # the first block warms up
                    times[name].append(time.perf_counter() - start)
        paired = [plain / ours for plain, ours in zip(times["plain"], times["infolm"], strict=True)]
        return sum(times["plain"]) / sum(times["infolm"]), statistics.median(paired)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="lstm", choices=("lstm", "transformer"))
    parser.add_argument("--hidden", type=int, default=200)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--eval-tokens", type=int, default=20000)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--interleave", type=int, default=0, help="also alternate N blocks of 10 steps of each")
    add_process_flags(parser)
    args = parser.parse_args()
    apply_process_flags(args)  # before the plain loop too: both loops run with the same allocator
    corpus = load_corpus(load_config(None).data)
    plain = plain_loop(corpus, args) if args.model == "lstm" else None
    train_rate, eval_rate, ppl, trainer = infolm_run(corpus, args, "fp32")
    gflops = gemm_gflops()
    result: dict[str, float | int | str | None] = {
        "model": args.model,
        "steps": args.steps,
        "threads": torch.get_num_threads(),
        "keep_freed_memory": args.keep_freed_memory,
        "train_tokens_per_s": train_rate,
        "plain_train_tokens_per_s": plain,
        "vs_plain_loop": train_rate / plain if plain else None,
        "eval_tokens_per_s": eval_rate,
        "gemm_gflops": gflops,
        "mfu": model_flops_per_token(trainer.model) * train_rate / (gflops * 1e9),
        "valid_ppl_fp32": ppl,
    }
    if args.interleave and args.model == "lstm":
        total, median = interleaved_ratio(corpus, args)
        result["interleaved_vs_plain_loop"] = total
        result["interleaved_vs_plain_loop_median_pair"] = median
    if args.precision == "bf16":
        bf16_rate, bf16_eval, bf16_ppl, _ = infolm_run(corpus, args, "bf16")
        result.update(
            {
                "bf16_train_tokens_per_s": bf16_rate,
                "bf16_eval_tokens_per_s": bf16_eval,
                "bf16_speedup": bf16_rate / train_rate,
                "valid_ppl_bf16": bf16_ppl,
                "gemm_gflops_bf16": gemm_gflops(dtype=torch.bfloat16),
            }
        )
    print_result(result, args.json)


if __name__ == "__main__":
    main()
