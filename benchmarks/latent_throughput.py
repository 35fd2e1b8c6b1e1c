"""Training throughput of the SentenceMIM GRU in infolm's trainer against a plain PyTorch loop.

    python benchmarks/latent_throughput.py --emb 64 --hidden 128 --latent 16 --blocks 10 --json

Both loops train the same model on the same PTB sentence batches (20 sentences, length-bucketed)
with the A-MIM loss of Alg. 1 and Adam: infolm's ``Trainer.train_step`` (task ``sentence-latent``,
model ``sentence-gru``, objective ``amim``) and a hand-written loop (embedding, reversed GRU
encoder, mean / log-variance heads, reparameterized z, GRU decoder fed z at every step, linear
softmax, cross-entropy, the two Gaussian log-densities). Blocks of ``--block-steps`` steps
alternate A B B A in one process so both see the same machine load. Prints tokens per second of
each (tokens: the scored positions, words and <eos>) and ``vs_plain_loop`` (the goal is >= 0.95).
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F
from process_flags import add_process_flags, apply_process_flags
from report import print_result  # benchmarks/report.py, beside this script
from torch import Tensor, nn

from infolm.build import build_model, build_objective, build_task
from infolm.config import load_config
from infolm.data import load_corpus
from infolm.data.batching import IGNORE_INDEX
from infolm.training import Trainer


class PlainSMIM(nn.Module):
    """The sentence GRU written out by hand (no infolm code)."""

    def __init__(self, vocab: int, emb: int, hidden: int, latent: int, dropout: float) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.sos = nn.Parameter(torch.randn(emb))
        self.dropout = nn.Dropout(dropout)
        self.encoder = nn.GRU(emb, hidden, batch_first=True)
        self.mean = nn.Linear(hidden, latent)
        self.log_var = nn.Linear(hidden, latent)
        self.to_hidden = nn.Linear(latent, hidden)
        self.decoder = nn.GRU(emb + latent, hidden, batch_first=True)
        self.output = nn.Linear(hidden, vocab)

    def loss(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """A-MIM (Alg. 1): -ln p(x|z) - 1/2 (ln q(z|x) + ln N(z; 0, I)), mean over sentences."""
        b, t = tokens.shape
        words = lengths - 1
        steps = torch.arange(t)
        reverse = (words.unsqueeze(1) - 1 - steps).clamp(min=0)
        encoder_in = torch.where(steps < words.unsqueeze(1), tokens.gather(1, reverse), 0)
        out, _ = self.encoder(self.dropout(self.embedding(encoder_in)))
        h = out[torch.arange(b), (words - 1).clamp(min=0)]
        mean, log_var = self.mean(h), self.log_var(h).clamp(min=-10.0)
        std = torch.exp(0.5 * log_var)
        eps = torch.randn_like(std)
        z = mean + std * eps
        inputs = torch.cat([self.sos.expand(b, 1, -1), self.embedding(tokens[:, :-1])], 1)
        inputs = torch.cat([self.dropout(inputs), z.unsqueeze(1).expand(-1, t, -1)], 2)
        out, _ = self.decoder(inputs, self.to_hidden(z).unsqueeze(0))
        targets = torch.where(steps < lengths.unsqueeze(1), tokens, IGNORE_INDEX)
        nll = F.cross_entropy(self.output(out).reshape(b * t, -1), targets.reshape(-1), reduction="none")
        log_p = -nll.view(b, t).sum(1)
        half_log_2pi = 0.5 * math.log(2 * math.pi)
        log_q = (-half_log_2pi - 0.5 * log_var - 0.5 * eps**2).sum(1)
        log_anchor = (-half_log_2pi - 0.5 * z**2).sum(1)
        return -(log_p + 0.5 * (log_q + log_anchor)).mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emb", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--latent", type=int, default=16)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--blocks", type=int, default=10, help="timed blocks of each loop (after one warm-up block)")
    parser.add_argument("--block-steps", type=int, default=10)
    add_process_flags(parser)
    args = parser.parse_args()
    apply_process_flags(args)
    with tempfile.TemporaryDirectory() as run_dir:
        overrides = [
            "task.name=sentence-latent",
            "model.name=sentence-gru",
            f"model.emb={args.emb}",
            f"model.hidden={args.hidden}",
            f"model.latent={args.latent}",
            "objective={amim: {weight: 1.0}}",
            "optim.name=adam",
            "optim.lr=0.001",
            "train.clip=0",
            f"data.batch_size={args.batch}",
            "run.device=cpu",
            f"run.dir={run_dir}",
            f"run.keep_freed_memory={args.keep_freed_memory}",
        ]
        config = load_config(None, overrides)
        corpus = load_corpus(config.data)
        torch.manual_seed(0)
        model = build_model(config, len(corpus.vocab))
        trainer = Trainer(config, model, build_objective(config), build_task(config, corpus))
        plain = PlainSMIM(len(corpus.vocab), args.emb, args.hidden, args.latent, 0.5)
        optimizer = torch.optim.Adam(plain.parameters(), lr=1e-3)

        def plain_step(batch) -> None:  # type: ignore[no-untyped-def]
            tokens = batch.targets.masked_fill(batch.targets == IGNORE_INDEX, 0)
            loss = plain.loss(tokens, batch.lengths)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        times: dict[str, list[float]] = {"infolm": [], "plain": []}
        tokens: dict[str, int] = {"infolm": 0, "plain": 0}
        loops = [("infolm", trainer.train_step), ("plain", plain_step)]
        for block in range(args.blocks + 1):
            batches = [trainer.batches.next_batch() or trainer.batches.next_batch() for _ in range(args.block_steps)]
            for name, step in loops if block % 2 else loops[::-1]:  # A B B A: neither loop always goes first
                start = time.perf_counter()
                for batch in batches:
                    step(batch)
                if block:  # the first block warms up
                    times[name].append(time.perf_counter() - start)
                    tokens[name] += sum(int(b.lengths.sum()) for b in batches)
    infolm_rate = tokens["infolm"] / sum(times["infolm"])
    plain_rate = tokens["plain"] / sum(times["plain"])
    paired = [p / o for p, o in zip(times["plain"], times["infolm"], strict=True)]
    result = {
        "model": f"emb {args.emb}, hidden {args.hidden}, latent {args.latent}, vocab {len(corpus.vocab)}",
        "batch": args.batch,
        "steps_each": args.blocks * args.block_steps,
        "threads": torch.get_num_threads(),
        "train_tokens_per_s": round(infolm_rate, 1),
        "plain_train_tokens_per_s": round(plain_rate, 1),
        "vs_plain_loop": round(infolm_rate / plain_rate, 3),
        "vs_plain_loop_median_block": round(statistics.median(paired), 3),
    }
    print_result(result, args.json)


if __name__ == "__main__":
    main()
