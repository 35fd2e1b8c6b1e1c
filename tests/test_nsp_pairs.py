"""NSP rows of masked-lm (task.pairs=true): segments of whole words, negatives as long as positives."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from infolm.config import load_config
from infolm.objectives.base import OBJECTIVES
from infolm.tasks import TASKS
from infolm.tasks.masked_lm import inner_subwords, subword_corpus

MAX_LEN = 24
PAD_ID, SEP_ID = 0, 3


def pair_task(small_corpus, tmp_path, *extra: str):
    settings = ["task.name=masked-lm", f"task.max_len={MAX_LEN}", "task.vocab_size=300", "task.pairs=true"]
    config = load_config(None, [*settings, "model.name=bert", f"run.dir={tmp_path}", "data.batch_size=8", *extra])
    task = TASKS.build("masked-lm", {k: v for k, v in config.task.items() if k != "name"})
    data = subword_corpus(small_corpus, config, task.config)
    task.setup(config, data)
    return task, data


class PassSpy(nn.Module):
    """A stand-in encoder that keeps the rows of every pass (the positives', then each negative's)."""

    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(dim=4, max_len=MAX_LEN)
        self.anchor = nn.Parameter(torch.zeros(()))
        self.passes: list[torch.Tensor] = []

    def forward(self, tokens, state=None, padding_mask=None):
        self.passes.append(tokens)
        return SimpleNamespace(sentence=torch.zeros(len(tokens), 4) + self.anchor)


def nsp_passes(task, draws: int, negatives: int = 3):
    """For ``draws`` training batches: the positive rows and the negative rows the nsp term builds."""
    term, spy = OBJECTIVES.build("nsp", {"negatives": negatives}), PassSpy()
    term.setup(None, spy)
    batches = task.train_batches()
    for _ in range(draws):
        batch = batches.next_batch()
        spy.passes.clear()
        term(spy, batch, spy(batch.inputs))
        yield spy.passes[0], spy.passes[1:]


def test_negative_pairs_fill_the_row_as_the_positives_do(small_corpus, tmp_path):
    task, _ = pair_task(small_corpus, tmp_path)
    positive, negative = [], []
    for rows, swapped in nsp_passes(task, 60):
        positive += [(rows != PAD_ID).sum(1)] * len(swapped)  # each negative beside its own positive
        negative += [(r != PAD_ID).sum(1) for r in swapped]
    pos, neg = torch.cat(positive).double(), torch.cat(negative).double()
    assert float((pos == neg).double().mean()) > 0.95  # row by row, wherever another row has the words
    full_pos, full_neg = float((pos == MAX_LEN).double().mean()), float((neg == MAX_LEN).double().mean())
    assert abs(full_pos - full_neg) < 0.03, (full_pos, full_neg)  # the share of full rows
    assert abs(float(pos.mean() - neg.mean())) < 0.2, (float(pos.mean()), float(neg.mean()))
    assert abs(float(pos.std() - neg.std())) < 0.2, (float(pos.std()), float(neg.std()))


def test_every_segment_is_whole_words_of_the_text(small_corpus, tmp_path):
    # masked subwords keep themselves: the rows show the text
    task, data = pair_task(small_corpus, tmp_path, "task.replace_mask=0.0", "task.replace_random=0.0")
    stream = inner_subwords(data.sentences["train"]).numpy()
    continuation = data.tokenizer.continuation_table().numpy()
    boundary = np.append(~continuation[stream], True)  # (n + 1,) a word starts here (or the text ends)
    assert continuation[stream].mean() > 0.2  # the text has words of several subwords

    def whole_words(piece: np.ndarray) -> bool:
        """``piece`` occurs in the text starting at a word's start and ending before another's."""
        m = len(piece)
        for p in np.flatnonzero((stream[: len(stream) - m + 1] == piece[0]) & boundary[: len(stream) - m + 1]):
            if boundary[p + m] and np.array_equal(stream[p : p + m], piece):
                return True
        return False

    for rows, swapped in nsp_passes(task, 25):
        for kind, group in (("positive", [rows]), ("negative", swapped)):
            for row in torch.cat(group).numpy():
                real = row[(row != PAD_ID)][1:]  # A [SEP] B [SEP]
                seps = np.flatnonzero(real == SEP_ID)
                first, second = real[: seps[0]], real[seps[0] + 1 : seps[1]]
                assert whole_words(first) and whole_words(second), (kind, row)
                if kind == "positive":
                    assert whole_words(np.concatenate([first, second])), row  # B is the text that follows A


def test_pairs_need_room_for_two_segments():
    from infolm.errors import InfolmError
    from infolm.tasks.masked_lm import MaskedLMConfig

    with pytest.raises(InfolmError, match="at least 5"):
        MaskedLMConfig(max_len=4, pairs=True)
    assert MaskedLMConfig(max_len=5, pairs=True).max_len == 5


def test_a_text_whose_last_row_is_one_subword_gives_no_row_without_a_pair() -> None:
    from infolm.tasks.masked_lm import cut_rows

    flat = torch.arange(10, 10 + 6)  # six one-subword words; rows of at most 8 - 3 = 5 subwords
    continuation = torch.zeros(100, dtype=torch.bool)
    rows = cut_rows(flat, continuation, max_len=8, pairs=True)
    lengths = (rows.tokens != 0).sum(1) - 2
    assert bool((lengths >= 2).all()), lengths  # the lone sixth subword would be a row NSP cannot split
