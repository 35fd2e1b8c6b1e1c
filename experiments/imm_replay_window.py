"""How much IMM's replayed extended contexts lose by starting from a zero state.

IMM's default realization (``objective.imm.realization=replay``) feeds each sampled extended context
as the ``context_window`` tokens of training text that end at the sampled occurrence, run from the
model's zero state (the paper's unroll of 35; the paper does not say how its samples are fed). This
script measures what that truncation changes in the quantity IMM averages, Q(· | extended context):
for positions drawn uniformly from the training stream, it compares the trained model's prediction
after windows of W tokens with its prediction after a long window (the reference, ``--reference``
tokens, far beyond an LSTM's memory), in eval mode as IMM's passes:

* KL(Q_ref || Q_W) in nats, averaged over positions;
* the induced cross-entropy of Eq. 12 against the Kneser-Ney bigram for the positions grouped by
  their short context, computed with Q_W and with Q_ref (the loss IMM would see).

    OMP_NUM_THREADS=1 python experiments/imm_replay_window.py runs/imm-ptb-table2-converged/none-s0
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a trained stream-LM run directory")
    parser.add_argument("--windows", type=int, nargs="+", default=[1, 5, 10, 20, 35, 70, 150])
    parser.add_argument("--reference", type=int, default=1000, help="tokens of history of the reference")
    parser.add_argument("--positions", type=int, default=400, help="training positions drawn")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from infolm.build import load_run
    from infolm.ngram import build_ngram
    from infolm.objectives.imm.realizations import last_log_probs

    start = time.perf_counter()
    _, corpus, model = load_run(args.run, "cpu")
    model.eval()
    stream = corpus.stream("train")
    generator = torch.Generator().manual_seed(args.seed)
    ends = torch.randint(args.reference, len(stream) - 1, (args.positions,), generator=generator)  # (N,)
    restricted = build_ngram(stream, len(corpus.vocab), 2, method="modified-kn", history_id=corpus.vocab.eos_id)
    short, groups = torch.unique(stream[ends], return_inverse=True)  # (C,) short contexts, (N,) each one's
    target = torch.as_tensor(restricted.next_token_distribution(short.unsqueeze(1)))  # (C, V) P̂(y|sh)

    def predictions(window: int) -> torch.Tensor:  # (N, V) log Q(· | the window ending at each position)
        rows = stream[(ends - window + 1).unsqueeze(1) + torch.arange(window)]  # (N, W)
        with torch.no_grad():
            return torch.cat(
                [
                    last_log_probs(model, rows[i : i + 50], torch.full((len(rows[i : i + 50]),), window))
                    for i in range(0, len(rows), 50)
                ]
            )

    def induced_cross_entropy(log_q: torch.Tensor) -> float:  # Eq. 12 with the drawn positions as samples
        total = torch.zeros(len(short), log_q.size(1)).index_add(0, groups, log_q.exp())
        counts = torch.bincount(groups, minlength=len(short)).unsqueeze(1)
        log_induced = torch.log(total / counts)
        per_context = -(target * log_induced).sum(-1)
        return float((per_context * counts.squeeze(1)).sum() / len(groups))

    reference = predictions(args.reference)
    rows = []
    for window in [*args.windows, args.reference]:
        log_q = reference if window == args.reference else predictions(window)
        kl = float((reference.exp() * (reference - log_q)).sum(-1).mean())
        rows.append({"window": window, "kl_from_reference": kl, "induced_ce": induced_cross_entropy(log_q)})
    result = {"run": args.run, "positions": args.positions, "distinct_short_contexts": len(short), "rows": rows,
              "wall_s": round(time.perf_counter() - start, 1)}  # fmt: skip
    if args.json:
        print(json.dumps(result))
        return
    print("| history window W | KL(Q_ref ‖ Q_W), nats | induced CE vs KN (Eq. 12), nats |")
    print("| --- | --- | --- |")
    for row in rows:
        print(f"| {row['window']} | {row['kl_from_reference']:.4f} | {row['induced_ce']:.4f} |")
    print(f"\n{args.positions} positions, {len(short)} short contexts, {result['wall_s']} s")


if __name__ == "__main__":
    main()
