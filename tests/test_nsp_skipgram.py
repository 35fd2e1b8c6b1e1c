"""NSP (local NCE, global InfoNCE) and skip-gram NCE against their definitions."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from infolm.data.subwords import EncoderData, SubwordSentences
from infolm.data.vocab import Vocab
from infolm.models.encoder import Encoder, EncoderConfig
from infolm.objectives.base import OBJECTIVES, Batch
from infolm.objectives.nsp import swap_second_sentences
from infolm.objectives.skipgram_nce import context_pairs

VOCAB = 30


def pair_rows() -> torch.Tensor:
    rows = [[2, 5, 6, 3, 7, 8, 9, 3], [2, 10, 3, 11, 3], [2, 12, 13, 14, 3, 15, 16, 3]]
    out = torch.zeros(3, 8, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def assert_rows(got: torch.Tensor, expected: list[list[int]]) -> None:
    for row, want in zip(got.tolist(), expected):
        assert row[: len(want)] == want and all(t == 0 for t in row[len(want) :])


def test_negative_pairs_keep_a_and_take_whole_words_as_long_as_their_own_b():
    tokens = pair_rows()
    word_start = tokens != 8  # 8 continues the word 7 begins
    # row 0 needs 3 subwords: row 1 has 2, row 2 gives its last 3; row 2 needs 2: [8, 9] would start inside a word
    expected = [[2, 5, 6, 3, 14, 15, 16, 3], [2, 10, 3, 16, 3], [2, 12, 13, 14, 3, 7, 8, 3]]
    assert_rows(swap_second_sentences(tokens, 1, word_start), expected)
    expected[2] = [2, 12, 13, 14, 3, 8, 9, 3]  # every subword a word
    assert_rows(swap_second_sentences(tokens, 1), expected)
    # two rows: row 1's text is too short for row 0, which takes the longest shorter piece
    assert_rows(swap_second_sentences(tokens[:2], 1, word_start[:2]), [[2, 5, 6, 3, 10, 11, 3], [2, 10, 3, 9, 3]])
    one_word = torch.tensor([[2, 5, 3, 6, 3, 0, 0], [2, 7, 8, 3, 8, 8, 3]])  # row 1 is one word of 4 subwords
    assert_rows(swap_second_sentences(one_word, 1, one_word != 8), [[2, 5, 3, 7, 3], [2, 7, 8, 3, 5, 6, 3]])


def test_nsp_forms_are_local_nce_and_infonce_of_the_scores():
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(dim=16, layers=1, heads=2, ff_dim=32, max_len=16), VOCAB).eval()
    tokens = pair_rows()
    batch = Batch(tokens, torch.full_like(tokens, -100))
    output = encoder(tokens)
    for form in ("local", "global"):
        term = OBJECTIVES.build("nsp", {"form": form, "negatives": 2})
        term.setup(None, encoder)
        loss = term(encoder, batch, output).losses["nsp"]
        pos = term.score(output.sentence).squeeze(-1)
        neg = torch.stack(
            [term.score(encoder(swap_second_sentences(tokens, k)).sentence).squeeze(-1) for k in (1, 2)], 1
        )
        if form == "local":
            expected = -(F.logsigmoid(pos) + F.logsigmoid(-neg).sum(1)).mean()
        else:
            expected = -F.log_softmax(torch.cat([pos[:, None], neg], 1), 1)[:, 0].mean()
        torch.testing.assert_close(loss, expected)


def test_context_pairs_are_every_pair_within_the_window():
    words = torch.tensor([[5, 6, 7, 8, 0], [9, 10, 11, 0, 0]])
    valid = words > 0
    centers, contexts = context_pairs(words, valid, window=2)
    got = sorted(zip(centers.tolist(), contexts.tolist()))
    expected = []
    for row in words.tolist():
        real = [w for w in row if w]
        expected += [(real[i], real[j]) for i in range(len(real)) for j in range(len(real)) if 0 < abs(i - j) <= 2]
    assert got == sorted(expected)


def test_skipgram_infonce_and_negative_sampling_over_the_same_draws():
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(dim=8, layers=1, heads=2, ff_dim=16, max_len=16), VOCAB)
    rows = SubwordSentences.from_ids([[5, 6, 7, 8], [9, 10, 5]])
    data = EncoderData(Vocab([str(i) for i in range(VOCAB)]), None, {"train": rows})
    batch = Batch(rows.rows, torch.full_like(rows.rows, -100), padding_mask=rows.real())
    for form in ("infonce", "negative-sampling"):
        term = OBJECTIVES.build("skipgram-nce", {"form": form, "window": 2, "negatives": 3})
        term.setup(data, encoder)
        torch.nn.init.normal_(term.context.weight)
        torch.manual_seed(5)
        loss = term(encoder, batch, None).losses["skipgram-nce"]
        centers, contexts = context_pairs(rows.rows, rows.rows >= 5, 2)
        torch.manual_seed(5)
        draws = torch.multinomial(term.proposal, len(centers) * 3, replacement=True).view(-1, 3)
        g = encoder.word_embeddings(centers)
        pos = (g * term.context(contexts)).sum(-1)
        neg = torch.einsum("nd,nkd->nk", g, term.context(draws))
        if form == "infonce":
            expected = -F.log_softmax(torch.cat([pos[:, None], neg], 1), 1)[:, 0].mean()
        else:
            expected = -(F.logsigmoid(pos) + F.logsigmoid(-neg).sum(1)).mean()
        torch.testing.assert_close(loss, expected)
        assert bool((term.proposal[:5] == 0).all())  # specials are never negatives
