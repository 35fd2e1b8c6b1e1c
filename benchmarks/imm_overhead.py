"""IMM overhead: mean training-step time with IMM (k=10 every j=5-th step, else 1) over plain MLE.

Same LSTM, same PTB batches, same step (forward, backward, per-group clipping as in App. D.2, SGD).
MLE and IMM steps alternate in blocks of j so that both see the same machine load.

    python benchmarks/imm_overhead.py --json                 # the default: replay at every position
    python benchmarks/imm_overhead.py --json --positions 16  # replay, 16 positions drawn per batch
    python benchmarks/imm_overhead.py --json --realization state-bank --positions 32
    python benchmarks/imm_overhead.py --json --realization in-batch        # the batch's own positions as samples
    python benchmarks/imm_overhead.py --realizations         # cost and quality of each against MLE

The JSON names the realization and the positions it ran (``positions_per_batch`` 0: every position,
Eq. 10). ``--realizations`` trains the same small model with MLE and each IMM setting for
``--train-steps`` steps and reports step time, validation perplexity and the induced-bigram
validation perplexity of each (a smoke comparison: convergence needs the full runs).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from infolm.config import DataConfig
from infolm.data import load_corpus
from infolm.data.batching import StreamBatcher, eval_windows
from infolm.models import MODELS
from infolm.models.base import detach_state
from infolm.objectives.base import Batch, Objective, Terms
from infolm.objectives.imm import IMM, REALIZATIONS, IMMConfig


class MLE(Objective):
    """Token-mean cross-entropy (a local stand-in so this script depends only on the IMM term)."""

    def __init__(self) -> None:
        super().__init__()
        self.config = argparse.Namespace(weight=1.0)

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        logits = output.logits
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch.targets.reshape(-1))
        return Terms(losses={"mle": loss}, tokens=batch.targets.numel())


class Run:
    """One model + objective trained step by step like the trainer (main and IMM clipped apart)."""

    def __init__(self, model: nn.Module, terms: dict[str, Objective], corpus: Any, args: argparse.Namespace) -> None:
        self.model, self.terms, self.args = model, terms, args
        for term in terms.values():
            term.setup(corpus, model)
        self.device = next(model.parameters()).device
        self.batcher = StreamBatcher(corpus.stream("train"), args.batch_size, args.bptt)
        self.state = model.init_state(args.batch_size, self.device)  # type: ignore[operator]
        self.steps = 0
        self.seconds = 0.0
        self.cpu_seconds = 0.0  # process CPU time: less sensitive than wall time to other load on a shared CPU
        self.timed_steps = 0

    def step(self, timed: bool = True) -> None:
        window = self.batcher.next_window()
        if window is None:
            window = self.batcher.next_window()
            self.state = self.model.init_state(self.args.batch_size, self.device)  # type: ignore[operator]
        assert window is not None
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        start, cpu_start = time.perf_counter(), time.process_time()
        batch = Batch(window.inputs.to(self.device), window.targets.to(self.device), self.state, step=self.steps)
        output = self.model(batch.inputs, batch.state)
        losses: dict[str, Tensor] = {}
        clips: dict[str, float] = {}
        for term in self.terms.values():
            result = term(self.model, batch, output)
            for key, loss in result.losses.items():
                losses[key] = float(term.config.weight) * loss
            clips.update(result.clip_groups)
        params = [p for p in self.model.parameters() if p.requires_grad]
        total = [torch.zeros_like(p) for p in params]
        groups = [("main", sum(v for k, v in losses.items() if k not in clips), self.args.clip)]
        groups += [(k, losses[k], clips[k]) for k in clips if k in losses]
        for index, (_, loss, clip) in enumerate(groups):  # App. D.2: each group back-propagated and clipped apart
            self.model.zero_grad(set_to_none=True)
            assert isinstance(loss, Tensor)
            loss.backward(retain_graph=index < len(groups) - 1)  # in-batch IMM shares the primary graph
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(params, clip)
            for acc, p in zip(total, params, strict=True):
                if p.grad is not None:
                    acc += p.grad
        with torch.no_grad():
            for acc, p in zip(total, params, strict=True):
                p.sub_(self.args.lr * acc)
        self.state = detach_state(output.state)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        if timed:
            self.seconds += time.perf_counter() - start
            self.cpu_seconds += time.process_time() - cpu_start
            self.timed_steps += 1
        self.steps += 1

    def mean_step(self) -> float:
        return self.seconds / max(self.timed_steps, 1)


def valid_ppl(model: nn.Module, corpus: Any, device: torch.device, max_tokens: int) -> float:
    stream = corpus.stream("valid")[:max_tokens]
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        state = model.init_state(10, device)  # type: ignore[operator]
        for inputs, targets in eval_windows(stream, corpus.vocab.eos_id, 10, 35):
            output = model(inputs.to(device), state)
            state = output.state
            logits = output.logits.reshape(-1, output.logits.size(-1))
            total += float(F.cross_entropy(logits, targets.to(device).reshape(-1), reduction="sum", ignore_index=-100))
            count += int((targets != -100).sum())
    model.train()
    return math.exp(total / count)


def build(args: argparse.Namespace, vocab_size: int, device: torch.device) -> nn.Module:
    settings = {"emb": args.hidden, "hidden": args.hidden, "layers": args.layers, "dropout": args.dropout}
    model = MODELS.build("lstm", settings, vocab_size=vocab_size)
    return model.to(device)


def imm_terms(args: argparse.Namespace, realization: str, positions: int | None = None) -> dict[str, Objective]:
    config = IMMConfig(
        k=args.k,
        j=args.j,
        realization=realization,
        positions_per_batch=args.positions if positions is None else positions,
        sample_chunk=args.sample_chunk,
    )
    return {"mle": MLE(), "imm": IMM(config)}


def overhead(args: argparse.Namespace, corpus: Any, device: torch.device) -> dict[str, Any]:
    torch.manual_seed(args.seed)
    base = build(args, len(corpus.vocab), device)
    plain = Run(base, {"mle": MLE()}, corpus, args)
    with_imm = Run(copy.deepcopy(base), imm_terms(args, args.realization), corpus, args)
    for _ in range(args.warmup):  # fills the state bank; first calls allocate
        plain.step(timed=False)
        with_imm.step(timed=False)
    with_imm.steps = 0  # timed blocks start on a k-sample step
    cycle_ratios = []  # per block of j steps: robust to load changes on a shared machine
    for _ in range(args.steps // args.j):
        before = (plain.seconds, with_imm.seconds)
        for run in (plain, with_imm):
            for _ in range(args.j):
                run.step()
        cycle_ratios.append((with_imm.seconds - before[1]) / (plain.seconds - before[0]))
    return {
        "step_time_ratio": with_imm.mean_step() / plain.mean_step(),
        "median_cycle_ratio": statistics.median(cycle_ratios),
        "cpu_time_ratio": with_imm.cpu_seconds / plain.cpu_seconds,
        "mle_step_s": plain.mean_step(),
        "imm_step_s": with_imm.mean_step(),
        "realization": args.realization,
        "k": args.k,
        "j": args.j,
        "positions_per_batch": args.positions,
        "sample_chunk": args.sample_chunk,
        "model": f"lstm {args.layers}x{args.hidden}",
        "batch": f"{args.batch_size}x{args.bptt}",
        "device": str(device),
        "timed_steps": plain.timed_steps,
    }


def realizations(args: argparse.Namespace, corpus: Any, device: torch.device) -> dict[str, Any]:
    from infolm.evaluation.induced import induced_ngram_report

    out: dict[str, Any] = {}
    small = args.replay_positions
    runs = [("mle", None, None), ("replay-every-position", "replay", 0), (f"replay-P{small}", "replay", small)]
    runs += [("state-bank-P32", "state-bank", 32), ("in-batch-every-position", "in-batch", 0)]
    for name, realization, positions in runs:
        torch.manual_seed(args.seed)
        model = build(args, len(corpus.vocab), device)
        terms = {"mle": MLE()} if realization is None else imm_terms(args, realization, positions)
        run = Run(model, terms, corpus, args)
        for _ in range(args.train_steps):
            run.step()
        report = induced_ngram_report(model, corpus, 2, splits=("valid",), max_train_tokens=args.induced_tokens)
        out[name] = {
            "step_s": run.mean_step(),
            "valid_ppl": valid_ppl(model, corpus, device, args.valid_tokens),
            "induced_valid_ppl": report["valid"]["induced_ppl"],
            "kn_valid_ppl": report["valid"]["kn_ppl"],
        }
        print(name, json.dumps(out[name]), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--realizations", action="store_true", help="compare the realizations (cost, quality)")
    parser.add_argument("--realization", default=IMMConfig.realization, choices=REALIZATIONS)
    parser.add_argument("--hidden", type=int, default=200)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--lr", type=float, default=20.0)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--j", type=int, default=5)
    parser.add_argument("--positions", type=int, default=IMMConfig.positions_per_batch, help="0: every position")
    parser.add_argument("--replay-positions", type=int, default=16, help="--realizations: P of the sampled replay run")
    parser.add_argument("--sample-chunk", type=int, default=IMMConfig.sample_chunk)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per run (multiple of j)")
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--train-steps", type=int, default=400, help="--realizations: steps per run")
    parser.add_argument("--train-tokens", type=int, default=None, help="use a prefix of PTB train")
    parser.add_argument("--valid-tokens", type=int, default=20000)
    parser.add_argument("--induced-tokens", type=int, default=200000, help="training positions for the induced bigram")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    device = torch.device(args.device)
    corpus = load_corpus(DataConfig(name="ptb", max_train_tokens=args.train_tokens))
    result = realizations(args, corpus, device) if args.realizations else overhead(args, corpus, device)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
