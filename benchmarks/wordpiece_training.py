"""WordPiece training time: infolm's deterministic trainer against the ``tokenizers`` library's
``WordPieceTrainer``, on the training lines the ``masked-lm`` task trains its tokenizer on.

    python benchmarks/wordpiece_training.py --data ptb --vocab-size 8000 --repeats 3 --json

Both run in this process, alternating, ``--repeats`` times each; the median wall time of each is
reported, with the ratio. Also reported: whether every infolm training gave the same vocabulary
(digest), how many distinct vocabularies the library's repeats gave, and how many tokens the two
token sets differ by (the library counts a ``[UNK]`` in the text as the words ``[``, ``unk``, ``]``;
infolm does not: ``--drop-unk`` removes ``<unk>`` to compare the algorithms alone). Set
``RAYON_NUM_THREADS=1`` to hold the library to one thread, as infolm is.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from infolm.config import DataConfig
from infolm.data.datasets import load_corpus
from infolm.data.wordpiece import CONTINUATION, SPECIALS, UNK, WordPiece, WordPieceConfig, _normalize_unk
from infolm.tasks.wordpiece_run import corpus_lines


def library_wordpiece(lines: list[str], config: WordPieceConfig) -> Any:
    """The trainer infolm used before: ``tokenizers.trainers.WordPieceTrainer`` with the same settings."""
    import tokenizers as tk

    tokenizer = tk.Tokenizer(tk.models.WordPiece(unk_token=UNK, continuing_subword_prefix=CONTINUATION))
    tokenizer.normalizer = tk.normalizers.BertNormalizer(lowercase=config.lowercase, strip_accents=config.lowercase)
    tokenizer.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    trainer = tk.trainers.WordPieceTrainer(
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        special_tokens=list(SPECIALS),
        continuing_subword_prefix=CONTINUATION,
        show_progress=False,
    )
    tokenizer.train_from_iterator((_normalize_unk(line) for line in lines), trainer=trainer)
    return tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="ptb", help="a registered word-level dataset")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--min-frequency", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--drop-unk", action="store_true", help="remove <unk> from the lines (compares the algorithms)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    lines = corpus_lines(load_corpus(DataConfig(name=args.data)), "train")
    if args.drop_unk:
        lines = [" ".join(word for word in line.split(" ") if word != "<unk>") for line in lines]
    config = WordPieceConfig(vocab_size=args.vocab_size, min_frequency=args.min_frequency)
    infolm_seconds, library_seconds, digests, library_vocabs = [], [], set(), set()
    ours: dict[str, int] = {}
    theirs: dict[str, int] = {}
    for _ in range(args.repeats):
        start = time.perf_counter()
        wordpiece = WordPiece.train(lines, config)
        infolm_seconds.append(time.perf_counter() - start)
        digests.add(wordpiece.digest())
        ours = wordpiece.tokenizer.get_vocab()
        start = time.perf_counter()
        library = library_wordpiece(lines, config)
        library_seconds.append(time.perf_counter() - start)
        theirs = library.get_vocab()
        library_vocabs.add(tuple(sorted(theirs.items(), key=lambda item: item[1])))
    result = {
        "data": args.data,
        "lines": len(lines),
        "words": sum(len(line.split()) for line in lines),
        "vocab_size": args.vocab_size,
        "drop_unk": args.drop_unk,
        "infolm_s": statistics.median(infolm_seconds),
        "library_s": statistics.median(library_seconds),
        "ratio": statistics.median(infolm_seconds) / statistics.median(library_seconds),
        "infolm_distinct_vocabularies": len(digests),
        "library_distinct_vocabularies": len(library_vocabs),
        "token_sets_differ_by": len(set(ours) ^ set(theirs)),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value:.3f}" if isinstance(value, float) else f"{key}: {value}")


if __name__ == "__main__":
    main()
