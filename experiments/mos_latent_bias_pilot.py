"""Does the CPU-sized AWD-LSTM-MoS of the BMI configs learn under the paper's optimizer? A pilot.

Trains ``configs/ptb/bmi-baseline.yaml``'s model size (emb 32, 64/64/32, 2 experts) with the paper's
optimizer (SGD, lr 20, gradient norm clipped to 0.25) on the same PTB windows (batch 12, fixed bptt 35,
state carried over), with and without the expert projection's bias (``model.latent_bias``), with the
paper's dropouts and with none, and no AR/TAR terms: the plain loss. Prints the mean training loss of
each 100 steps and the perplexity on the first 20,000 validation tokens at the end::

    OMP_NUM_THREADS=1 python experiments/mos_latent_bias_pilot.py --steps 1200
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import torch
import torch.nn.functional as F

from infolm.config import DataConfig
from infolm.data.batching import batchify
from infolm.data.datasets import load_corpus
from infolm.models.mos import AWDLSTMMoS, MoSConfig

SIZE: dict[str, Any] = {"emb": 32, "hidden": 64, "last_hidden": 32, "layers": 3, "n_experts": 2}  # the BMI configs'
NO_DROPOUT: dict[str, Any] = {
    "dropout": 0.0,
    "dropouth": 0.0,
    "dropouti": 0.0,
    "dropoute": 0.0,
    "dropoutl": 0.0,
    "wdrop": 0.0,
}


def train(model: AWDLSTMMoS, data: torch.Tensor, valid: torch.Tensor, steps: int, seed: int) -> dict[str, object]:
    vocab = model.vocab_size
    torch.manual_seed(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=20.0)  # the paper's
    state, position, losses = None, 0, []
    start = time.perf_counter()
    for _ in range(steps):
        if position + 36 > data.size(1):
            position, state = 0, None
        inputs, targets = data[:, position : position + 35], data[:, position + 1 : position + 36]
        position += 35
        out = model(inputs, state)
        state = [(h.detach(), c.detach()) for h, c in out.state]
        loss = F.cross_entropy(out.logits.reshape(-1, vocab), targets.reshape(-1))  # logits: log-probabilities
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)  # the paper's
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        out = model(valid[:, :-1])
        valid_loss = F.cross_entropy(out.logits.reshape(-1, vocab), valid[:, 1:].reshape(-1)).item()
    per_100 = [round(sum(losses[i : i + 100]) / len(losses[i : i + 100]), 3) for i in range(0, steps, 100)]
    return {
        "train_loss_per_100": per_100,
        "valid_ppl": round(math.exp(valid_loss), 1),
        "wall_s": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    corpus = load_corpus(DataConfig(name="ptb"))
    data = batchify(corpus.stream("train"), 12)  # (12, N): the configs' batch
    valid = batchify(corpus.stream("valid")[:20000], 10)
    for dropout in (True, False):
        for bias in (True, False):
            torch.manual_seed(args.seed)
            config = MoSConfig(**SIZE, **({} if dropout else NO_DROPOUT), latent_bias=bias)
            result = train(AWDLSTMMoS(config, len(corpus.vocab)), data, valid, args.steps, args.seed)
            print(json.dumps({"paper_dropouts": dropout, "latent_bias": bias, **result}), flush=True)


if __name__ == "__main__":
    main()
