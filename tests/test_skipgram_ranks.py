"""skipgram-nce under data parallelism: two gloo ranks holding unequal numbers of (word, context) pairs
give the loss of one process on the whole batch, and the gradient the trainer averages over the ranks
is that process's gradient (the mean is over every rank's pairs)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from infolm.data.masking import IGNORE_INDEX
from infolm.data.subwords import EncoderData, SubwordSentences
from infolm.data.vocab import Vocab
from infolm.models.encoder import Encoder, EncoderConfig
from infolm.objectives.base import OBJECTIVES, Batch
from infolm.objectives.skipgram_nce import context_pairs
from tests.two_ranks import assert_ranks_equal_one_process, averaged_gradients, run_on_two_ranks

VOCAB = 20
NEGATIVE = 10  # every unigram draw: the proposal is put on this one subword, so the ranks draw alike
# Rows dealt round robin: rank 0 holds rows 0, 2, 4, rank 1 rows 1 and 3.
SENTENCES = {
    "unequal": [[5, 6, 7, 8, 9, 10, 11, 12], [6, 9], [7, 5, 6, 11, 12, 13], [12], [8, 9, 5, 6]],
    "empty-rank": [[5, 6, 7, 8, 9, 10, 11, 12], [], [7, 5, 6, 11, 12, 13], [7], [8, 9, 5, 6]],
}
FORMS = ["infonce", "negative-sampling"]
WINDOW = 2


def sentence_batch(sentences: list[list[int]]) -> Batch:
    rows = SubwordSentences.from_ids(sentences)
    return Batch(rows.rows, torch.full_like(rows.rows, IGNORE_INDEX), padding_mask=rows.real())


def loss_and_gradients(form: str, batch: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The term's loss on ``batch`` and, after the trainer's cross-rank averaging, every gradient."""
    torch.manual_seed(0)
    config = EncoderConfig(dim=16, layers=1, heads=2, ff_dim=32, max_len=32, init_std=0.2)
    encoder = Encoder(config, VOCAB).eval()
    term = OBJECTIVES.build("skipgram-nce", {"form": form, "window": WINDOW, "negatives": 3})
    train = SubwordSentences.from_ids(SENTENCES["unequal"])
    term.setup(EncoderData(Vocab([str(i) for i in range(VOCAB)]), None, {"train": train}), encoder)
    with torch.no_grad():
        term.context.weight.normal_(0.0, 0.5)  # not word2vec's zeros: both tables then get a gradient
    term.proposal = torch.zeros(VOCAB)
    term.proposal[NEGATIVE] = 1.0
    loss = term(encoder, batch, encoder(batch.inputs)).total()
    loss.backward()
    params = {"word_embeddings": encoder.word_embeddings.weight, "context": term.context.weight}
    return loss.detach(), averaged_gradients(params)


def rank_work(rank: int) -> dict:
    results = {}
    for case, sentences in SENTENCES.items():
        local = sentence_batch(sentences).rows(torch.arange(rank, len(sentences), 2))
        for form in FORMS:
            results[case, form] = loss_and_gradients(form, local)
    return results


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    return run_on_two_ranks(tmp_path_factory.mktemp("ranks"), rank_work)


@pytest.mark.parametrize("case", list(SENTENCES))
def test_the_ranks_hold_unequal_numbers_of_pairs(case):
    batch = sentence_batch(SENTENCES[case])
    pairs = [len(context_pairs(batch.inputs[r::2], batch.inputs[r::2] >= 5, WINDOW)[0]) for r in range(2)]
    assert pairs == ([54, 2] if case == "unequal" else [54, 0])


@pytest.mark.skipif(not dist.is_available(), reason="no torch.distributed")
@pytest.mark.parametrize("case", list(SENTENCES))
@pytest.mark.parametrize("form", FORMS)
def test_two_ranks_equal_one_process_on_the_whole_batch(two_ranks, case, form):
    loss, grads = loss_and_gradients(form, sentence_batch(SENTENCES[case]))
    assert_ranks_equal_one_process([results[case, form] for results in two_ranks], loss, grads, form)


@pytest.mark.parametrize("form", FORMS)
def test_a_batch_without_pairs_gives_a_zero_loss_and_gradient(form):
    loss, grads = loss_and_gradients(form, sentence_batch([[], [7]]))  # was: multinomial of no samples raised
    assert float(loss) == 0.0
    assert all(not grad.any() for grad in grads.values())


@pytest.mark.parametrize("total", [0, 1, 5, 4096])
def test_each_rank_draws_its_share_of_the_batchs_pair_budget(total: int, monkeypatch) -> None:
    """``max_pairs`` (and ``imm-mlm``'s ``positions_per_batch``) is the batch's budget: the ranks' shares
    add up to it, so P processes draw as many pairs as one process with the whole batch."""
    import infolm.objectives.across_ranks as across_ranks

    for size in (1, 2, 3):
        shares = []
        for rank in range(size):
            monkeypatch.setattr(across_ranks, "world", lambda rank=rank, size=size: (rank, size))
            shares.append(across_ranks.rank_share(total))
        assert sum(shares) == total and max(shares) - min(shares) <= 1
    # the term keeps rank 1's share of 3 pairs on a 2-rank world: 1 of the batch's pairs
    monkeypatch.setattr(across_ranks, "world", lambda: (1, 2))
    term = OBJECTIVES.build("skipgram-nce", {"window": WINDOW, "negatives": 3, "max_pairs": 3})
    train = SubwordSentences.from_ids(SENTENCES["unequal"])
    config = EncoderConfig(dim=16, layers=1, heads=2, ff_dim=32, max_len=32, init_std=0.2)
    encoder = Encoder(config, VOCAB).eval()
    term.setup(EncoderData(Vocab([str(i) for i in range(VOCAB)]), None, {"train": train}), encoder)
    batch = sentence_batch(SENTENCES["unequal"])
    centers, _ = context_pairs(batch.inputs, batch.padding_mask, WINDOW)
    import infolm.objectives.skipgram_nce as skipgram

    kept: list[int] = []
    monkeypatch.setattr(skipgram, "mean_over_ranks", lambda losses, empty: (kept.append(len(losses)), losses.mean())[1])
    term(encoder, batch, None)
    assert len(centers) > 3 and kept == [1]
