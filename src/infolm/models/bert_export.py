"""Hugging Face interop: an infolm :class:`Encoder` as a ``transformers`` BERT checkpoint directory.

``export_bert(encoder, directory)`` writes ``config.json`` (a ``BertConfig``) and
``model.safetensors`` with ``BertForMaskedLM`` / ``BertForSequenceClassification`` parameter names;
``BertForMaskedLM.from_pretrained(directory)`` then gives the same logits. No ``transformers``
import is needed to write it. The fused query/key/value matrix is split into BERT's three.

With the run's WordPiece tokenizer it also writes ``tokenizer.json`` and ``tokenizer_config.json``, so that
``AutoTokenizer`` reads raw text into the ids infolm's tasks feed the encoder (``[CLS] A [SEP] (B [SEP])``,
segment 1 from B on). The tokenizer is the run's own pipeline, loaded verbatim
(``PreTrainedTokenizerFast``): ``transformers``' ``BertTokenizer`` would rebuild the normalizer from
``do_lower_case`` (lowercasing a cased vocabulary by default) and could not read ``<unk>`` as ``[UNK]``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from safetensors.torch import save_file
from torch import Tensor, nn

from infolm.data.wordpiece import CLS, MASK, PAD, SEP, UNK, UNK_ALIASES
from infolm.models.encoder import Encoder, EncoderLayer

if TYPE_CHECKING:
    from infolm.data.wordpiece import WordPiece


def bert_state_dict(encoder: Encoder) -> dict[str, Tensor]:
    """The encoder's weights under ``transformers`` BERT names (contiguous copies, nothing shared)."""
    d = encoder.config.dim
    out: dict[str, Tensor] = {
        "bert.embeddings.word_embeddings.weight": encoder.word_embeddings.weight,
        "bert.embeddings.position_embeddings.weight": encoder.position_embeddings.weight,
        "bert.embeddings.token_type_embeddings.weight": encoder.segment_embeddings.weight,
        "bert.embeddings.LayerNorm.weight": encoder.embedding_norm.weight,
        "bert.embeddings.LayerNorm.bias": encoder.embedding_norm.bias,
        "bert.pooler.dense.weight": encoder.pooler.weight,
        "bert.pooler.dense.bias": encoder.pooler.bias,
        "cls.predictions.transform.dense.weight": encoder.mlm_dense.weight,
        "cls.predictions.transform.dense.bias": encoder.mlm_dense.bias,
        "cls.predictions.transform.LayerNorm.weight": encoder.mlm_norm.weight,
        "cls.predictions.transform.LayerNorm.bias": encoder.mlm_norm.bias,
        "cls.predictions.bias": encoder.mlm_bias,
    }
    for i, module in enumerate(encoder.layers):
        layer = cast(EncoderLayer, module)
        prefix = f"bert.encoder.layer.{i}."
        for name, part in zip(("query", "key", "value"), range(3)):
            rows = slice(part * d, (part + 1) * d)
            out[f"{prefix}attention.self.{name}.weight"] = layer.qkv.weight[rows]
            out[f"{prefix}attention.self.{name}.bias"] = layer.qkv.bias[rows]
        pairs: dict[str, nn.Linear | nn.LayerNorm] = {
            "attention.output.dense": layer.attention_out,
            "attention.output.LayerNorm": layer.attention_norm,
            "intermediate.dense": layer.ff_in,
            "output.dense": layer.ff_out,
            "output.LayerNorm": layer.ff_norm,
        }
        for name, part_module in pairs.items():
            out[f"{prefix}{name}.weight"] = part_module.weight
            out[f"{prefix}{name}.bias"] = part_module.bias
    if encoder.classifier is not None:
        out["classifier.weight"] = encoder.classifier.weight
        out["classifier.bias"] = encoder.classifier.bias
    return {k: v.detach().cpu().contiguous().clone() for k, v in out.items()}


def bert_config(encoder: Encoder, pad_id: int = 0) -> dict[str, object]:
    """The ``BertConfig`` fields that describe this encoder."""
    c = encoder.config
    config: dict[str, object] = {
        "architectures": ["BertForSequenceClassification" if c.num_labels else "BertForMaskedLM"],
        "model_type": "bert",
        "vocab_size": encoder.vocab_size,
        "hidden_size": c.dim,
        "num_hidden_layers": c.layers,
        "num_attention_heads": c.heads,
        "intermediate_size": c.ff_dim,
        "hidden_act": "gelu",
        "hidden_dropout_prob": c.dropout,
        "attention_probs_dropout_prob": c.attention_dropout,
        "max_position_embeddings": c.max_len,
        "type_vocab_size": c.segments,
        "initializer_range": c.init_std,
        "layer_norm_eps": c.layer_norm_eps,
        "pad_token_id": pad_id,
        "tie_word_embeddings": True,
    }
    if c.num_labels:
        config["num_labels"] = c.num_labels
    return config


def tokenizer_json(tokenizer: WordPiece) -> dict[str, Any]:
    """The run's tokenizer as a stand-alone ``tokenizers`` file that reads raw text as infolm does:

    - ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` with segments 0 / 1 (the rows of
      ``data/subwords.py``; the encoder's default segments), added by the file's post-processor;
    - the corpus spelling ``<unk>`` read as ``[UNK]`` (infolm replaces it in the raw text before encoding):
      a case-sensitive ``Replace`` ahead of the BERT normalizer, and ``[UNK]`` matched after normalizing.
      So an uncased tokenizer also reads text that normalizes to ``[unk]`` (``[unk]``, ``[Unk]``, ...) as
      ``[UNK]``, where infolm reads ``[``, ``unk``, ``]``: the one text where the two differ.
    """
    spec: dict[str, Any] = json.loads(tokenizer.tokenizer.to_str())
    replaces = [{"type": "Replace", "pattern": {"String": alias}, "content": UNK} for alias in UNK_ALIASES]
    spec["normalizer"] = {"type": "Sequence", "normalizers": [*replaces, spec["normalizer"]]}
    for token in spec["added_tokens"]:
        if token["content"] == UNK:
            token["normalized"] = True
    ids = {name: tokenizer.tokenizer.token_to_id(name) for name in (CLS, SEP)}

    def special(name: str, segment: int) -> dict[str, Any]:
        return {"SpecialToken": {"id": name, "type_id": segment}}

    def sentence(name: str, segment: int) -> dict[str, Any]:
        return {"Sequence": {"id": name, "type_id": segment}}

    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [special(CLS, 0), sentence("A", 0), special(SEP, 0)],
        "pair": [special(CLS, 0), sentence("A", 0), special(SEP, 0), sentence("B", 1), special(SEP, 1)],
        "special_tokens": {name: {"id": name, "ids": [index], "tokens": [name]} for name, index in ids.items()},
    }
    return spec


def tokenizer_config(max_len: int) -> dict[str, object]:
    """``tokenizer_config.json``: the file's pipeline as is (no BERT class rebuilding it), BERT's specials, the
    model's length (``truncation=True`` keeps the first ``max_len - 2`` subwords, as infolm's rows do) and inputs."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": UNK,
        "sep_token": SEP,
        "pad_token": PAD,
        "cls_token": CLS,
        "mask_token": MASK,
        "model_max_length": max_len,
        "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
    }


def _write_json(path: Path, value: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=2, ensure_ascii=False))
    os.replace(tmp, path)


def export_bert(encoder: Encoder, directory: str | Path, pad_id: int = 0, tokenizer: WordPiece | None = None) -> Path:
    """Write ``config.json`` and ``model.safetensors`` into ``directory`` (each file atomically), and with
    ``tokenizer`` ``tokenizer.json`` and ``tokenizer_config.json``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=directory, suffix=".tmp", delete=False) as tmp:
        pass
    save_file(bert_state_dict(encoder), tmp.name, metadata={"format": "pt"})
    os.replace(tmp.name, directory / "model.safetensors")
    _write_json(directory / "config.json", bert_config(encoder, pad_id))
    if tokenizer is not None:
        _write_json(directory / "tokenizer.json", tokenizer_json(tokenizer))
        _write_json(directory / "tokenizer_config.json", tokenizer_config(encoder.config.max_len))
    return directory
