"""IWAE-K evaluation cost of the sentence GRU: K draws folded into the batch against K separate passes.

    python benchmarks/latent_iwae.py --samples 100 --chunk 25 --sentences 20 --json

Scores ``--sentences`` PTB test sentences under K posterior draws in two ways, after checking that
both give the same ln p(x|z): ``folded`` (the K draws folded into the batch dimension, ``--chunk``
draws per decoder pass, as the evaluation does) and ``separate`` (K decoder passes of one draw each).
Prints the seconds of each, ``folded_vs_separate`` (the goal is <= 0.5) and the sizes.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from process_flags import add_process_flags, apply_process_flags
from report import print_result  # benchmarks/report.py, beside this script

from infolm.config import DataConfig
from infolm.data import load_corpus
from infolm.latent.sentence_gru import SentenceGRU, SentenceGRUConfig


def sentence_batch(corpus, count: int) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[no-untyped-def]
    sentences = [corpus.sentence("test", i) for i in range(count)]
    width = max(len(s) for s in sentences)
    tokens = torch.full((count, width), corpus.vocab.eos_id, dtype=torch.long)
    for row, sentence in enumerate(sentences):
        tokens[row, : len(sentence)] = sentence
    return tokens, torch.tensor([len(s) for s in sentences])


def best_of(repeats: int, fn) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) if repeats < 3 else statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100, help="K draws per sentence (valid: 100, test: 500)")
    parser.add_argument("--chunk", type=int, default=25, help="draws per folded decoder pass")
    parser.add_argument("--sentences", type=int, default=20, help="PTB test sentences in the batch")
    parser.add_argument("--emb", type=int, default=300)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--latent", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    add_process_flags(parser)
    args = parser.parse_args()
    apply_process_flags(args)
    torch.manual_seed(0)
    corpus = load_corpus(DataConfig(name="ptb"))
    config = SentenceGRUConfig(emb=args.emb, hidden=args.hidden, latent=args.latent)
    model = SentenceGRU(config, len(corpus.vocab), corpus.vocab.eos_id).eval()
    tokens, lengths = sentence_batch(corpus, args.sentences)
    k = args.samples
    with torch.no_grad():
        z = model.posterior(tokens, lengths).sample((k,))  # (K, B, D)

        def folded() -> torch.Tensor:
            return torch.cat(
                [model.log_likelihood(tokens, lengths, z[i : i + args.chunk]) for i in range(0, k, args.chunk)]
            )

        def separate() -> torch.Tensor:
            return torch.cat([model.log_likelihood(tokens, lengths, z[i : i + 1]) for i in range(k)])

        torch.testing.assert_close(folded(), separate(), rtol=1e-4, atol=1e-3)
        t_folded = best_of(args.repeats, folded)
        t_separate = best_of(args.repeats, separate)
    result = {
        "samples": k,
        "chunk": args.chunk,
        "sentences": args.sentences,
        "tokens": int(lengths.sum()),
        "model": f"emb {args.emb}, hidden {args.hidden}, latent {args.latent}, vocab {len(corpus.vocab)}",
        "threads": torch.get_num_threads(),
        "folded_s": round(t_folded, 4),
        "separate_s": round(t_separate, 4),
        "folded_vs_separate": round(t_folded / t_separate, 3),
    }
    print_result(result, args.json)


if __name__ == "__main__":
    main()
