"""How tight SentenceMIM's bound under its own prior gets with neighbour draws in the proposal: one run's
IWAE-K bound under the aggregated posterior of the training split (Eq. 9), with q(z|x) alone and with D
draws from each of the M training posteriors nearest q's mean (``NeighborProposal``), on validation
sentences, so that the (M, D) of the reports is chosen without the test split. Every row bounds the same
-ln p(x) of the same model; the lowest is the tightest, and its cost is M D decodings more per sentence.

    python experiments/smim_neighbor_proposal.py runs/smim-ptb-cpu/smim-s0 --sentences 60 --samples 50
"""

from __future__ import annotations

import argparse
import json
import time

from infolm.build import load_run
from infolm.evaluation.aggregate_prior import aggregate_posterior, aggregate_prior_bound


def proposal(text: str) -> tuple[int, int]:
    """``MxD`` -> (M, D); ``0x1`` is q alone."""
    neighbors, _, draws = text.partition("x")
    if not (neighbors.isdigit() and draws.isdigit() and int(draws) >= 1):
        raise argparse.ArgumentTypeError(f"a proposal is MxD with M >= 0 and D >= 1, got {text!r}")
    return int(neighbors), int(draws)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a sentence-latent run directory with a checkpoint")
    parser.add_argument("--split", default="valid", help="the sentences scored (default: validation)")
    parser.add_argument("--sentences", type=int, default=60, help="the first N sentences of the split")
    parser.add_argument("--samples", type=int, default=50, help="K draws from q(z|x) per sentence")
    parser.add_argument(
        "--proposals", type=proposal, nargs="+", default=[(0, 1), (1, 1), (10, 2), (50, 2), (200, 1)], metavar="MxD"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    if args.samples < 1 or args.sentences < 1:
        raise SystemExit(f"--samples and --sentences must be at least 1: {args.samples}, {args.sentences}")
    _, corpus, model = load_run(args.run, "cpu", full_splits=True)
    eos = corpus.vocab.eos_id
    prior = aggregate_posterior(model, list(corpus.sentences("train")), eos)
    scored = list(corpus.sentences(args.split))[: args.sentences]
    rows = []
    for neighbors, draws in args.proposals:
        start = time.perf_counter()
        bound = aggregate_prior_bound(model, scored, prior, eos, args.samples, 10, 20, args.seed, neighbors, draws)
        rows.append({**bound, "seconds": round(time.perf_counter() - start, 1)})
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{args.run}: {len(scored)} {args.split} sentences, K = {args.samples}, {prior.components} components")
    print("M x D     -ln p(x) bound / sentence   without <eos> / word   seconds")
    for row in rows:
        words = row.get("nll_words_aggregate_prior_per_word", float("nan"))
        shape = f"{int(row['neighbors'])} x {int(row['neighbor_draws'])}"
        print(f"{shape:<9} {row['nll_aggregate_prior']:>27.2f}   {words:>20.3f}   {row['seconds']:>7.1f}")


if __name__ == "__main__":
    main()
