"""Vocabulary: token <-> id, with ``<eos>`` (PTB convention) and ``<unk>`` where the data has it."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from infolm.errors import InfolmError

EOS = "<eos>"
UNK = "<unk>"


class Vocab:
    def __init__(self, itos: Sequence[str]) -> None:
        self.itos = list(itos)
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise InfolmError("vocabulary has duplicate tokens")

    @classmethod
    def from_tokens(cls, tokens: Iterable[str], specials: Sequence[str] = (EOS,)) -> Vocab:
        """Specials first, then tokens by decreasing frequency (ties: first occurrence)."""
        counts = Counter(tokens)
        order = [t for t in specials] + [t for t, _ in counts.most_common() if t not in specials]
        return cls(order)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    @property
    def eos_id(self) -> int:
        return self.stoi[EOS]

    def encode(self, tokens: Iterable[str], unk_ok: bool = False) -> list[int]:
        ids = []
        unk = self.stoi.get(UNK)
        for token in tokens:
            index = self.stoi.get(token)
            if index is None:
                if unk_ok and unk is not None:
                    index = unk
                else:
                    raise InfolmError(f"token {token!r} is not in the vocabulary")
            ids.append(index)
        return ids

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.itos[int(i)] for i in ids]

    def digest(self) -> str:
        return hashlib.sha256("\n".join(self.itos).encode()).hexdigest()[:16]

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.itos, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))
