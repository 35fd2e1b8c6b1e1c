"""IMM for encoders (IMM paper App. D.2): future masking, the follower index, the k-sample loss."""

from __future__ import annotations

import torch

from infolm.data.subwords import SEP_ID, EncoderData, SubwordSentences
from infolm.data.vocab import Vocab
from infolm.data.wordpiece import SPECIALS
from infolm.models.encoder import Encoder, EncoderConfig
from infolm.objectives.base import OBJECTIVES, Batch
from infolm.objectives.imm_mlm import MASK_ID, FollowerIndex, future_masked, real_subword_target

VOCAB = 20
TRAIN = [[5, 6, 7, 8], [6, 9, 5, 6, 10, 11], [7, 5, 6], [12, 6, 9]]


def test_the_imm_branch_hides_every_later_subword():
    sentences = SubwordSentences.from_ids(TRAIN)
    rows = torch.tensor([1, 1, 0, 2])
    places = torch.tensor([0, 3, 2, 1])  # [CLS] is place 0
    masked = future_masked(sentences, rows, places)
    for n, (row, place) in enumerate(zip(rows.tolist(), places.tolist())):
        length = int(sentences.lengths[row])
        original = sentences.rows[row]
        assert torch.equal(masked[n, : place + 1], original[: place + 1])  # the history is kept
        assert bool((masked[n, place + 1 : length - 1] == MASK_ID).all())  # the word and all later words
        assert torch.equal(masked[n, length - 1 :], original[length - 1 :])  # [SEP] and padding stay


def test_follower_index_samples_occurrences_followed_by_a_real_subword():
    sentences = SubwordSentences.from_ids(TRAIN)
    index = FollowerIndex(sentences, VOCAB)
    assert int(index.counts[6]) == 4  # followed by a subword in rows 0, 1 (twice) and 3, not at the end of row 2
    contexts = torch.tensor([6, 5, 2])
    rows, places = index.sample(contexts, 200)
    assert torch.equal(sentences.rows[rows, places], contexts.expand(200, -1))
    assert bool((places + 1 <= sentences.lengths[rows] - 2).all())


def test_imm_loss_is_the_k_sample_induced_cross_entropy_of_eq_15():
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(dim=16, layers=1, heads=2, ff_dim=32, max_len=16), VOCAB)
    sentences = SubwordSentences.from_ids(TRAIN)
    data = EncoderData(Vocab([str(i) for i in range(VOCAB)]), None, {"train": sentences})
    term = OBJECTIVES.build("imm-mlm", {"k": 3, "sample_chunk": 1})
    term.setup(data, encoder)
    batch_rows = SubwordSentences.from_ids([[5, 6, 9], [6, 7]])
    batch = Batch(batch_rows.rows, batch_rows.rows, padding_mask=batch_rows.real())
    output = encoder(batch.inputs)
    torch.manual_seed(1)
    loss = term(encoder, batch, output).losses["imm-mlm"]
    loss.backward()
    crosstalk_grad = encoder.layers[0].qkv.weight.grad.clone()
    # by hand: locations (row, t) -> previous subword; sample like the term; one pass per sample, unpadded
    contexts = torch.tensor([2, 5, 6, 2, 6])  # [CLS] 5 6 9 / [CLS] 6 7: the subword before each location
    assert int(term._locations(batch).numel()) == 5
    torch.manual_seed(1)
    rows, places = term.index.sample(contexts, 3)
    encoder.zero_grad()
    target = real_subword_target(term.restricted.next_token_distribution(contexts[:, None]))
    probs = torch.zeros(5, VOCAB)
    encoder.eval()
    for i in range(3):
        for p in range(5):
            length = int(sentences.lengths[rows[i, p]])
            tokens = future_masked(sentences, rows[i, p : p + 1], places[i, p : p + 1])[:, :length]
            state = encoder(tokens).states[0, int(places[i, p]) + 1]
            probs[p] += torch.softmax(encoder.mlm_logits(encoder.mlm_features(state)), -1) / 3
    expected = -(target * probs.log()).sum(-1).mean()
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)
    expected.backward()
    torch.testing.assert_close(crosstalk_grad, encoder.layers[0].qkv.weight.grad, atol=1e-5, rtol=1e-4)


def test_imm_target_has_no_mass_on_special_tokens_and_sums_to_one(monkeypatch):
    """A location is always a real subword (App. D.2's masked word between [CLS] and [SEP]): the bigram's
    mass on [PAD] [UNK] [CLS] [SEP] [MASK] (the end of a sentence, smoothing) is moved, in proportion, onto
    the real subwords."""
    import infolm.objectives.imm_mlm as imm_mlm

    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(dim=16, layers=1, heads=2, ff_dim=32, max_len=16), VOCAB)
    data = EncoderData(Vocab([str(i) for i in range(VOCAB)]), None, {"train": SubwordSentences.from_ids(TRAIN)})
    term = OBJECTIVES.build("imm-mlm", {"k": 2})
    term.setup(data, encoder)
    seen = []

    def keep_target(target, log_q, weights=None):
        seen.append(target)
        return log_q.sum()

    monkeypatch.setattr(imm_mlm, "induced_cross_entropy", keep_target)
    batch_rows = SubwordSentences.from_ids([[5, 6, 9], [6, 7, 8]])
    batch = Batch(batch_rows.rows, batch_rows.rows, padding_mask=batch_rows.real())
    term(encoder, batch, encoder(batch.inputs))
    (target,) = seen
    contexts = term._locations(batch)
    bigram = term.restricted.next_token_distribution(contexts[:, None])  # (P, V)
    assert float(bigram[:, SEP_ID].min()) > 0  # the sentence's end: the mass to move
    assert bool((target[:, : len(SPECIALS)] == 0).all())
    torch.testing.assert_close(target.sum(-1), torch.ones(len(contexts)))
    real = bigram[:, len(SPECIALS) :]
    torch.testing.assert_close(target[:, len(SPECIALS) :], real / real.sum(-1, keepdim=True))
