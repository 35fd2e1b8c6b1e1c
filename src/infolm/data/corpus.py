"""Corpora: word-level (whitespace tokens, ``<eos>`` at each line end) and character-level.

A :class:`Corpus` holds one vocabulary (built from the training split) and, per split, the
contiguous token stream (1-D int64) plus line offsets for sentence-level access.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from infolm.data.vocab import EOS, Vocab
from infolm.errors import InfolmError

SPLITS = ("train", "valid", "test")


def read_text(path: str | Path) -> str:
    """Read a UTF-8 text file (``.gz`` transparently). Missing, binary or empty files are errors."""
    path = Path(path)
    if not path.is_file():
        raise InfolmError(f"data file not found: {path}")
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except OSError as error:
        raise InfolmError(f"cannot read data file {path}: {error.strerror or error}") from None
    if b"\x00" in raw[:65536]:
        raise InfolmError(f"data file {path} looks binary (contains NUL bytes)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InfolmError(f"data file {path} is not UTF-8 text") from None
    if not text.strip():
        raise InfolmError(f"data file {path} is empty")
    return text


def tokenize_lines(text: str, level: str) -> list[list[str]]:
    """Lines -> token lists with a trailing ``<eos>`` (blank lines are kept only at char level)."""
    out = []
    for line in text.splitlines():
        if level == "word":
            words = line.split()
            if words:
                out.append(words + [EOS])
        else:
            out.append(list(line) + [EOS])
    return out


class Corpus:
    def __init__(self, name: str, level: str, vocab: Vocab, lines: dict[str, list[list[int]]]) -> None:
        self.name = name
        self.level = level
        self.vocab = vocab
        self._streams: dict[str, Tensor] = {}
        self._offsets: dict[str, np.ndarray] = {}
        for split, split_lines in lines.items():
            lengths = np.fromiter((len(x) for x in split_lines), dtype=np.int64, count=len(split_lines))
            self._offsets[split] = np.concatenate([[0], np.cumsum(lengths)])
            flat = np.fromiter((i for line in split_lines for i in line), dtype=np.int64, count=int(lengths.sum()))
            self._streams[split] = torch.from_numpy(flat)

    @classmethod
    def from_texts(cls, name: str, level: str, texts: dict[str, str], vocab: Vocab | None = None) -> Corpus:
        tokens = {split: tokenize_lines(text, level) for split, text in texts.items()}
        for split, split_tokens in tokens.items():
            if not split_tokens:
                raise InfolmError(f"{name}: the {split} split has no tokens")
        if vocab is None:
            vocab = Vocab.from_tokens(t for line in tokens["train"] for t in line)
        lines = {}
        for split, split_tokens in tokens.items():
            unk_ok = "<unk>" in vocab
            try:
                lines[split] = [vocab.encode(line, unk_ok=unk_ok) for line in split_tokens]
            except InfolmError as error:
                raise InfolmError(f"{name} {split}: {error} (and the vocabulary has no <unk>)") from None
        return cls(name, level, vocab, lines)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self._streams)

    def stream(self, split: str) -> Tensor:
        """The split as one contiguous stream of ids, ``<eos>`` after every line. (N,) int64."""
        if split not in self._streams:
            raise InfolmError(f"corpus {self.name} has no split {split!r}; it has {', '.join(self._streams)}")
        return self._streams[split]

    def num_sentences(self, split: str) -> int:
        return len(self._offsets[split]) - 1

    def sentence(self, split: str, index: int) -> Tensor:
        """Line ``index`` of ``split`` (ids, ending with ``<eos>``)."""
        offsets = self._offsets[split]
        return self._streams[split][int(offsets[index]) : int(offsets[index + 1])]

    def sentence_offsets(self, split: str) -> np.ndarray:
        """(S+1,) start offsets of the lines in :meth:`stream`; line i is ``[o[i], o[i+1])``."""
        return self._offsets[split]

    def sentences(self, split: str) -> Iterator[Tensor]:
        for index in range(self.num_sentences(split)):
            yield self.sentence(split, index)

    def truncated(self, split: str, max_tokens: int | None) -> Corpus:
        """A view keeping only about the first ``max_tokens`` tokens (whole lines) of ``split``."""
        if max_tokens is None or len(self._streams[split]) <= max_tokens:
            return self
        offsets = self._offsets[split]
        keep_lines = max(1, int(np.searchsorted(offsets, max_tokens, side="right")) - 1)
        clone = object.__new__(Corpus)
        clone.name, clone.level, clone.vocab = self.name, self.level, self.vocab
        clone._streams = dict(self._streams)
        clone._offsets = dict(self._offsets)
        clone._offsets[split] = offsets[: keep_lines + 1]
        clone._streams[split] = self._streams[split][: int(offsets[keep_lines])]
        return clone
