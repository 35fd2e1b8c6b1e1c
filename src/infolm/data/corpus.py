"""Corpora: word-level (whitespace tokens, ``<eos>`` at each line end) and character-level.

A :class:`Corpus` holds one vocabulary (built from the training split) and, per split, the
contiguous token stream (1-D int64) plus line offsets for sentence-level access.
"""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from infolm.data.vocab import EOS, UNK, Vocab
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


def encode_lines(vocab: Vocab, lines: list[list[str]], source: str) -> tuple[list[list[int]], list[int]]:
    """Token lines -> id lines, a token without an id read as ``<unk>``; also the count of those per line.
    Without ``<unk>`` in ``vocab`` such a token is an error naming ``source``."""
    stoi, unk = vocab.stoi, vocab.unk_id
    ids, unknown = [], []
    for line in lines:
        line_ids = [stoi.get(token, -1) for token in line]
        missing = line_ids.count(-1) if -1 in line_ids else 0
        if missing:
            if unk is None:
                token = next(t for t in line if t not in stoi)
                raise InfolmError(f"{source}: token {token!r} is not in the vocabulary, which has no {UNK}")
            line_ids = [unk if i < 0 else i for i in line_ids]
        ids.append(line_ids)
        unknown.append(missing)
    return ids, unknown


class Corpus:
    """One vocabulary and, per split, the token stream and line offsets.

    ``sources`` names where each split came from (a file, or ``dataset split``) for messages;
    ``unk_read(split)`` is how many tokens of the split were read as ``<unk>`` because the vocabulary
    has no id for them (a ``<unk>`` written in the text does not count).
    """

    def __init__(
        self,
        name: str,
        level: str,
        vocab: Vocab,
        lines: dict[str, list[list[int]]],
        unk_per_line: dict[str, list[int]] | None = None,
        sources: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.level = level
        self.vocab = vocab
        self.sources = {split: (sources or {}).get(split, f"{name} {split}") for split in lines}
        self._streams: dict[str, Tensor] = {}
        self._offsets: dict[str, np.ndarray] = {}
        self._unk_offsets: dict[str, np.ndarray] = {}  # (S+1,) running count of <unk> reads at line starts
        for split, split_lines in lines.items():
            lengths = np.fromiter((len(x) for x in split_lines), dtype=np.int64, count=len(split_lines))
            self._offsets[split] = np.concatenate([[0], np.cumsum(lengths)])
            flat = np.fromiter((i for line in split_lines for i in line), dtype=np.int64, count=int(lengths.sum()))
            self._streams[split] = torch.from_numpy(flat)
            unknown = (unk_per_line or {}).get(split) or [0] * len(split_lines)
            self._unk_offsets[split] = np.concatenate([[0], np.cumsum(np.asarray(unknown, dtype=np.int64))])

    @classmethod
    def from_texts(
        cls,
        name: str,
        level: str,
        texts: dict[str, str],
        vocab: Vocab | None = None,
        min_count: int = 1,
        max_vocab: int | None = None,
        sources: dict[str, str] | None = None,
    ) -> Corpus:
        """Tokenize ``texts`` (split -> text) and encode them with ``vocab``, by default the vocabulary
        of the train split (:meth:`Vocab.from_counts`: ``<unk>`` where a token would have no id)."""
        sources = {split: (sources or {}).get(split, f"{name} {split}") for split in texts}
        tokens = {split: tokenize_lines(text, level) for split, text in texts.items()}
        for split, split_tokens in tokens.items():
            if not split_tokens:
                raise InfolmError(f"{sources[split]}: the {split} split has no tokens")
        if vocab is None:
            counts = Counter(t for line in tokens["train"] for t in line)
            others = (line for split, split_tokens in tokens.items() if split != "train" for line in split_tokens)
            unseen = any(t not in counts for line in others for t in line)
            vocab = Vocab.from_counts(counts, unseen, min_count, max_vocab)
        lines, unk_per_line = {}, {}
        for split, split_tokens in tokens.items():
            lines[split], unk_per_line[split] = encode_lines(vocab, split_tokens, sources[split])
        return cls(name, level, vocab, lines, unk_per_line, sources)

    def unk_read(self, split: str) -> int:
        """Tokens of ``split`` read as ``<unk>`` for want of an id (not counting a ``<unk>`` of the text)."""
        return int(self._unk_offsets[split][-1]) if split in self._unk_offsets else 0

    def unk_note(self) -> str | None:
        """One line on the tokens read as ``<unk>`` per split, or None when there are none."""
        if not any(self.unk_read(split) for split in self.splits):
            return None
        parts = []
        for split in self.splits:
            read, total = self.unk_read(split), self.stream(split).numel()
            parts.append(f"{split} {read:,} ({100 * read / max(total, 1):.1f}%)")
        return f"tokens read as {UNK} (no id among the vocabulary's {len(self.vocab):,}): {', '.join(parts)}"

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
        clone._unk_offsets = dict(self._unk_offsets)
        clone._unk_offsets[split] = self._unk_offsets[split][: keep_lines + 1]
        clone.sources = dict(self.sources)
        clone._streams[split] = self._streams[split][: int(offsets[keep_lines])]
        return clone
