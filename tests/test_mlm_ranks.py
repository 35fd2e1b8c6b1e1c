"""mlm and imm-mlm under data parallelism: two gloo ranks holding unequal numbers of masked subwords
(imm-mlm: locations) give the loss of one process on the whole batch, and the gradient the trainer
averages over the ranks is that process's gradient: each masked subword weighs the same on every rank."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from infolm.data.subwords import EncoderData, SubwordSentences
from infolm.data.vocab import Vocab
from infolm.models.encoder import Encoder, EncoderConfig
from infolm.objectives.base import OBJECTIVES, Batch
from tests.test_contrastive_ranks import EMPTY_SECOND_RANK, ROWS, VOCAB, make_batch
from tests.two_ranks import assert_ranks_equal_one_process, averaged_gradients, run_on_two_ranks

# Rows dealt round robin: rank 0 holds rows 0, 2, 4 (long: 16 locations), rank 1 rows 1, 3 (short: 3).
SENTENCES = [[5, 6, 7, 8, 9, 10], [6, 9], [7, 5, 6, 11, 12, 13], [12], [8, 9, 5, 6]]
# rank 1's rows are empty sentences ([CLS] [SEP]): no location, yet it must take part in the collectives
NO_LOCATION_ON_SECOND_RANK = [[5, 6, 7, 8, 9, 10], [], [7, 5, 6, 11, 12, 13], [], [8, 9, 5, 6]]
IMM_TRAIN = [[5, 6, 7, 8, 9, 10], [6, 9, 5, 6, 10, 11], [7, 5, 6, 11, 12, 13], [12, 6, 9], [8, 9, 5, 6]]
TERMS = {
    "mlm": ("mlm", {}),
    "imm-mlm": ("imm-mlm", {"k": 3, "sample_chunk": 3}),
    "imm-mlm-crosstalk": ("imm-mlm", {"k": 3, "sample_chunk": 1}),  # the chunked gradient of App. C.2
}
CASES = {
    "mlm": {"unequal": lambda: make_batch(ROWS), "empty-rank": lambda: make_batch(EMPTY_SECOND_RANK)},
    "imm-mlm": {
        "unequal": lambda: sentence_batch(SENTENCES),
        "empty-rank": lambda: sentence_batch(NO_LOCATION_ON_SECOND_RANK),
    },
}


def sentence_batch(sentences: list[list[int]]) -> Batch:
    rows = SubwordSentences.from_ids(sentences)
    return Batch(rows.rows, rows.rows, padding_mask=rows.real())


def first_occurrences(index, contexts: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample i of a context is its occurrence i (cyclically): the same extended contexts whichever rank
    holds a location, so that the ranks' terms are comparable with one process's."""
    draws = torch.arange(k)[:, None] % index.counts[contexts][None, :]  # (k, P)
    picked = index.offsets[contexts][None, :] + draws
    return index.rows[picked], index.places[picked]


def loss_and_gradients(label: str, batch: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The term's loss on ``batch`` and, after the trainer's cross-rank averaging, every gradient."""
    name, settings = TERMS[label]
    torch.manual_seed(0)
    config = EncoderConfig(dim=16, layers=1, heads=2, ff_dim=32, max_len=32, init_std=0.2)
    encoder = Encoder(config, VOCAB).eval()
    term = OBJECTIVES.build(name, settings)
    if name == "imm-mlm":
        data = EncoderData(Vocab([str(i) for i in range(VOCAB)]), None, {"train": SubwordSentences.from_ids(IMM_TRAIN)})
        term.setup(data, encoder)
        term.index.sample = lambda contexts, k: first_occurrences(term.index, contexts, k)
    loss = term(encoder, batch, encoder(batch.inputs)).total()
    loss.backward()
    return loss.detach(), averaged_gradients(dict(encoder.named_parameters()))


def rank_work(rank: int) -> dict:
    results = {}
    for label, (name, _) in TERMS.items():
        for case, make in CASES[name].items():
            batch = make()
            results[case, label] = loss_and_gradients(label, batch.rows(torch.arange(rank, len(batch.inputs), 2)))
    return results


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    return run_on_two_ranks(tmp_path_factory.mktemp("ranks"), rank_work)


def test_the_ranks_hold_unequal_shares():
    masked = make_batch(ROWS).targets != -100
    assert [int(masked[rank::2].sum()) for rank in range(2)] == [6, 9]
    locations = [sum(len(SENTENCES[i]) for i in range(rank, len(SENTENCES), 2)) for rank in range(2)]
    assert locations == [16, 3]


@pytest.mark.skipif(not dist.is_available(), reason="no torch.distributed")
@pytest.mark.parametrize("case", ["unequal", "empty-rank"])
@pytest.mark.parametrize("label", list(TERMS))
def test_two_ranks_equal_one_process_on_the_whole_batch(two_ranks, case, label):
    name, _ = TERMS[label]
    loss, grads = loss_and_gradients(label, CASES[name][case]())
    assert_ranks_equal_one_process([results[case, label] for results in two_ranks], loss, grads, label)
