"""IMM Table 1: which computation of an LSTM's induced bigram could give the paper's numbers?

The paper's LSTM induced bigram (train / valid / test perplexity 260.16 / 339.24 / 309.56) is far worse
than the Kneser-Ney bigram (92.19 / 199.28 / 185.71), while ours, computed as the table's caption says,
is better than KN on valid and test. This scores three computations of the induced bigram of one run:

* arithmetic: Q's next-word distribution averaged over every training position with the same previous
  word, each with its full history (the caption, Eq. 9; what ``infolm evaluate --induced-ngram 2`` does);
* geometric: the same positions' log-probabilities averaged, then renormalized;
* zero state: Q fed the previous word alone from a zero state (no history at all).

Previous words never seen in training fall back to the zero-state prediction in the first two.

    OMP_NUM_THREADS=1 python experiments/imm_induced_variants.py runs/imm-ptb-table2-converged/none-s0
"""

from __future__ import annotations

import argparse
import math

import torch

from infolm.build import load_run
from infolm.data.batching import IGNORE_INDEX, eval_rows
from infolm.evaluation.induced import split_contexts
from infolm.models.base import eval_mode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a stream-LM run directory")
    parser.add_argument("--bptt", type=int, default=70)
    args = parser.parse_args()
    _, corpus, model = load_run(args.run, "cpu", full_splits=True)
    vocab, eos = len(corpus.vocab), corpus.vocab.eos_id
    with eval_mode(model), torch.no_grad():
        words = torch.arange(vocab).view(vocab, 1)  # every word alone, from a zero state
        zero = torch.log_softmax(model(words, model.init_state(vocab, "cpu")).logits[:, -1].float(), -1)  # (V, V)

        train = corpus.stream("train")
        inputs, targets = eval_rows(train, eos, 64)  # 64 rows with carried state, as perplexity evaluation
        previous = torch.full((inputs.numel(),), -1, dtype=torch.long)
        previous_ids = torch.from_numpy(split_contexts(train, eos, 1)[:, 0].copy())
        previous[: len(previous_ids)] = previous_ids
        previous = previous.view(inputs.shape)
        previous[targets == IGNORE_INDEX] = -1
        arithmetic, geometric = torch.zeros(vocab, vocab), torch.zeros(vocab, vocab)
        counts = torch.zeros(vocab)
        state = model.init_state(inputs.size(0), "cpu")
        for start in range(0, inputs.size(1), args.bptt):
            output = model(inputs[:, start : start + args.bptt], state)
            state = output.state
            rows = previous[:, start : start + args.bptt].reshape(-1)
            keep = rows >= 0
            log_probs = torch.log_softmax(output.logits.float(), -1).reshape(-1, vocab)[keep]
            arithmetic.index_add_(0, rows[keep], log_probs.exp())
            geometric.index_add_(0, rows[keep], log_probs)
            counts += torch.bincount(rows[keep], minlength=vocab).float()
    seen = (counts > 0).unsqueeze(1)
    mean = counts.clamp(min=1).unsqueeze(1)
    tables = {
        "arithmetic (the caption, Eq. 9)": torch.where(seen, (arithmetic / mean).clamp_min(1e-30).log(), zero),
        "geometric": torch.where(seen, torch.log_softmax(geometric / mean, -1), zero),
        "zero state, previous word alone": zero,
    }
    print("| induced bigram computed as | train | valid | test |")
    print("| --- | --- | --- | --- |")
    for name, table in tables.items():
        cells = []
        for split in ("train", "valid", "test"):
            stream = corpus.stream(split)
            context = torch.from_numpy(split_contexts(stream, eos, 1)[:, 0].copy())
            cells.append(f"{math.exp(-float(table[context, stream].double().mean())):.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
