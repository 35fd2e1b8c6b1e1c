"""The reverse copy task (Melis thesis Sec. 2.3.3): line format, entropy floor, files equal the in-memory corpus."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from infolm.config import DataConfig
from infolm.data import load_corpus
from infolm.data.copy_task import (
    MARKER,
    CopyTaskConfig,
    copy_loss,
    copy_task_corpus,
    copy_task_texts,
    entropy_floor,
    write_copy_task,
)
from infolm.errors import InfolmError

SMALL = CopyTaskConfig(length=5, vocab_size=7, train=200, valid=20, test=20, seed=3)


def test_each_line_is_symbols_marker_reversed_symbols() -> None:
    texts = copy_task_texts(SMALL)
    for split in ("train", "valid", "test"):
        lines = texts[split].splitlines()
        assert len(lines) == getattr(SMALL, split)
        for line in lines:
            words = line.split()
            assert len(words) == 2 * SMALL.length + 1 and words[SMALL.length] == MARKER
            assert words[SMALL.length + 1 :] == words[: SMALL.length][::-1]
    assert texts["valid"] != texts["test"]  # each split has its own random stream
    assert copy_task_texts(SMALL) == texts  # reproducible from the seed


def test_entropy_floor_is_ln_v_on_the_input_half_only() -> None:
    corpus = copy_task_corpus(SMALL)
    stream = corpus.stream("valid").tolist()
    marker, eos = corpus.vocab.itos.index(MARKER), corpus.vocab.eos_id
    assert len(stream) == SMALL.valid * (2 * SMALL.length + 2)
    # An oracle pays ln V for each input symbol (between <eos> and the marker) and nothing for the rest.
    losses, reading = [], True
    for token in stream:
        losses.append(math.log(SMALL.vocab_size) if reading and token not in (marker, eos) else 0.0)
        reading = token == eos or (reading and token != marker)
    floor = entropy_floor(SMALL.length, SMALL.vocab_size)
    assert sum(losses) / len(losses) == pytest.approx(floor)
    assert copy_loss(floor, SMALL.length, SMALL.vocab_size) == pytest.approx(0.0)
    assert len(corpus.vocab) == SMALL.vocab_size + 2  # symbols, marker, <eos>


def test_written_files_load_as_the_same_token_streams(tmp_path: Path) -> None:
    paths = write_copy_task(tmp_path, SMALL)
    from_files = load_corpus(DataConfig(name="path", **{s: str(p) for s, p in paths.items()}))
    in_memory = copy_task_corpus(SMALL)
    for split in ("train", "valid", "test"):
        words = from_files.vocab.decode(from_files.stream(split).tolist())
        assert words == in_memory.vocab.decode(in_memory.stream(split).tolist())


def test_too_few_training_examples_for_the_vocabulary_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InfolmError, match="never occur"):
        write_copy_task(tmp_path, CopyTaskConfig(length=2, vocab_size=1000, train=3, valid=50, test=50))
    with pytest.raises(InfolmError, match="length must be positive"):
        CopyTaskConfig(length=0)
