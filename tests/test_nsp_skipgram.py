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
    rows = [[2, 5, 6, 3, 7, 8, 9, 3], [2, 10, 3, 11, 3], [2, 12, 13, 14, 3, 15, 3]]
    out = torch.zeros(3, 8, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def test_negative_pairs_keep_a_and_take_the_next_rows_b():
    swapped = swap_second_sentences(pair_rows(), 1, max_len=32)
    expected = [[2, 5, 6, 3, 11, 3], [2, 10, 3, 15, 3], [2, 12, 13, 14, 3, 7, 8, 9, 3]]
    for row, want in zip(swapped.tolist(), expected):
        assert row[: len(want)] == want and all(t == 0 for t in row[len(want) :])
    cut = swap_second_sentences(pair_rows(), 1, max_len=7)  # row 2 would be 9 long: keeps 6 and its [SEP]
    assert cut[2].tolist() == [2, 12, 13, 14, 3, 7, 3]


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
            [term.score(encoder(swap_second_sentences(tokens, k, 16)).sentence).squeeze(-1) for k in (1, 2)], 1
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
