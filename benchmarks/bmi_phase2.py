"""IW-RAML's conditional log-likelihood (BMI Phase II, Eq. 16): the output layer over Y only against the full pass.

    python benchmarks/bmi_phase2.py --json
    python benchmarks/bmi_phase2.py --emb 100 --hidden 200 --last-hidden 100 --experts 2 --json

Draws ``--pairs`` (X, Y~) sentence pairs from PTB train as BMI does (Y~ from the geometric proposal,
lambda 0.3), checks in evaluation mode that both ways give the same log Q(Y~ | X), then times a
forward and backward of each in training mode on the same pairs: ``y_only`` (the recurrent pass over
X+Y, the mixture-of-softmaxes head over Y's positions) and ``full_pass`` (the model's forward over X+Y,
the head at every position, padding included). Also times one MLE step on a ``--pairs`` x 35 stream
batch, the unit the Phase-II cost is usually quoted in. Defaults: the model of ``configs/ptb/bmi-*.yaml``.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
import torch.nn.functional as F
from mos import add_mos_arguments, mos_settings  # benchmarks/mos.py, beside this script
from report import print_result  # benchmarks/report.py, beside this script
from timing import interleaved

from infolm.config import DataConfig
from infolm.data import load_corpus
from infolm.data.pairs import SentenceIndex
from infolm.models import MODELS
from infolm.models.base import LanguageModel
from infolm.objectives.bmi import conditional_log_likelihood


class FullPass(torch.nn.Module):
    """The same model seen through ``forward`` alone (no ``hidden_states`` / ``output_log_probs``)."""

    def __init__(self, inner: LanguageModel) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, tokens: torch.Tensor, state: Any) -> Any:
        return self.inner(tokens, state)

    def init_state(self, batch_size: int, device: Any) -> Any:
        return self.inner.init_state(batch_size, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_mos_arguments(parser)
    parser.add_argument("--pairs", type=int, default=12, help="sentence pairs (BMI: the LM batch size)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    corpus = load_corpus(DataConfig(name="ptb"))
    index = SentenceIndex.from_corpus(corpus, "train", max_len=60)
    settings = mos_settings(args)
    model = MODELS.build("awd-lstm-mos", settings, vocab_size=len(corpus.vocab))
    assert isinstance(model, LanguageModel)
    full = FullPass(model)
    x_idx, y_idx = index.sample_positive(args.pairs)
    tilde_idx, _ = index.sample_geometric(y_idx, 0.3)
    tokens, lengths = index.batch(torch.cat([x_idx, tilde_idx]))
    m = args.pairs
    pairs = (tokens[:m], lengths[:m], tokens[m:], lengths[m:], index.pad_id)

    model.eval()
    with torch.no_grad():
        same = torch.allclose(
            conditional_log_likelihood(model, *pairs), conditional_log_likelihood(full, *pairs), atol=1e-4
        )  # type: ignore[arg-type]
    if not same:
        raise SystemExit("the two ways disagree on log Q(Y | X)")
    model.train()
    stream = torch.randint(len(corpus.vocab), (m, 36))

    def step(which: torch.nn.Module) -> None:
        (-conditional_log_likelihood(which, *pairs).sum()).backward()  # type: ignore[arg-type]

    def mle() -> None:
        output = model(stream[:, :-1], model.init_state(m, "cpu"))
        F.nll_loss(output.logits.reshape(-1, output.logits.size(-1)), stream[:, 1:].reshape(-1)).backward()

    seconds = interleaved(
        {"y_only": lambda: step(model), "full_pass": lambda: step(full), "mle": mle}, args.repeats, "median"
    )
    padded = int(m * (lengths[:m] + lengths[m:]).max())
    print_result(
        {
            "model": settings,
            "pairs": m,
            "positions_padded": padded,
            "y_tokens": int(lengths[m:].sum()),
            "seconds_y_only": round(seconds["y_only"], 4),
            "seconds_full_pass": round(seconds["full_pass"], 4),
            "seconds_mle_step": round(seconds["mle"], 4),
            "y_only_vs_full_pass": round(seconds["y_only"] / seconds["full_pass"], 3),
            "threads": torch.get_num_threads(),
        },
        args.json,
    )


if __name__ == "__main__":
    main()
