"""Hugging Face interop: an infolm :class:`Encoder` as a ``transformers`` BERT checkpoint directory.

``export_bert(encoder, directory)`` writes ``config.json`` (a ``BertConfig``) and
``model.safetensors`` with ``BertForMaskedLM`` / ``BertForSequenceClassification`` parameter names;
``BertForMaskedLM.from_pretrained(directory)`` then gives the same logits. No ``transformers``
import is needed to write it. The fused query/key/value matrix is split into BERT's three.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import cast

from safetensors.torch import save_file
from torch import Tensor, nn

from infolm.models.encoder import Encoder, EncoderLayer


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


def export_bert(encoder: Encoder, directory: str | Path, pad_id: int = 0) -> Path:
    """Write ``config.json`` and ``model.safetensors`` into ``directory`` (each file atomically)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=directory, suffix=".tmp", delete=False) as tmp:
        pass
    save_file(bert_state_dict(encoder), tmp.name, metadata={"format": "pt"})
    os.replace(tmp.name, directory / "model.safetensors")
    config_tmp = directory / ".config.json.tmp"
    config_tmp.write_text(json.dumps(bert_config(encoder, pad_id), indent=2))
    os.replace(config_tmp, directory / "config.json")
    return directory
