"""mlm, mlm-nce and dim against brute-force computations of their equations on a tiny encoder."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from infolm.data.masking import IGNORE_INDEX, MLM_INPUTS, SPAN_IDS, mask_batch, span_ids
from infolm.models.encoder import Encoder, EncoderConfig
from infolm.objectives.base import OBJECTIVES, Batch
from infolm.objectives.dim import dim_info_nce, masked_ngrams

VOCAB = 30


def tiny_encoder() -> Encoder:
    torch.manual_seed(0)
    return Encoder(EncoderConfig(dim=16, layers=1, heads=2, ff_dim=32, max_len=32), VOCAB).eval()


def masked_batch(seed: int = 0, scheme: str = "span"):
    rng = np.random.default_rng(seed)
    tokens = torch.from_numpy(rng.integers(5, VOCAB, size=(4, 20)))
    tokens[:, 0], tokens[:, -1] = 2, 3
    maskable = torch.ones_like(tokens, dtype=torch.bool)
    maskable[:, [0, -1]] = False
    word_start = torch.from_numpy(rng.random((4, 20)) < 0.7)
    masked = mask_batch(tokens, maskable, word_start, scheme, 4, VOCAB, rng, rate=0.3)
    batch = Batch(masked.inputs, masked.targets, extras={SPAN_IDS: span_ids(masked.spans, tuple(tokens.shape))})
    return tokens, masked, batch


def test_mlm_is_cross_entropy_at_masked_positions():
    encoder = tiny_encoder()
    _, masked, batch = masked_batch()
    output = encoder(batch.inputs)
    loss = OBJECTIVES.build("mlm", {})(encoder, batch, output).losses["mlm"]
    logits = encoder.mlm_logits(encoder.mlm_features(output.states))
    expected = F.cross_entropy(logits.reshape(-1, VOCAB), batch.targets.reshape(-1), ignore_index=IGNORE_INDEX)
    torch.testing.assert_close(loss, expected)


def test_mlm_beside_a_task_loss_reads_its_own_masked_copy():
    encoder = tiny_encoder()
    tokens, masked, batch = masked_batch()
    side = Batch(tokens, masked.targets, extras={MLM_INPUTS: masked.inputs})
    term = OBJECTIVES.build("mlm", {})
    torch.testing.assert_close(
        term(encoder, side, encoder(tokens)).losses["mlm"], term(encoder, batch, encoder(batch.inputs)).losses["mlm"]
    )


def test_mlm_nce_with_batch_negatives_is_eq_1_over_the_other_rows_masked_words():
    encoder = tiny_encoder()
    _, masked, batch = masked_batch(1, "token")
    output = encoder(batch.inputs)
    loss = OBJECTIVES.build("mlm-nce", {})(encoder, batch, output).losses["mlm-nce"]
    logits = encoder.mlm_logits(encoder.mlm_features(output.states))  # (B, T, V)
    terms = []
    for b, t in torch.nonzero(masked.masked).tolist():
        positive = int(batch.targets[b, t])
        negatives = [int(batch.targets[c, s]) for c, s in torch.nonzero(masked.masked).tolist() if c != b]
        scores = logits[b, t, [positive, *negatives]]
        terms.append(torch.logsumexp(scores, 0) - scores[0])
    torch.testing.assert_close(loss, torch.stack(terms).mean(), atol=1e-5, rtol=1e-5)


def test_mlm_nce_with_unigram_negatives_is_eq_1_over_the_draws():
    encoder = tiny_encoder()
    _, masked, batch = masked_batch(2)
    term = OBJECTIVES.build("mlm-nce", {"negatives": "unigram", "num_negatives": 7, "unigram_power": 0.5})
    counts = torch.arange(VOCAB, dtype=torch.float)
    term.set_unigram_counts(counts)
    output = encoder(batch.inputs)
    torch.manual_seed(9)
    loss = term(encoder, batch, output).losses["mlm-nce"]
    torch.manual_seed(9)
    draws = torch.multinomial(counts.sqrt() / counts.sqrt().sum(), 7, replacement=True).tolist()
    logits = encoder.mlm_logits(encoder.mlm_features(output.states))
    terms = []
    for b, t in torch.nonzero(masked.masked).tolist():
        scores = logits[b, t, [int(batch.targets[b, t]), *draws]]
        terms.append(torch.logsumexp(scores, 0) - scores[0])
    torch.testing.assert_close(loss, torch.stack(terms).mean(), atol=1e-5, rtol=1e-5)


def test_masked_ngrams_are_the_masked_spans():
    tokens, masked, batch = masked_batch(3)
    ngrams = masked_ngrams(batch.extras[SPAN_IDS], batch.targets)
    assert len(ngrams.owner) == len(masked.spans)
    for s, (row, start, end) in enumerate(masked.spans.tolist()):
        assert int(ngrams.owner[s]) == row
        assert ngrams.tokens[s, ngrams.real[s]].tolist() == tokens[row, start:end].tolist()
        assert int(ngrams.tokens[s, 0]) == 2 and int(ngrams.tokens[s, end - start + 1]) == 3


def test_dim_info_nce_against_a_loop():
    g = torch.Generator().manual_seed(4)
    sentence, ngram = torch.randn(3, 5, generator=g), torch.randn(7, 5, generator=g)
    owner = torch.tensor([0, 0, 1, 1, 1, 2, 2])
    got = dim_info_nce(sentence[owner], ngram, torch.arange(7), owner)
    for s in range(7):
        candidates = [s] + [j for j in range(7) if owner[j] != owner[s]]
        scores = torch.stack([sentence[owner[s]] @ ngram[j] for j in candidates])
        torch.testing.assert_close(got[s], torch.logsumexp(scores, 0) - scores[0])


def span_batch(rows: list[tuple[list[int], list[tuple[int, int]]]]) -> Batch:
    """Rows of subwords with the spans (start, end) masked whole, as the task lays them out for dim."""
    width = max(len(tokens) for tokens, _ in rows)
    originals = torch.zeros(len(rows), width, dtype=torch.long)
    ids = torch.full_like(originals, -1)
    for i, (tokens, spans) in enumerate(rows):
        originals[i, : len(tokens)] = torch.tensor(tokens)
        for k, (start, end) in enumerate(spans):
            ids[i, start:end] = k
    masked = ids >= 0
    return Batch(originals.masked_fill(masked, 4), originals.masked_fill(~masked, IGNORE_INDEX), extras={SPAN_IDS: ids})


def test_dim_an_identical_ngram_of_another_sentence_is_not_a_negative():
    """Two sentences masking the same n-gram: each one's only other candidate is its copy, so nothing is
    left to contrast and the loss is 0 (counting the copy, whose encoding equals the positive's, gives ln 2)."""
    encoder = tiny_encoder()
    batch = span_batch([([2, 7, 8, 9, 3], [(1, 3)]), ([2, 10, 7, 8, 11, 12, 3], [(2, 4)])])
    loss = OBJECTIVES.build("dim", {})(encoder, batch, encoder(batch.inputs)).losses["dim"]
    torch.testing.assert_close(loss, torch.tensor(0.0))


def test_dim_negatives_are_the_other_sentences_ngrams_but_copies_of_the_positive():
    encoder = tiny_encoder()
    rows = [
        ([2, 7, 8, 9, 12, 3], [(1, 3), (4, 5)]),
        ([2, 7, 8, 3, 13, 14, 3], [(1, 3), (4, 6)]),
        ([2, 12, 15, 16, 3], [(1, 2), (2, 4)]),
        ([2, 17, 7, 8, 9, 3], [(2, 5)]),  # 7 8 9 contains 7 8 but is not a copy of it
    ]
    batch = span_batch(rows)
    output = encoder(batch.inputs)
    loss = OBJECTIVES.build("dim", {})(encoder, batch, output).losses["dim"]
    ngrams = [(row, tokens[start:end]) for row, (tokens, spans) in enumerate(rows) for start, end in spans]
    encoded = [encoder(torch.tensor([[2, *ngram, 3]])).sentence[0] for _, ngram in ngrams]
    terms = []
    for s, (row, ngram) in enumerate(ngrams):
        candidates = [s] + [j for j, (other, words) in enumerate(ngrams) if other != row and words != ngram]
        scores = torch.stack([output.sentence[row] @ encoded[j] for j in candidates])
        terms.append(torch.logsumexp(scores, 0) - scores[0])
    torch.testing.assert_close(loss, torch.stack(terms).mean(), atol=1e-5, rtol=1e-5)


def test_dim_term_trains_the_encoder_and_both_poolings_run():
    encoder = tiny_encoder().train()
    _, _, batch = masked_batch(5)
    for pooling in ("cls", "mean"):
        encoder.zero_grad()
        terms = OBJECTIVES.build("dim", {"ngram_pooling": pooling})(encoder, batch, encoder(batch.inputs))
        terms.losses["dim"].backward()
        assert float(encoder.layers[0].qkv.weight.grad.abs().sum()) > 0


class InputSpy(nn.Module):
    """A stand-in encoder whose sentence vector is its input row (zero-padded to 32): whatever is
    compared with the n-grams shows which subwords its pass read. Counts its passes."""

    def __init__(self) -> None:
        super().__init__()
        self.passes: list[torch.Tensor] = []

    def forward(self, tokens, state=None, padding_mask=None):
        self.passes.append(tokens)
        sentence = F.pad(tokens, (0, 32 - tokens.size(1))).float()
        return SimpleNamespace(sentence=sentence, states=sentence[..., None].expand(-1, -1, 4))


def test_dim_query_sees_no_subword_of_its_spans(monkeypatch):
    import infolm.objectives.dim as dim

    queries = []

    def spy_info_nce(query, ngram, positive, owner, content=None):
        queries.append((query, owner[positive]))  # each query's vector and the sentence it belongs to
        return query[:, 0] * 0.0

    monkeypatch.setattr(dim, "dim_info_nce", spy_info_nce)
    term, spy = OBJECTIVES.build("dim", {}), InputSpy()
    shown = 0  # span subwords the MLM input leaves as they are (BERT's 10% "unchanged", Sec. 3.2)
    for seed in range(200):
        tokens, masked, batch = masked_batch(seed)
        queries.clear()
        term(spy, batch, spy(batch.inputs))
        vectors, rows = queries[0]
        in_span = (batch.extras[SPAN_IDS] >= 0)[rows]  # per query, its sentence's span subwords
        query = vectors[:, : tokens.size(1)].long()  # the input of the pass g_ω(x̂_{i:j}) came from
        assert bool((query[in_span] == 4).all()), seed  # every span subword reads [MASK]
        assert torch.equal(query[~in_span], tokens[rows][~in_span])  # the rest of the sentence as it is
        in_span = batch.extras[SPAN_IDS] >= 0
        shown += int((batch.inputs[in_span] == tokens[in_span]).sum())
    assert shown > 0  # the MLM input still keeps BERT's 80/10/10


def test_dim_query_reuses_the_mlm_pass_when_every_masked_subword_reads_mask():
    rng = np.random.default_rng(0)
    tokens = torch.from_numpy(rng.integers(5, VOCAB, size=(4, 20)))
    tokens[:, 0], tokens[:, -1] = 2, 3
    maskable = (tokens != 2) & (tokens != 3)
    masked = mask_batch(tokens, maskable, maskable, "span", 4, VOCAB, rng, rate=0.3, probs=(1.0, 0.0))
    batch = Batch(masked.inputs, masked.targets, extras={SPAN_IDS: span_ids(masked.spans, (4, 20))})
    spy = InputSpy()
    OBJECTIVES.build("dim", {})(spy, batch, spy(batch.inputs))
    assert len(spy.passes) == 2  # the MLM pass and the n-grams' pass: no second pass over the sentences


ENCODER_TERMS = [n for n in OBJECTIVES.names() if "encoder" in getattr(OBJECTIVES.get(n).factory, "protocols", ())]


def contract_batch() -> Batch:
    """Rows [CLS] A [SEP] B [SEP] with span-masked subwords, span ids and labels."""
    rng = np.random.default_rng(7)
    tokens = torch.from_numpy(rng.integers(5, VOCAB, size=(4, 16)))
    tokens[:, 0], tokens[:, 7], tokens[:, -1] = 2, 3, 3
    maskable = (tokens != 2) & (tokens != 3)
    masked = mask_batch(tokens, maskable, maskable.clone(), "span", 4, VOCAB, rng, rate=0.3)
    extras = {SPAN_IDS: span_ids(masked.spans, (4, 16))}
    return Batch(masked.inputs, masked.targets, labels=torch.tensor([0, 1, 1, 0]), extras=extras)


def test_every_encoder_term_gives_a_finite_loss_with_a_gradient():
    from infolm.data.subwords import EncoderData, SubwordSentences
    from infolm.data.vocab import Vocab

    assert {"mlm", "mlm-nce", "dim", "nsp", "skipgram-nce", "classification", "imm-mlm"} <= set(ENCODER_TERMS)
    sentences = SubwordSentences.from_ids([[5, 6, 7, 8, 9], [6, 9, 5, 6, 10, 11], [7, 5, 6], [12, 6, 9]])
    data = EncoderData(Vocab([str(i) for i in range(VOCAB)]), None, {"train": sentences})
    for name in ENCODER_TERMS:
        torch.manual_seed(0)
        encoder = Encoder(EncoderConfig(dim=16, layers=1, heads=2, ff_dim=32, max_len=32, num_labels=2), VOCAB)
        term = OBJECTIVES.build(name, {})
        term.setup(data, encoder)
        batch = contract_batch()
        terms = term(encoder, batch, encoder(batch.inputs))
        loss = terms.total()
        assert loss.dim() == 0 and torch.isfinite(loss), name
        loss.backward()
        # skip-gram's context table starts at zero (word2vec), so its first gradient is the table's own
        grads = [p.grad for p in [*encoder.parameters(), *term.parameters()] if p.grad is not None]
        assert grads and any(float(g.abs().sum()) > 0 for g in grads), name
