"""Cost of the decoder's state dropout in ``latent-sentence-lstm``: the step-by-step path against the fused one.

    python benchmarks/latent_state_dropout.py --json                 # hidden 128, 20 PTB sentences, 1 thread

With ``dropout_state`` 0 the decoder is one fused ``nn.LSTM``; with ``dropout_state`` > 0 it runs, in training,
through the step-by-step LSTM of ``models/cells.py`` on the same weights, reading h_{t-1} * M^state. Both models
share their weights and their input and output dropout; they differ only in the state dropout. Timed, in
interleaved rounds (``--stat``: the fastest round, or the median):

* ``step_k{K}``: one training step (K draws, one folded decoder pass, the DReG surrogate of the KL objective,
  backward, Adam), for each K of ``--samples``;
* ``decoder_k{K}``: the decoder alone, forward + backward of its outputs on K * B rows, which isolates the
  LSTM.

``*_ratio`` is the state-dropout time over the fused time of the same run.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable

import torch
from mc_objectives import ptb_sentences
from process_flags import add_process_flags, apply_process_flags
from report import print_result  # benchmarks/report.py and timing.py, beside this script
from timing import interleaved

from infolm.latent import LatentVariableModel, objective_surrogate
from infolm.latent.estimators import kl_objective
from infolm.latent.sentence_lstm import SentenceLSTMModel
from infolm.models import MODELS


def training_step(
    model: LatentVariableModel, tokens: torch.Tensor, lengths: torch.Tensor, k: int
) -> Callable[[], None]:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.0, 0.999))  # thesis Sec. 5.C
    objective = kl_objective(0.5, k, k)
    estimator = "dreg" if model.reparameterized else ("vimco" if k > 1 else "reinforce")

    def run() -> None:
        optimizer.zero_grad(set_to_none=True)
        out = objective_surrogate(model, tokens, lengths, objective, estimator)
        (-out.surrogate.mean()).backward()
        optimizer.step()

    return run


def decoder_pass(model: SentenceLSTMModel, inputs: torch.Tensor, p: float) -> Callable[[], None]:
    def run() -> None:
        mask = None
        if p > 0.0:
            mask = inputs.new_empty(inputs.size(0), model.config.hidden).bernoulli_(1 - p) / (1 - p)
        model.decode(inputs, mask).sum().backward()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latent", default="gaussian", choices=("gaussian", "categorical"))
    parser.add_argument("--hidden", type=int, default=128, help="embedding and hidden size (thesis: 128)")
    parser.add_argument("--batch", type=int, default=20, help="sentences per batch")
    parser.add_argument("--max-len", type=int, default=35, help="PTB sentences cut to this many tokens (thesis: 35)")
    parser.add_argument("--samples", type=int, nargs="+", default=[1, 16], help="K of the training steps")
    parser.add_argument("--dropout-state", type=float, default=0.3, help="the state-dropout rate timed")
    parser.add_argument("--dropout", type=float, default=0.3, help="input and output dropout of both models")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--stat", default="min", choices=("min", "median"))
    add_process_flags(parser, threads=1)
    args = parser.parse_args()
    apply_process_flags(args)
    torch.manual_seed(0)
    tokens, lengths, vocab = ptb_sentences(args.batch, args.max_len)
    settings = {
        "latent": args.latent,
        "embedding": args.hidden,
        "hidden": args.hidden,
        "dropout_input": args.dropout,
        "dropout_output": args.dropout,
    }
    fused = MODELS.build("latent-sentence-lstm", settings, vocab_size=vocab)
    stepped = MODELS.build("latent-sentence-lstm", {**settings, "dropout_state": args.dropout_state}, vocab_size=vocab)
    assert isinstance(fused, SentenceLSTMModel) and isinstance(stepped, SentenceLSTMModel)
    stepped.load_state_dict(copy.deepcopy(fused.state_dict()))  # the same weights
    fused.train(), stepped.train()

    result: dict[str, object] = {
        "model": f"latent-sentence-lstm ({args.latent}, hidden {args.hidden}, vocab {vocab})",
        "batch": args.batch,
        "tokens": int(lengths.sum()),
        "dropout_state": args.dropout_state,
        "threads": torch.get_num_threads(),
        "stat": args.stat,
    }
    for k in args.samples:
        seconds = interleaved(
            {"fused": training_step(fused, tokens, lengths, k), "state": training_step(stepped, tokens, lengths, k)},
            args.repeats,
            args.stat,
        )
        result[f"step_k{k}_fused_s"] = round(seconds["fused"], 4)
        result[f"step_k{k}_state_dropout_s"] = round(seconds["state"], 4)
        result[f"step_k{k}_ratio"] = round(seconds["state"] / seconds["fused"], 2)
    for k in args.samples:  # the decoder alone on K * B rows
        inputs = torch.randn(k * args.batch, int(tokens.size(1)), fused.decoder.input_size)
        seconds = interleaved(
            {"fused": decoder_pass(fused, inputs, 0.0), "state": decoder_pass(stepped, inputs, args.dropout_state)},
            args.repeats,
            args.stat,
        )
        result[f"decoder_k{k}_fused_ms"] = round(1000 * seconds["fused"], 2)
        result[f"decoder_k{k}_state_dropout_ms"] = round(1000 * seconds["state"], 2)
        result[f"decoder_k{k}_ratio"] = round(seconds["state"] / seconds["fused"], 2)
    print_result(result, args.json)


if __name__ == "__main__":
    main()
