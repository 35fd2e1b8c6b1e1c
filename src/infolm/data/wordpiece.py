"""WordPiece subwords (BERT's tokenization): trained by :mod:`infolm.data.wordpiece_trainer`
(deterministic), applied, saved and loaded as JSON by the ``tokenizers`` library.

Special tokens come first, always with the same ids: ``[PAD]`` 0, ``[UNK]`` 1, ``[CLS]`` 2, ``[SEP]`` 3,
``[MASK]`` 4. A word's first subword is plain, its continuations start with ``##`` (BERT's
convention): :meth:`WordPiece.continuation_table` marks them, so word boundaries are a table lookup.
Text may spell the unknown word ``<unk>`` (PTB); it is read as ``[UNK]``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from infolm.data.wordpiece_trainer import train_vocabulary
from infolm.errors import InfolmError

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIALS = (PAD, UNK, CLS, SEP, MASK)
UNK_ALIASES = ("<unk>",)  # spellings of the unknown word in corpora (PTB)
CONTINUATION = "##"


@dataclasses.dataclass
class WordPieceConfig:
    vocab_size: int = 8000  # subword types, specials included (BERT: 30,522 on Wikipedia + BooksCorpus)
    min_frequency: int = 2  # a merge must occur this often in the training text
    lowercase: bool = True  # BERT uncased: lowercase and strip accents before splitting

    def __post_init__(self) -> None:
        if self.vocab_size <= len(SPECIALS):
            raise InfolmError(f"tokenizer.vocab_size must exceed {len(SPECIALS)}, got {self.vocab_size}")
        if self.min_frequency < 1:
            raise InfolmError(f"tokenizer.min_frequency must be at least 1, got {self.min_frequency}")


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise InfolmError("WordPiece needs the 'tokenizers' package: pip install 'infolm[encoders]'") from None
    return tokenizers


def _normalize_unk(text: str) -> str:
    for alias in UNK_ALIASES:
        text = text.replace(alias, UNK)
    return text


def _empty_tokenizer(tk: Any, config: WordPieceConfig) -> Any:
    """BERT's normalizer, pre-tokenizer and decoder around a WordPiece model of the specials alone."""
    tokenizer = tk.Tokenizer(tk.models.WordPiece({token: index for index, token in enumerate(SPECIALS)}, unk_token=UNK))
    tokenizer.normalizer = tk.normalizers.BertNormalizer(lowercase=config.lowercase, strip_accents=config.lowercase)
    tokenizer.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = tk.decoders.WordPiece(prefix=CONTINUATION)
    return tokenizer


_SPECIAL_SPLIT = re.compile("|".join(re.escape(token) for token in SPECIALS))


def word_counts(tokenizer: Any, lines: Iterable[str]) -> Counter[str]:
    """Occurrences of each word of ``lines``, normalized and pre-tokenized by ``tokenizer``. A special
    token in the text (``<unk>`` is read as ``[UNK]``) is not a word: encoding keeps it whole, so its
    spelling is not subword material. (The library's trainer counts ``[UNK]`` as the words ``[``,
    ``unk``, ``]``.)"""
    # words never span a space, so each distinct space-separated chunk is normalized and split once
    chunks: Counter[str] = Counter()
    for line in lines:
        chunks.update(line.split(" "))
    counts: Counter[str] = Counter()
    for chunk, n in chunks.items():
        for part in _SPECIAL_SPLIT.split(_normalize_unk(chunk)):
            normalized = tokenizer.normalizer.normalize_str(part)
            for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalized):
                counts[word] += n
    return counts


class WordPiece:
    """A trained WordPiece tokenizer: ``encode`` lines to ids (no specials added), ``decode`` back."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        for expected, token in enumerate(SPECIALS):
            if tokenizer.token_to_id(token) != expected:
                raise InfolmError(f"tokenizer has {token} at id {tokenizer.token_to_id(token)}, expected {expected}")

    @classmethod
    def train(cls, lines: Iterable[str], config: WordPieceConfig | None = None) -> WordPiece:
        """Train on ``lines`` with :mod:`infolm.data.wordpiece_trainer` (deterministic): the same lines and
        settings give the same tokens and ids in every process."""
        tk = _tokenizers()
        config = config or WordPieceConfig()
        tokenizer = _empty_tokenizer(tk, config)
        tokens = train_vocabulary(
            word_counts(tokenizer, lines), config.vocab_size, config.min_frequency, SPECIALS, CONTINUATION
        )
        tokenizer.model = tk.models.WordPiece(
            {token: index for index, token in enumerate(tokens)}, unk_token=UNK, continuing_subword_prefix=CONTINUATION
        )
        tokenizer.add_special_tokens(list(SPECIALS))
        return cls(tokenizer)

    @classmethod
    def load(cls, path: str | Path) -> WordPiece:
        tk = _tokenizers()
        try:
            return cls(tk.Tokenizer.from_file(str(path)))
        except Exception as error:  # tokenizers raises its own exception types on bad JSON
            raise InfolmError(f"cannot read tokenizer {path}: {str(error).splitlines()[0]}") from None

    def save(self, path: str | Path) -> None:
        """Write the tokenizer JSON atomically."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        self.tokenizer.save(str(tmp))
        os.replace(tmp, path)

    def __len__(self) -> int:
        return int(self.tokenizer.get_vocab_size())

    @property
    def pad_id(self) -> int:
        return SPECIALS.index(PAD)

    @property
    def unk_id(self) -> int:
        return SPECIALS.index(UNK)

    @property
    def cls_id(self) -> int:
        return SPECIALS.index(CLS)

    @property
    def sep_id(self) -> int:
        return SPECIALS.index(SEP)

    @property
    def mask_id(self) -> int:
        return SPECIALS.index(MASK)

    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        """Subword ids of each line, without [CLS] / [SEP]."""
        encodings = self.tokenizer.encode_batch([_normalize_unk(line) for line in lines], add_special_tokens=False)
        return [list(e.ids) for e in encodings]

    def decode(self, ids: Iterable[int]) -> str:
        return str(self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False))

    def id_to_token(self, index: int) -> str:
        return str(self.tokenizer.id_to_token(int(index)))

    def continuation_table(self) -> Tensor:
        """(V,) bool: True for ``##`` continuation subwords (not the first piece of a word)."""
        vocab = self.tokenizer.get_vocab()
        table = torch.zeros(len(self), dtype=torch.bool)
        for token, index in vocab.items():
            table[index] = token.startswith(CONTINUATION)
        return table

    def digest(self) -> str:
        """Identifies the vocabulary (two tokenizers with the same digest give the same ids)."""
        vocab = sorted(self.tokenizer.get_vocab().items(), key=lambda item: item[1])
        return hashlib.sha256("\n".join(token for token, _ in vocab).encode()).hexdigest()[:16]
