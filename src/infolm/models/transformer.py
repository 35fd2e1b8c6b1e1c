"""A small causal Transformer LM: pre-LayerNorm blocks, learned positions, tied embeddings."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from infolm.errors import InfolmError
from infolm.models.base import LanguageModel, LMOutput, State, register_model


@dataclasses.dataclass
class TransformerConfig:
    dim: int = 128  # model width
    layers: int = 2  # transformer blocks
    heads: int = 4  # attention heads (dim must be divisible by heads)
    ff_mult: int = 4  # feed-forward width = ff_mult * dim
    max_len: int = 512  # longest input window (learned positions)
    dropout: float = 0.1  # dropout on embeddings, attention output and feed-forward output

    def __post_init__(self) -> None:
        if self.dim % self.heads:
            raise InfolmError(f"model.dim ({self.dim}) must be divisible by model.heads ({self.heads})")
        if not 0.0 <= self.dropout < 1.0:
            raise InfolmError(f"model.dropout must be in [0, 1), got {self.dropout}")


class Block(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.dropout = config.dropout
        self.ln1 = nn.LayerNorm(config.dim)
        self.qkv = nn.Linear(config.dim, 3 * config.dim)
        self.proj = nn.Linear(config.dim, config.dim)
        self.ln2 = nn.LayerNorm(config.dim)
        self.ff = nn.Sequential(
            nn.Linear(config.dim, config.ff_mult * config.dim),
            nn.GELU(),
            nn.Linear(config.ff_mult * config.dim, config.dim),
        )

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))  # (B, nh, T, hs)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(b, t, d)
        x = x + F.dropout(self.proj(a), self.dropout, self.training)
        return x + F.dropout(self.ff(self.ln2(x)), self.dropout, self.training)


@register_model("transformer", config=TransformerConfig)
class TransformerLM(LanguageModel):
    """Causal Transformer LM. Stateless: each window is scored without earlier context."""

    @classmethod
    def max_input_length(cls, config: TransformerConfig) -> int | None:
        return config.max_len

    def __init__(self, config: TransformerConfig, vocab_size: int) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, config.dim)
        self.positions = nn.Parameter(torch.zeros(config.max_len, config.dim))
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.dim)
        nn.init.normal_(self.embedding.weight, std=0.02)
        nn.init.normal_(self.positions, std=0.02)

    def forward(self, tokens: Tensor, state: State = None) -> LMOutput:
        t = tokens.size(1)
        if t > self.config.max_len:
            raise InfolmError(f"input window of {t} tokens exceeds model.max_len={self.config.max_len}")
        x = self.embedding(tokens) + self.positions[:t]  # (B, T, D)
        x = F.dropout(x, self.config.dropout, self.training)
        hiddens = []
        for block in self.blocks:
            x = block(x)
            hiddens.append(x)
        logits = self.ln_f(x) @ self.embedding.weight.t()  # (B, T, V), tied
        return LMOutput(logits=logits, hiddens=hiddens, state=None, raw_hiddens=hiddens)
