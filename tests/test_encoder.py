"""BERT-style encoder: Hugging Face round trip, padding, segments, bad input."""

from __future__ import annotations

import pytest
import torch

from infolm.errors import InfolmError
from infolm.models.bert_export import export_bert
from infolm.models.encoder import Encoder, EncoderConfig

VOCAB = 40


def tiny_encoder(**overrides) -> Encoder:
    settings = {"dim": 16, "layers": 2, "heads": 2, "ff_dim": 32, "max_len": 24}
    settings.update(overrides)
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(**settings), vocab_size=VOCAB)
    with torch.no_grad():  # non-zero biases and norms, so that a misplaced parameter shows
        for p in encoder.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return encoder.eval()


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(5, VOCAB, (3, 10), generator=g)
    segments = torch.zeros_like(tokens)
    segments[:, 6:] = 1
    real = torch.ones_like(tokens, dtype=torch.bool)
    real[1, 7:] = False
    real[2, 3:] = False
    return tokens, segments, real


@pytest.mark.parametrize("num_labels", [0, 3])
def test_saved_encoder_loads_in_transformers_with_equal_logits(tmp_path, num_labels):
    from transformers import BertForMaskedLM, BertForSequenceClassification

    encoder = tiny_encoder(num_labels=num_labels)
    export_bert(encoder, tmp_path)
    tokens, segments, real = batch()
    with torch.no_grad():
        out = encoder(tokens, None, segments, real)
        ours = encoder.mlm_logits(encoder.mlm_features(out.states))
        theirs = BertForMaskedLM.from_pretrained(tmp_path).eval()(
            input_ids=tokens, token_type_ids=segments, attention_mask=real.long()
        )
    torch.testing.assert_close(ours[real], theirs.logits[real], atol=1e-5, rtol=1e-5)
    if num_labels:
        with torch.no_grad():
            hf = BertForSequenceClassification.from_pretrained(tmp_path).eval()
            theirs_cls = hf(input_ids=tokens, token_type_ids=segments, attention_mask=real.long()).logits
        torch.testing.assert_close(encoder.classify(out.sentence), theirs_cls, atol=1e-5, rtol=1e-5)


def test_padding_leaves_real_tokens_unchanged():
    encoder = tiny_encoder()
    tokens, segments, _ = batch()
    short = encoder(tokens[:, :6], None, segments[:, :6]).states
    padded_tokens = torch.cat([tokens[:, :6], torch.zeros(3, 4, dtype=torch.long)], dim=1)
    real = torch.zeros(3, 10, dtype=torch.bool)
    real[:, :6] = True
    padded = encoder(padded_tokens, None, torch.zeros_like(padded_tokens), real).states
    torch.testing.assert_close(padded[:, :6], short, atol=1e-5, rtol=1e-5)


def test_segments_and_padding_default_to_the_bert_layout_of_the_tokens():
    """[CLS] A [SEP] B [SEP] [PAD]: segment 1 after the first [SEP]; [PAD] gets no attention."""
    encoder = tiny_encoder()
    tokens, segments, real = batch()
    tokens[:, 0], tokens[:, 5], tokens[0, 9], tokens[1, 6] = 2, 3, 3, 3
    tokens = tokens.masked_fill(~real, 0)
    segments = torch.where(real, segments, 0)
    segments[:, 5] = 0
    segments[2] = 0  # its B is all padding
    explicit = encoder(tokens, None, segments, real).states
    torch.testing.assert_close(encoder(tokens).states[real], explicit[real])
    assert not torch.allclose(encoder(tokens, None, torch.zeros_like(segments), real).states[real], explicit[real])


def test_mlm_logits_of_selected_types_equal_full_logits():
    encoder = tiny_encoder()
    features = encoder.mlm_features(encoder(batch()[0]).states)
    types = torch.tensor([3, 7, 39])
    torch.testing.assert_close(encoder.mlm_logits(features, types), encoder.mlm_logits(features)[..., types])


def test_bad_settings_and_inputs_are_one_line_errors():
    with pytest.raises(InfolmError, match="divisible"):
        EncoderConfig(dim=10, heads=4)
    with pytest.raises(InfolmError, match="num_labels"):
        EncoderConfig(num_labels=1)
    encoder = tiny_encoder()
    with pytest.raises(InfolmError, match="exceeds model.max_len=24"):
        encoder(torch.zeros(1, 25, dtype=torch.long))
    with pytest.raises(InfolmError, match="no classification head"):
        encoder.classify(torch.zeros(1, 16))


def test_weight_decay_leaves_out_every_bias_and_layernorm_weight():
    """Devlin et al.'s optimizer decays neither biases nor LayerNorm weights (the MLM output bias
    included); embeddings and dense weights decay. A model that names no exemptions keeps one group."""
    from infolm.config import OptimConfig
    from infolm.optim.factory import build_optimizers
    from tests.conftest import tiny_model

    encoder = tiny_encoder(num_labels=2)
    (optimizer,) = build_optimizers(OptimConfig(name="adamw", lr=1e-3, weight_decay=0.01), encoder, [])
    names = {id(p): name for name, p in encoder.named_parameters()}
    by_decay = {g["weight_decay"]: {names[id(p)] for p in g["params"]} for g in optimizer.param_groups}
    assert set(by_decay) == {0.01, 0.0} and len(optimizer.param_groups) == 2
    exempt = {name for name in names.values() if name.endswith("bias") or "norm" in name}
    assert by_decay[0.0] == exempt
    assert by_decay[0.01] == set(names.values()) - exempt
    assert {"mlm_bias", "embedding_norm.weight", "layers.1.ff_norm.weight", "classifier.bias"} <= exempt
    assert {"word_embeddings.weight", "layers.0.qkv.weight", "pooler.weight"} <= by_decay[0.01]
    lstm = tiny_model("lstm", VOCAB)
    (plain,) = build_optimizers(OptimConfig(name="sgd", lr=1.0, weight_decay=1e-6), lstm, [])
    assert len(plain.param_groups) == 1 and plain.param_groups[0]["weight_decay"] == 1e-6
