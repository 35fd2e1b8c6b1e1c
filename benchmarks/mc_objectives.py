"""Step time of the ch. 5 Monte Carlo objectives with K draws batched, and IWAE-K evaluation cost.

    python benchmarks/mc_objectives.py --model latent-sentence-lstm --json
    python benchmarks/mc_objectives.py --model latent-synthetic --json

Training: one optimizer step (draws, one folded decoder pass, surrogate, backward, Adam) of the KL
objective for K = 1, 4, 16, with DReG for Gaussian latents and VIMCO (REINFORCE at K = 1) for
categorical ones; ``ratio_to_k1`` is the step time over K = 1's, to compare with the K = 16
separate K = 1 steps a loop over draws would take (ratio 16). Also IWAE-16 against DReG-16 (the
same backward passes, DReG's per-draw rescaling of the gradient on z aside). Evaluation: the IWAE-K
bound (default K = 100) with the draws folded into ``--chunk``-draw decoder passes against K separate
one-draw passes, after checking both give the same ln p(x|z).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from process_flags import add_process_flags, apply_process_flags
from report import print_result  # benchmarks/report.py, beside this script

from infolm.config import DataConfig
from infolm.data import load_corpus
from infolm.latent import LatentVariableModel, objective_surrogate
from infolm.latent.estimators import kl_objective
from infolm.models import MODELS


def ptb_sentences(count: int, max_len: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The first ``count`` PTB training sentences, cut to ``max_len`` tokens, right-padded."""
    corpus = load_corpus(DataConfig(name="ptb"))
    sentences = [corpus.sentence("train", i)[:max_len] for i in range(count)]
    tokens = torch.zeros(count, max(len(s) for s in sentences), dtype=torch.long)
    for row, sentence in enumerate(sentences):
        tokens[row, : len(sentence)] = sentence
    return tokens, torch.tensor([len(s) for s in sentences]), len(corpus.vocab)


def timed(repeats: int, fn: Callable[[], object]) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="latent-sentence-lstm", choices=("latent-sentence-lstm", "latent-synthetic"))
    parser.add_argument("--latent", default="gaussian", choices=("gaussian", "categorical"))
    parser.add_argument("--hidden", type=int, default=128, help="hidden size (thesis: 128)")
    parser.add_argument("--batch", type=int, default=20, help="sentences (or symbols) per batch")
    parser.add_argument("--max-len", type=int, default=35, help="PTB sentences cut to this many tokens (thesis: 35)")
    parser.add_argument("--samples", type=int, nargs="+", default=[1, 4, 16], help="K of the training steps")
    parser.add_argument("--eval-samples", type=int, default=100, help="K of the IWAE evaluation (thesis: 100)")
    parser.add_argument("--chunk", type=int, default=25, help="draws per folded evaluation pass")
    parser.add_argument("--repeats", type=int, default=5)
    add_process_flags(parser)
    args = parser.parse_args()
    apply_process_flags(args)
    torch.manual_seed(0)
    if args.model == "latent-sentence-lstm":
        tokens, lengths, vocab = ptb_sentences(args.batch, args.max_len)
    else:
        vocab = 10_000
        tokens, lengths = torch.randint(0, vocab, (args.batch, 1)), torch.ones(args.batch, dtype=torch.long)
    settings = {"latent": args.latent, "hidden": args.hidden}
    model = MODELS.build(args.model, settings, vocab_size=vocab)
    assert isinstance(model, LatentVariableModel)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.0, 0.999))  # thesis Sec. 5.C

    def step(estimator: str, k: int) -> Callable[[], object]:
        objective = kl_objective(0.5, k, k)

        def run() -> None:
            optimizer.zero_grad(set_to_none=True)
            out = objective_surrogate(model, tokens, lengths, objective, estimator)
            (-out.surrogate.mean()).backward()
            optimizer.step()

        return run

    gaussian = args.latent == "gaussian"
    result: dict[str, object] = {
        "model": f"{args.model} ({args.latent}, hidden {args.hidden}, vocab {vocab})",
        "batch": args.batch,
        "tokens": int(lengths.sum()),
        "threads": torch.get_num_threads(),
    }
    base = None
    for k in args.samples:
        estimator = "dreg" if gaussian else ("vimco" if k > 1 else "reinforce")
        seconds = timed(args.repeats, step(estimator, k))
        base = base or seconds
        result[f"step_{estimator}_k{k}_s"] = round(seconds, 5)
        result[f"ratio_to_k1_k{k}"] = round(seconds / base, 2)
    if gaussian:
        k = max(args.samples)
        result[f"step_iwae_k{k}_s"] = round(timed(args.repeats, step("iwae", k)), 5)

    model.eval()
    k = args.eval_samples
    with torch.no_grad():
        z = model.posterior(tokens, lengths).sample((k,))

        def folded() -> torch.Tensor:
            return torch.cat(
                [model.log_likelihood(tokens, lengths, z[i : i + args.chunk]) for i in range(0, k, args.chunk)]
            )

        def separate() -> torch.Tensor:
            return torch.cat([model.log_likelihood(tokens, lengths, z[i : i + 1]) for i in range(k)])

        torch.testing.assert_close(folded(), separate(), rtol=1e-4, atol=1e-3)
        t_folded, t_separate = timed(max(1, args.repeats // 2), folded), timed(max(1, args.repeats // 2), separate)
    result.update(
        {
            f"iwae{k}_folded_s": round(t_folded, 4),
            f"iwae{k}_separate_s": round(t_separate, 4),
            "folded_vs_separate": round(t_folded / t_separate, 3),
            "chunk": args.chunk,
        }
    )
    print_result(result, args.json)


if __name__ == "__main__":
    main()
