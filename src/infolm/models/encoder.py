"""A BERT-style bidirectional Transformer encoder (Devlin et al.; the encoder g_ω of Kong et al.).

Post-LayerNorm blocks as in BERT: word + position + segment embeddings, LayerNorm; per layer
self-attention (``scaled_dot_product_attention`` with a padding mask) and a GELU feed-forward, each
followed by dropout, a residual and LayerNorm. Heads: the MLM transform (dense, GELU, LayerNorm) whose
output meets the word embeddings (tied) plus a per-type bias, and the pooler (dense, tanh on [CLS]).
The layout maps one to one onto ``transformers``' ``BertForMaskedLM`` (see ``models/bert_export.py``).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from infolm.data.wordpiece import PAD, SEP, SPECIALS
from infolm.errors import InfolmError
from infolm.models.base import register_model

PAD_ID, SEP_ID = SPECIALS.index(PAD), SPECIALS.index(SEP)  # fixed ids of the WordPiece vocabulary


@dataclasses.dataclass
class EncoderConfig:
    dim: int = 768  # hidden size (BERT-base: 768)
    layers: int = 12  # Transformer blocks (BERT-base: 12)
    heads: int = 12  # attention heads; dim must be divisible by heads (BERT-base: 12)
    ff_dim: int = 3072  # feed-forward ("intermediate") width (BERT-base: 4 x dim)
    max_len: int = 512  # learned positions: the longest input, [CLS] and [SEP] included (BERT: 512)
    segments: int = 2  # segment ("token type") embeddings: sentence A / sentence B (BERT: 2)
    dropout: float = 0.1  # dropout on embeddings and after each sub-layer (BERT: 0.1)
    attention_dropout: float = 0.1  # dropout on attention probabilities (BERT: 0.1)
    layer_norm_eps: float = 1e-12  # LayerNorm epsilon (BERT: 1e-12)
    init_std: float = 0.02  # std of the normal initialisation of weights and embeddings (BERT: 0.02)
    num_labels: int = 0  # classes of a sequence-classification head on the pooled [CLS] (0: no head)

    def __post_init__(self) -> None:
        for key in ("dim", "layers", "heads", "ff_dim", "max_len", "segments"):
            if getattr(self, key) < 1:
                raise InfolmError(f"model.{key} must be at least 1, got {getattr(self, key)}")
        if self.dim % self.heads:
            raise InfolmError(f"model.dim ({self.dim}) must be divisible by model.heads ({self.heads})")
        for key in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise InfolmError(f"model.{key} must be in [0, 1), got {getattr(self, key)}")
        if self.num_labels < 0 or self.num_labels == 1:
            raise InfolmError(f"model.num_labels must be 0 (no head) or at least 2, got {self.num_labels}")


@dataclasses.dataclass
class EncoderOutput:
    states: Tensor  # (B, T, D) last layer's per-token states
    sentence: Tensor  # (B, D) the state of the first token ([CLS]): the sentence representation
    hiddens: list[Tensor]  # per layer, (B, T, D)


class EncoderLayer(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.attention_dropout = config.attention_dropout
        self.qkv = nn.Linear(config.dim, 3 * config.dim)  # query, key, value in one matmul
        self.attention_out = nn.Linear(config.dim, config.dim)
        self.attention_norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.ff_in = nn.Linear(config.dim, config.ff_dim)
        self.ff_out = nn.Linear(config.ff_dim, config.dim)
        self.ff_norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, attend: Tensor | None) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))  # (B, nh, T, hs)
        p = self.attention_dropout if self.training else 0.0
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attend, dropout_p=p)  # (B, nh, T, hs)
        a = a.transpose(1, 2).reshape(b, t, d)
        x = self.attention_norm(x + self.dropout(self.attention_out(a)))
        h = self.ff_out(F.gelu(self.ff_in(x)))  # exact (erf) GELU, as BERT's "gelu"
        return self.ff_norm(x + self.dropout(h))


# The model registry holds every model protocol; tasks refuse a model of the wrong protocol.
@register_model("bert", config=EncoderConfig)  # type: ignore[arg-type]
class Encoder(nn.Module):
    """BERT-style bidirectional encoder: ``forward(tokens (B, T)) -> EncoderOutput``; heads are methods."""

    protocol: str = "encoder"  # the model protocol tasks declare they serve

    @classmethod
    def max_input_length(cls, config: EncoderConfig) -> int | None:
        """The longest input row (learned positions)."""
        return config.max_len

    def __init__(self, config: EncoderConfig, vocab_size: int) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        self.word_embeddings = nn.Embedding(vocab_size, config.dim)
        self.position_embeddings = nn.Embedding(config.max_len, config.dim)
        self.segment_embeddings = nn.Embedding(config.segments, config.dim)
        self.embedding_norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.layers))
        self.mlm_dense = nn.Linear(config.dim, config.dim)
        self.mlm_norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.mlm_bias = nn.Parameter(torch.zeros(vocab_size))  # output-only bias per word type
        self.pooler = nn.Linear(config.dim, config.dim)
        self.classifier = nn.Linear(config.dim, config.num_labels) if config.num_labels else None
        self.apply(self._init)

    def _init(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self, tokens: Tensor, state: object = None, segments: Tensor | None = None, padding_mask: Tensor | None = None
    ) -> EncoderOutput:
        """Encode ``tokens`` (B, T) laid out as [CLS] A [SEP] (B [SEP]) [PAD]...; ``state`` is unused.

        ``padding_mask`` (B, T) is True at real tokens (default: tokens that are not [PAD]); padded
        keys get no attention. ``segments`` (B, T) are 0 for sentence A and 1 for sentence B
        (default: 1 after the first [SEP], as BERT lays out pairs).
        """
        b, t = tokens.shape
        if t > self.config.max_len:
            raise InfolmError(f"input of {t} tokens exceeds model.max_len={self.config.max_len}")
        if padding_mask is None:
            padding_mask = tokens != PAD_ID
        if segments is None:
            is_sep = (tokens == SEP_ID).long()
            segments = (is_sep.cumsum(1) - is_sep).clamp(max=self.config.segments - 1)  # A's [SEP] stays in A
        x = self.word_embeddings(tokens) + self.position_embeddings.weight[:t] + self.segment_embeddings(segments)
        x = self.dropout(self.embedding_norm(x))  # (B, T, D)
        attend = None if bool(padding_mask.all()) else padding_mask[:, None, None, :]  # (B, 1, 1, T) keys
        hiddens = []
        for layer in self.layers:
            x = layer(x, attend)
            hiddens.append(x)
        return EncoderOutput(states=x, sentence=x[:, 0], hiddens=hiddens)

    def mlm_features(self, states: Tensor) -> Tensor:
        """g_ω of a masked position (Kong et al. Sec. 3.2): the MLM transform of its state. (..., D)."""
        return self.mlm_norm(F.gelu(self.mlm_dense(states)))

    def mlm_logits(self, features: Tensor, types: Tensor | None = None) -> Tensor:
        """f(a, b) = g_ω(a)ᵀ g_ψ(b) + bias_b for every word type b (or only ``types`` (U,)). (..., V | U)."""
        if types is None:
            return F.linear(features, self.word_embeddings.weight, self.mlm_bias)  # one fused GEMM + bias
        return F.linear(features, self.word_embeddings.weight[types], self.mlm_bias[types])

    def pooled(self, sentence: Tensor) -> Tensor:
        """BERT's pooler: tanh(dense([CLS] state)). (B, D).

        Only ``classify`` reads it. BERT pretrains the pooler with NSP, whose classifier reads the pooled
        state; no pretraining objective here does (``nsp`` scores the [CLS] state with its own ψ, ``dim``
        reads the [CLS] state itself), so a fine-tuning starts it from its initialisation. Kept for
        BERT's layout (one to one with ``BertForSequenceClassification``); Kong et al. (Sec. 5.3) name
        only a linear layer and a softmax on the first token's state."""
        return torch.tanh(self.pooler(sentence))

    def classify(self, sentence: Tensor) -> Tensor:
        """Class scores of the classification head (BERT: dropout, then linear on the pooled [CLS]). (B, C).
        The pooler is as fresh as the linear layer when the encoder was pretrained here (``pooled``)."""
        if self.classifier is None:
            raise InfolmError("this encoder has no classification head (set model.num_labels)")
        return self.classifier(self.dropout(self.pooled(sentence)))

    def new_in_finetuning(self) -> set[str]:
        """Weights a pretrained encoder's checkpoint need not hold (``run.init_from``): the classification
        head, which fine-tuning adds (model.num_labels); any other missing weight is refused."""
        return {f"classifier.{name}" for name, _ in self.classifier.named_parameters()} if self.classifier else set()

    def no_weight_decay(self) -> set[str]:
        """Parameters the optimizer does not decay: every bias (the MLM output bias included) and the
        LayerNorm weights, as BERT's optimizer (Devlin et al.'s released code excludes "LayerNorm" and
        "bias" from weight decay); embeddings and dense weights decay."""
        names = set()
        for prefix, module in self.named_modules():
            for name, _ in module.named_parameters(recurse=False):
                if isinstance(module, nn.LayerNorm) or name.endswith("bias"):
                    names.add(f"{prefix}.{name}" if prefix else name)
        return names

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
