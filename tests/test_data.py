import gzip

import pytest
import torch

from infolm.config import DataConfig
from infolm.data import load_corpus
from infolm.data.batching import IGNORE_INDEX, StreamBatcher, eval_rows
from infolm.data.datasets import sha256_of
from infolm.errors import InfolmError
from tests.conftest import DATA_MIRROR, ROOT


@pytest.fixture(scope="module")
def ptb():
    return load_corpus(DataConfig(name="ptb"))


def test_ptb_is_embedded_and_has_the_published_sizes(ptb):
    assert len(ptb.vocab) == 10000
    assert ptb.stream("test").numel() == 82430  # <eos> counted (docs/recipes.md)
    assert ptb.stream("train").numel() == 887521 + 42068
    assert ptb.vocab.itos[ptb.stream("train")[-1]] == "<eos>"
    assert sha256_of(ROOT / "src/infolm/data/ptb/ptb.train.txt.gz") == (
        "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf"
    )


def test_sentences_are_the_lines(ptb):
    first = ptb.vocab.decode(ptb.sentence("valid", 0).tolist())
    line = (
        gzip.decompress((ROOT / "src/infolm/data/ptb/ptb.valid.txt.gz").read_bytes()).decode().splitlines()[0].split()
    )
    assert first == line + ["<eos>"]
    assert ptb.num_sentences("valid") == 3370


def test_ptb_char_is_derived_the_mikolov_way():
    corpus = load_corpus(DataConfig(name="ptb-char", max_train_tokens=5000))
    first = "".join(corpus.vocab.decode(corpus.sentence("train", 0)[:-1].tolist()))
    assert first.startswith("aer_banknote_berlitz")
    assert corpus.level == "char"
    assert "_" in corpus.vocab and " " not in corpus.vocab


def test_mirror_serves_a_dataset_cut_into_splits(monkeypatch, tmp_path):
    lines = [f"line {i}: " + "abc"[i % 3] * (i % 7 + 1) for i in range(200)]
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare/input.txt.gz").write_bytes(gzip.compress("\n".join(lines).encode()))
    monkeypatch.setenv("INFOLM_DATA_MIRROR", str(tmp_path))
    monkeypatch.setenv("INFOLM_DATA", str(tmp_path / "cache"))
    monkeypatch.setenv("INFOLM_OFFLINE", "1")
    corpus = load_corpus(DataConfig(name="tinyshakespeare"))
    # 90/5/5 of the lines; every character counts, plus one end-of-line symbol per line
    sizes = {"train": lines[:180], "valid": lines[180:190], "test": lines[190:]}
    for split, part in sizes.items():
        assert corpus.stream(split).numel() == len(part) + sum(len(line) for line in part)
    first = "".join(corpus.vocab.decode(corpus.sentence("valid", 0)[:-1].tolist()))
    assert first == lines[180]


@pytest.mark.skipif(
    DATA_MIRROR is None or not (DATA_MIRROR / "tinyshakespeare/input.txt.gz").is_file(),
    reason="needs INFOLM_DATA_MIRROR with tinyshakespeare/input.txt.gz",
)
def test_real_mirror_serves_tinyshakespeare(monkeypatch):
    assert DATA_MIRROR is not None
    monkeypatch.setenv("INFOLM_OFFLINE", "1")
    corpus = load_corpus(DataConfig(name="tinyshakespeare"))
    text = gzip.decompress((DATA_MIRROR / "tinyshakespeare/input.txt.gz").read_bytes()).decode()
    total = sum(corpus.stream(s).numel() for s in ("train", "valid", "test"))
    assert total == len(text.splitlines()) + sum(len(line) for line in text.splitlines())
    assert sha256_of(DATA_MIRROR / "tinyshakespeare/input.txt.gz") == (
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
    )


def test_offline_without_mirror_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("INFOLM_DATA_MIRROR", str(tmp_path))
    monkeypatch.setenv("INFOLM_DATA", str(tmp_path))
    monkeypatch.setenv("INFOLM_OFFLINE", "1")
    with pytest.raises(InfolmError, match="INFOLM_OFFLINE"):
        load_corpus(DataConfig(name="wikitext-2"))


def test_user_files(tmp_path):
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text("a b c\nb c a a\n")
    config = DataConfig(
        name="path",
        train=str(tmp_path / "train.txt"),
        valid=str(tmp_path / "valid.txt"),
        test=str(tmp_path / "test.txt"),
    )
    corpus = load_corpus(config)
    assert corpus.stream("train").numel() == 9
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(InfolmError, match="is empty"):
        load_corpus(DataConfig(name="path", train=str(tmp_path / "empty.txt"), valid=config.valid, test=config.test))
    (tmp_path / "bin.txt").write_bytes(b"\x00\x01\x02abc")
    with pytest.raises(InfolmError, match="binary"):
        load_corpus(DataConfig(name="path", train=str(tmp_path / "bin.txt"), valid=config.valid, test=config.test))
    with pytest.raises(InfolmError, match="not found"):
        load_corpus(DataConfig(name="path", train=str(tmp_path / "nope.txt"), valid=config.valid, test=config.test))
    with pytest.raises(InfolmError, match="unknown dataset"):
        load_corpus(DataConfig(name="ptb2"))


def test_eval_rows_cover_every_token_once():
    stream = torch.arange(1, 24)
    inputs, targets = eval_rows(stream, eos_id=0, batch_size=4)
    valid = targets != IGNORE_INDEX
    assert torch.equal(targets[valid], stream)
    history = torch.cat([torch.tensor([0]), stream[:-1]])
    assert torch.equal(inputs[valid], history)


def test_stream_batcher_resumes_exactly():
    stream = torch.arange(1000)
    a = StreamBatcher(stream, 4, 10, variable=True, seed=3)
    first = [a.next_window() for _ in range(5)]
    state = a.state_dict()
    rest = [a.next_window() for _ in range(5)]
    b = StreamBatcher(stream, 4, 10, variable=True, seed=99)
    b.load_state_dict(state)
    for w, v in zip(rest, [b.next_window() for _ in range(5)]):
        assert torch.equal(w.inputs, v.inputs) and w.lr_scale == v.lr_scale
    assert all(torch.equal(w.targets[:, :-1], w.inputs[:, 1:]) for w in first)
