"""The reverse copy task (Melis thesis Sec. 2.3.3): the data files.

Each example is one line: ``length`` tokens drawn uniformly from a vocabulary of ``vocab_size``, a marker,
and the same tokens in reverse order::

    t17 t3 t941 <rev> t941 t3 t17

The thesis trains a separate encoder and decoder (the decoder starts from the encoder's last state): the
``copy`` task (``tasks/copy.py``) serves these lines as (source, target) pairs to ``melis-seq2seq``. The same
lines also train one language model left to right (the ``stream-lm`` task); its input half is i.i.d. uniform,
so no model can beat ``ln(vocab_size)`` nats on it: :func:`entropy_floor` is the lowest achievable per-token
loss of that stream, and :func:`copy_loss` the loss above it per predictable token.

Files for ``data.name=path`` (``data.level=word``)::

    python -m infolm.data.copy_task runs/data/reverse-copy-20 --length 20 --vocab-size 100 --train 20000
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import numpy as np

from infolm.data.corpus import SPLITS, Corpus
from infolm.data.vocab import EOS, Vocab
from infolm.errors import InfolmError

MARKER = "<rev>"  # read the input, then repeat it reversed


@dataclasses.dataclass
class CopyTaskConfig:
    length: int = 50  # tokens to copy per example (thesis: 50, 100, 150, 200; Fig. 2.4)
    vocab_size: int = 1000  # symbols sampled uniformly (thesis: 1000)
    train: int = 500_000  # training examples (thesis: 500 000)
    valid: int = 10_000  # validation examples (thesis: 10 000)
    test: int = 10_000  # test examples (thesis: 10 000)
    seed: int = 0  # seed of the sampler; each split has its own stream

    def __post_init__(self) -> None:
        for key in ("length", "vocab_size", "train", "valid", "test"):
            if getattr(self, key) < 1:
                raise InfolmError(f"copy task {key} must be positive, got {getattr(self, key)}")


def symbols(vocab_size: int) -> list[str]:
    """The task's symbols ``t0 .. t{V-1}``."""
    return [f"t{i}" for i in range(vocab_size)]


def sample_examples(count: int, config: CopyTaskConfig, split: str) -> np.ndarray:
    """``(count, length)`` symbol ids, uniform and independent; reproducible per (seed, split)."""
    rng = np.random.default_rng([config.seed, SPLITS.index(split)])
    return rng.integers(0, config.vocab_size, size=(count, config.length))


def format_lines(examples: np.ndarray) -> str:
    """One line per example: the symbols, the marker, the symbols reversed."""
    names = np.array(symbols(int(examples.max()) + 1))
    lines = []
    for row in examples:
        words = names[row]
        lines.append(" ".join([*words, MARKER, *words[::-1]]))
    return "\n".join(lines) + "\n"


def copy_task_texts(config: CopyTaskConfig) -> dict[str, str]:
    """The three splits as text (one example per line)."""
    return {split: format_lines(sample_examples(getattr(config, split), config, split)) for split in SPLITS}


def copy_task_corpus(config: CopyTaskConfig) -> Corpus:
    """The task as a word-level :class:`Corpus` whose vocabulary holds every symbol (even unsampled ones)."""
    vocab = Vocab([EOS, MARKER, *symbols(config.vocab_size)])
    return Corpus.from_texts("reverse-copy", "word", copy_task_texts(config), vocab=vocab)


def write_copy_task(out_dir: str | Path, config: CopyTaskConfig) -> dict[str, Path]:
    """Write ``train.txt``, ``valid.txt``, ``test.txt`` into ``out_dir`` (for ``data.name=path``).

    The vocabulary of a path corpus comes from the training file, so every symbol of valid / test must occur
    in train (a copy of a symbol read as ``<unk>`` would score nothing); with too few training examples this
    is an error."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    examples = {split: sample_examples(getattr(config, split), config, split) for split in SPLITS}
    missing = set(np.unique(np.concatenate([examples["valid"], examples["test"]]))) - set(np.unique(examples["train"]))
    if missing:
        raise InfolmError(
            f"{len(missing)} symbols of valid/test never occur in {config.train} training examples; use more"
        )
    paths = {}
    for split, rows in examples.items():
        paths[split] = out / f"{split}.txt"
        paths[split].write_text(format_lines(rows))
    return paths


def entropy_floor(length: int, vocab_size: int) -> float:
    """Lowest achievable mean nats per token of the stream: only the ``length`` input symbols of each line of
    ``2 length + 2`` tokens (symbols, marker, reversed symbols, ``<eos>``) are unpredictable (ln V each); the
    first symbol after an ``<eos>`` is as unpredictable as the others."""
    return length * math.log(vocab_size) / (2 * length + 2)


def copy_loss(stream_loss: float, length: int, vocab_size: int) -> float:
    """Mean nats per predictable token (reversed half, marker, ``<eos>``) from the stream's mean loss, taking the
    loss on the input half to be exactly its floor ``ln V``; 0 means perfect copying."""
    total = stream_loss * (2 * length + 2)
    return (total - length * math.log(vocab_size)) / (length + 2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the reverse copy task (thesis Sec. 2.3.3) as text files.")
    parser.add_argument("out_dir", help="directory for train.txt, valid.txt and test.txt")
    defaults = CopyTaskConfig()
    helps = {
        "length": "tokens to copy per example",
        "vocab_size": "symbols sampled uniformly",
        "train": "training examples",
        "valid": "validation examples",
        "test": "test examples",
        "seed": "seed of the sampler",
    }
    for field in dataclasses.fields(CopyTaskConfig):
        flag = "--" + field.name.replace("_", "-")
        help_text = f"{helps[field.name]} (default: %(default)s)"
        parser.add_argument(flag, type=int, default=getattr(defaults, field.name), help=help_text)
    args = parser.parse_args(argv)
    config = CopyTaskConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(CopyTaskConfig)})
    paths = write_copy_task(args.out_dir, config)
    floor = entropy_floor(config.length, config.vocab_size)
    print(f"wrote {', '.join(str(p) for p in paths.values())}; entropy floor {floor:.4f} nats/token")


if __name__ == "__main__":
    main()
