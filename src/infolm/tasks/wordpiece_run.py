"""Which WordPiece tokenizer a run uses: the one it was started with (``tokenizer.json`` in the run
directory), the one of the run it is initialised from (``run.init_from``), or one trained on the
task's training text. A run resumed or initialised with another tokenizer is refused."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from infolm.data.wordpiece import WordPiece, WordPieceConfig
from infolm.errors import InfolmError

TOKENIZER_FILE = "tokenizer.json"


def run_tokenizer(
    run_dir: str | Path, init_from: str | None, train_lines: Callable[[], Sequence[str]], settings: WordPieceConfig
) -> WordPiece:
    """The run's tokenizer (nothing is written: :func:`save_tokenizer` does that once the run starts)."""
    own = Path(run_dir) / TOKENIZER_FILE
    source: WordPiece | None = None
    if init_from:
        pretrained = Path(init_from) / TOKENIZER_FILE
        if not pretrained.is_file():
            raise InfolmError(
                f"run.init_from={init_from} has no {TOKENIZER_FILE}: it is not a run of a WordPiece encoder"
            )
        source = WordPiece.load(pretrained)
    if own.is_file():
        existing = WordPiece.load(own)
        if source is not None and existing.digest() != source.digest():
            raise InfolmError(
                f"run directory {run_dir} was started with another tokenizer than run.init_from={init_from}"
            )
        return existing
    if source is not None:
        return source
    return WordPiece.train(train_lines(), settings)


def save_tokenizer(tokenizer: WordPiece, run_dir: str | Path) -> None:
    """Write the run's tokenizer once, from the first process only: under ``torchrun`` the other ranks
    would otherwise write into the run directory before the first checks that it holds no other run."""
    path = Path(run_dir) / TOKENIZER_FILE
    if int(os.environ.get("RANK", "0")) == 0 and not path.exists():
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        tokenizer.save(path)


def corpus_lines(corpus: object, split: str) -> list[str]:
    """A word-level corpus split as text lines (``<eos>`` dropped), for subword tokenization."""
    vocab = corpus.vocab  # type: ignore[attr-defined]
    eos = vocab.eos_id
    return [" ".join(vocab.decode(s[s != eos].tolist())) for s in corpus.sentences(split)]  # type: ignore[attr-defined]
