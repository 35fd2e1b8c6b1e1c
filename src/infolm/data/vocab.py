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

    @classmethod
    def from_counts(
        cls, counts: Counter[str], unseen: bool = False, min_count: int = 1, max_vocab: int | None = None
    ) -> Vocab:
        """The vocabulary of a training text with token ``counts`` (in order of first occurrence).

        ``<eos>`` first, then the tokens by decreasing count (ties: first occurrence), dropping those
        seen fewer than ``min_count`` times and, with ``max_vocab``, keeping the vocabulary (specials
        included) at that size. ``<unk>`` is in the vocabulary when the text has it (PTB: at its
        frequency rank, never dropped) and is added right after ``<eos>`` when some token would
        otherwise have no id: one dropped here, or, with ``unseen``, one of another split that the
        training text lacks. Text that needs no ``<unk>`` gets none (the vocabulary of every text
        that loaded before ``<unk>`` was added on demand stays the same).
        """
        ranked = [t for t, n in counts.most_common() if t not in (EOS, UNK) and n >= min_count]
        literal_unk = UNK in counts
        rare = any(n < min_count for t, n in counts.items() if t not in (EOS, UNK))
        room = None if max_vocab is None else max_vocab - 1  # after <eos>
        with_unk = literal_unk or rare or unseen or (room is not None and len(ranked) > room)
        if room is not None and with_unk:
            ranked = ranked[: room - 1]
        if not literal_unk:
            return cls([EOS, UNK, *ranked] if with_unk else [EOS, *ranked])
        kept = set(ranked) | {UNK}
        return cls([EOS, *(t for t, _ in counts.most_common() if t in kept)])

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    @property
    def eos_id(self) -> int:
        return self.stoi[EOS]

    @property
    def unk_id(self) -> int | None:
        return self.stoi.get(UNK)

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
