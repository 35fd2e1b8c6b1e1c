"""Sentences as WordPiece rows for encoders: ``[CLS] subwords [SEP] [PAD]...`` in one padded matrix."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from infolm.data.vocab import Vocab
from infolm.data.wordpiece import CLS, PAD, SEP, SPECIALS, WordPiece

PAD_ID, CLS_ID, SEP_ID = SPECIALS.index(PAD), SPECIALS.index(CLS), SPECIALS.index(SEP)


@dataclasses.dataclass
class SubwordSentences:
    rows: Tensor  # (N, L) int64: [CLS] subwords [SEP] then [PAD]
    lengths: Tensor  # (N,) int64 real positions per row, [CLS] and [SEP] included

    @classmethod
    def from_ids(cls, sentences: Sequence[Sequence[int]], max_len: int | None = None) -> SubwordSentences:
        """Rows of ``[CLS] s [SEP]``; with ``max_len`` a longer sentence keeps its first max_len - 2 subwords."""
        keep = [list(s) if max_len is None else list(s)[: max_len - 2] for s in sentences]
        lengths = torch.tensor([len(s) + 2 for s in keep], dtype=torch.long)
        width = int(lengths.max()) if len(keep) else 2
        rows = torch.full((len(keep), width), PAD_ID, dtype=torch.long)
        for i, s in enumerate(keep):
            rows[i, : len(s) + 2] = torch.tensor([CLS_ID, *s, SEP_ID], dtype=torch.long)
        return cls(rows, lengths)

    def __len__(self) -> int:
        return int(self.lengths.numel())

    def real(self) -> Tensor:
        """(N, L) bool, True at real positions."""
        return torch.arange(self.rows.size(1))[None, :] < self.lengths[:, None]

    def stream(self) -> Tensor:
        """Every row's real positions in order, as one 1-D stream ([CLS] s [SEP] [CLS] s [SEP] ...)."""
        return self.rows[self.real()]

    def counts(self, vocab_size: int) -> Tensor:
        """(V,) float: how often each subword occurs between the [CLS] and [SEP] of a row."""
        inner = self.real() & (self.rows != CLS_ID) & (self.rows != SEP_ID)
        return torch.bincount(self.rows[inner], minlength=vocab_size).to(torch.float32)


@dataclasses.dataclass
class EncoderData:
    """What an encoder task trains on (``Task.load_data``), and what its objectives receive in ``setup``."""

    vocab: Vocab  # the tokenizer's types in id order: vocab.json of the run, the model's size, run.init_from's check
    tokenizer: WordPiece | None  # the run's WordPiece tokenizer (kept as tokenizer.json)
    sentences: dict[str, SubwordSentences]  # split -> [CLS] s [SEP] rows
    labels: dict[str, Tensor] = dataclasses.field(default_factory=dict)  # split -> (N,) class ids
    background: Callable[[], SubwordSentences] | None = None  # IMM's restricted-model text (None: train)
    _background: SubwordSentences | None = None

    @classmethod
    def of(cls, tokenizer: WordPiece, sentences: dict[str, SubwordSentences], **fields: Any) -> EncoderData:
        vocab = Vocab([tokenizer.id_to_token(i) for i in range(len(tokenizer))])
        return cls(vocab, tokenizer, sentences, **fields)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def train(self) -> SubwordSentences:
        return self.sentences["train"]

    def restricted_text(self) -> SubwordSentences:
        """The text of IMM's Kneser-Ney bigram (App. D.2: the pretraining data), read once when asked."""
        if self.background is None:
            return self.train
        if self._background is None:
            self._background = self.background()
        return self._background
