"""mlm-nce, dim and nsp under data parallelism: two gloo ranks, each holding rows rank::2 of a batch as
the tasks deal them, give the loss of one process on the whole batch, and the gradient the trainer
averages over the ranks is that process's gradient (in-batch negatives come from every rank)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from infolm.data.masking import IGNORE_INDEX, SPAN_IDS
from infolm.models.encoder import Encoder, EncoderConfig
from infolm.objectives.base import OBJECTIVES, Batch
from tests.two_ranks import assert_ranks_equal_one_process, averaged_gradients, run_on_two_ranks

VOCAB = 30
MASK = 4
# Rows [CLS] A [SEP] B [SEP] and their masked spans (start, end). Five rows, so the ranks hold 3 and 2
# (the loss's normalisation must not assume equal shares); rows 0, 1 and 2 mask the same n-gram 9 10.
ROWS = [
    ([2, 5, 9, 10, 6, 3, 7, 8, 3], [(2, 4), (6, 7)]),
    ([2, 9, 10, 12, 3, 13, 14, 15, 3], [(1, 3), (5, 7)]),
    ([2, 9, 10, 3, 16, 17, 3], [(1, 3)]),
    ([2, 18, 19, 20, 3, 21, 22, 23, 24, 3], [(2, 4), (6, 9)]),
    ([2, 25, 26, 3, 27, 3], [(4, 5)]),
]
# The same rows where the second rank's (rows 1 and 3) have nothing masked.
EMPTY_SECOND_RANK = [(row, spans if i % 2 == 0 else []) for i, (row, spans) in enumerate(ROWS)]
TERMS = {
    "mlm-nce": ("mlm-nce", {}),
    "dim": ("dim", {}),
    "dim-mean": ("dim", {"ngram_pooling": "mean"}),
    "nsp-local": ("nsp", {"negatives": 2}),
    "nsp-global": ("nsp", {"form": "global", "negatives": 2}),
}


def make_batch(rows: list[tuple[list[int], list[tuple[int, int]]]]) -> Batch:
    width = max(len(tokens) for tokens, _ in rows)
    originals = torch.zeros(len(rows), width, dtype=torch.long)
    span_ids = torch.full_like(originals, -1)
    for i, (tokens, spans) in enumerate(rows):
        originals[i, : len(tokens)] = torch.tensor(tokens)
        for k, (start, end) in enumerate(spans):
            span_ids[i, start:end] = k
    masked = span_ids >= 0
    targets = originals.masked_fill(~masked, IGNORE_INDEX)
    return Batch(originals.masked_fill(masked, MASK), targets, extras={SPAN_IDS: span_ids})


def loss_and_gradients(name: str, settings: dict, batch: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The term's loss on ``batch`` and, after the trainer's cross-rank averaging, every gradient."""
    torch.manual_seed(0)
    # init_std 0.2, not BERT's 0.02: at 0.02 the embedding LayerNorm scales float32 rounding by 1/σ and
    # the two summation orders of the [CLS] embedding's gradient differ by percents (not in float64)
    config = EncoderConfig(dim=16, layers=1, heads=2, ff_dim=32, max_len=32, init_std=0.2)
    encoder = Encoder(config, VOCAB).eval()
    term = OBJECTIVES.build(name, settings)
    term.setup(None, encoder)
    loss = term(encoder, batch, encoder(batch.inputs)).total()
    loss.backward()
    params = dict(encoder.named_parameters()) | {f"term.{k}": p for k, p in term.named_parameters()}
    return loss.detach(), averaged_gradients(params)


def rank_work(rank: int) -> dict:
    results = {}
    for case, rows in (("rows", ROWS), ("empty-rank", EMPTY_SECOND_RANK)):
        local = make_batch(rows).rows(torch.arange(rank, len(rows), 2))
        for label, (name, settings) in TERMS.items():
            results[case, label] = loss_and_gradients(name, settings, local)
    return results


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    return run_on_two_ranks(tmp_path_factory.mktemp("ranks"), rank_work)


@pytest.mark.skipif(not dist.is_available(), reason="no torch.distributed")
@pytest.mark.parametrize("case", ["rows", "empty-rank"])
@pytest.mark.parametrize("label", list(TERMS))
def test_two_ranks_equal_one_process_on_the_whole_batch(two_ranks, case, label):
    rows = ROWS if case == "rows" else EMPTY_SECOND_RANK
    name, settings = TERMS[label]
    loss, grads = loss_and_gradients(name, settings, make_batch(rows))
    assert_ranks_equal_one_process([results[case, label] for results in two_ranks], loss, grads, label)
