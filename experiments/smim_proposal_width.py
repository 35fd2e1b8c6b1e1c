"""How loose SentenceMIM's IWAE bound is because of its proposal: the same model scored with wider ones.

The IWAE-K bound holds for any proposal q'(z|x): ln p(x) >= E ln 1/K sum_k p(x|z_k) p(z_k) / q'(z_k|x). A
sentence-GRU run's own q(z|x) sits at the log-variance floor ``model.min_log_var`` (-10, the authors'
clamp) for sMIM, a proposal far narrower than the posterior of p(x, z) = p(x|z) N(z; 0, I); raising the
floor gives other proposals for the same model, so every row bounds the same -ln p(x), and the lowest is
the tightest honest number. The model (decoder and prior) is never changed.

    python experiments/smim_proposal_width.py runs/smim-ptb-cpu/smim-s0 --sentences 300 --samples 100
"""

from __future__ import annotations

import argparse
import json

import torch

from infolm.build import load_run
from infolm.data.batching import sentence_batches
from infolm.latent.evaluation import evaluate_latent
from infolm.latent.sentence_gru import SentenceGRU


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a sentence-gru run directory")
    parser.add_argument("--floors", type=float, nargs="+", default=[-10.0, -8.0, -6.0, -4.0, -2.0])
    parser.add_argument("--sentences", type=int, default=300, help="first N test sentences (0: all)")
    parser.add_argument("--samples", type=int, default=100, help="K of the IWAE bound")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.samples < 1 or args.sentences < 0:
        raise SystemExit(f"--samples must be at least 1 and --sentences 0 or more: {args.samples}, {args.sentences}")
    _, corpus, loaded = load_run(args.run, "cpu", full_splits=True)
    if not isinstance(loaded, SentenceGRU):
        raise SystemExit(f"{args.run} is not a sentence-gru run (no log-variance floor)")
    model = loaded
    model.eval()
    offsets, stream = corpus.sentence_offsets("test"), corpus.stream("test")
    count = len(offsets) - 1 if args.sentences == 0 else min(args.sentences, len(offsets) - 1)
    sentences = [stream[offsets[i] : offsets[i + 1]] for i in range(count)]
    rows = []
    for floor in args.floors:
        model.config.min_log_var = floor  # the proposal's floor only: p(x|z) and p(z) are untouched
        torch.manual_seed(args.seed)
        batches = sentence_batches(sentences, 20, pad_id=corpus.vocab.eos_id)
        metrics = evaluate_latent(model, batches, samples=args.samples, chunk=20)
        row = {"floor": floor, "nll": metrics.nll, "ppl": metrics.ppl, "rate": metrics.rate}
        rows.append({**row, "distortion": metrics.distortion, "sentences": metrics.examples, "tokens": metrics.tokens})
        print(json.dumps(rows[-1]), flush=True)
    best = min(rows, key=lambda row: row["nll"])
    print(f"tightest: floor {best['floor']}, NLL {best['nll']:.2f} nats per sentence, ppl {best['ppl']:.1f}")


if __name__ == "__main__":
    main()
