"""An exported encoder read by ``transformers`` alone from raw text: the exported tokenizer gives infolm's
ids, and the exported model gives infolm's masked-LM and classification logits for them."""

from __future__ import annotations

import pytest
import torch

from infolm.data.subwords import SEP_ID, SubwordSentences
from infolm.data.wordpiece import WordPiece, WordPieceConfig
from infolm.models.bert_export import export_bert
from infolm.models.encoder import Encoder, EncoderConfig

transformers = pytest.importorskip("transformers")

TRAIN_LINES = [
    "The cat sat on the mat .",
    "The Dog sat on the cat , and the cat ran !",
    "A dog ran to the Mat ; the cats sat .",
    "She said the dogs didn't run .",
] * 2
TEXTS = [
    "The cat sat on the mat.",
    "THE DOG didn't sit; it ran!",  # casing, an apostrophe, punctuation
    "A zebra grazed (quietly), the Ωmega cat.",  # words outside the vocabulary; a character never seen
    "Café naïve dogs <unk> ran?",  # accents; the corpus spelling of the unknown word
]
PAIR = ("The cat ran.", "A DOG sat!")


def export_with_text(tmp_path, lowercase: bool, num_labels: int) -> tuple[Encoder, WordPiece]:
    """A tiny random encoder and a WordPiece of the training lines, exported as ``infolm export`` does."""
    tokenizer = WordPiece.train(TRAIN_LINES, WordPieceConfig(vocab_size=60, min_frequency=1, lowercase=lowercase))
    torch.manual_seed(0)
    config = EncoderConfig(dim=16, layers=2, heads=2, ff_dim=32, max_len=32, num_labels=num_labels)
    encoder = Encoder(config, vocab_size=len(tokenizer))
    with torch.no_grad():  # non-zero biases and norms, so that a misplaced parameter shows
        for p in encoder.parameters():
            p.add_(0.05 * torch.randn_like(p))
    export_bert(encoder, tmp_path, tokenizer=tokenizer)
    return encoder.eval(), tokenizer


def infolm_rows(tokenizer: WordPiece, texts: list[str]) -> SubwordSentences:
    """infolm's own reading of raw text: WordPiece ids as [CLS] s [SEP] [PAD]... rows (as its tasks build them)."""
    return SubwordSentences.from_ids(tokenizer.encode(texts))


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
@pytest.mark.parametrize("num_labels", [0, 2], ids=["masked-lm", "classifier"])
def test_raw_text_through_the_exported_directory_gives_infolms_ids_and_logits(
    tmp_path, monkeypatch, lowercase, num_labels
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoTokenizer

    encoder, tokenizer = export_with_text(tmp_path, lowercase, num_labels)
    rows = infolm_rows(tokenizer, TEXTS)
    real = rows.real()
    assert bool((rows.rows[real] == tokenizer.unk_id).any())  # the texts do reach [UNK]

    hf_tokenizer = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    inputs = hf_tokenizer(TEXTS, padding=True, return_tensors="pt")
    assert inputs["input_ids"].tolist() == rows.rows.tolist()  # [CLS] s [SEP], then [PAD] (id 0)
    assert torch.equal(inputs["attention_mask"].bool(), real)
    assert torch.equal(inputs["token_type_ids"], torch.zeros_like(rows.rows))

    with torch.no_grad():
        out = encoder(rows.rows, None, None, real)
        if num_labels:
            hf = AutoModelForSequenceClassification.from_pretrained(tmp_path, local_files_only=True).eval()
            ours, theirs = encoder.classify(out.sentence), hf(**inputs).logits
        else:
            hf = AutoModelForMaskedLM.from_pretrained(tmp_path, local_files_only=True).eval()
            ours, theirs = encoder.mlm_logits(encoder.mlm_features(out.states))[real], hf(**inputs).logits[real]
    assert ours.shape == theirs.shape
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)

    # a sentence pair: [CLS] A [SEP] B [SEP], segment 1 from B to its [SEP] (the encoder's own default)
    pair = hf_tokenizer(*PAIR, return_tensors="pt")
    first, second = tokenizer.encode(list(PAIR))
    expected = [tokenizer.cls_id, *first, SEP_ID, *second, SEP_ID]
    assert pair["input_ids"][0].tolist() == expected
    assert pair["token_type_ids"][0].tolist() == [0] * (len(first) + 2) + [1] * (len(second) + 1)
    with torch.no_grad():
        ids = torch.tensor([expected])
        pair_out = encoder(ids)
        if num_labels:
            ours, theirs = encoder.classify(pair_out.sentence), hf(**pair).logits
        else:
            ours, theirs = encoder.mlm_logits(encoder.mlm_features(pair_out.states)), hf(**pair).logits
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)


def test_the_exported_tokenizer_file_alone_adds_cls_and_sep(tmp_path):
    """``tokenizers`` (no ``transformers`` class around it) reads the exported file as infolm's rows."""
    from tokenizers import Tokenizer

    _, tokenizer = export_with_text(tmp_path, lowercase=True, num_labels=0)
    ids = [e.ids for e in Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode_batch(TEXTS)]
    rows = infolm_rows(tokenizer, TEXTS)
    assert ids == [row[:length].tolist() for row, length in zip(rows.rows, rows.lengths)]
