"""A researcher's own text files (``data.name=path``): unseen tokens read as <unk> and counted, a vocabulary
cut by count or size, one error for every missing file, a training text too short for the batch, and
n-gram models of the same files with the same vocabulary."""

import json

import pytest

from infolm.config import DataConfig, load_config
from infolm.data import load_corpus
from infolm.data.vocab import Vocab
from infolm.errors import InfolmError
from tests.conftest import ROOT, run_cli, run_in_process


def write_splits(tmp_path, train, valid, test):
    for split, text in (("train", train), ("valid", valid), ("test", test)):
        (tmp_path / f"{split}.txt").write_text(text)
    return {split: str(tmp_path / f"{split}.txt") for split in ("train", "valid", "test")}


def own_text(tmp_path, train, valid, test, **settings):
    return load_corpus(DataConfig(name="path", **write_splits(tmp_path, train, valid, test), **settings))


def test_unseen_words_are_read_as_unk_and_counted(tmp_path):
    corpus = own_text(tmp_path, "the cat sat\nthe dog sat\n", "the zebra sat\n", "a cat\nthe cat\n")
    assert corpus.vocab.itos == ["<eos>", "<unk>", "the", "sat", "cat", "dog"]
    assert corpus.vocab.decode(corpus.stream("valid").tolist()) == ["the", "<unk>", "sat", "<eos>"]
    assert [corpus.unk_read(split) for split in ("train", "valid", "test")] == [0, 1, 1]
    assert corpus.unk_note() == (
        "tokens read as <unk> (no id among the vocabulary's 6): train 0 (0.0%), valid 1 (25.0%), test 1 (16.7%)"
    )


def test_text_whose_words_all_occur_in_train_gets_no_unk(tmp_path):
    """The vocabulary of files that loaded before <unk> was added on demand is unchanged."""
    corpus = own_text(tmp_path, "the cat sat\nthe dog sat\n", "the dog\n", "cat sat\n")
    assert corpus.vocab.itos == Vocab.from_tokens(["the", "cat", "sat", "<eos>", "the", "dog", "sat", "<eos>"]).itos
    assert "<unk>" not in corpus.vocab and corpus.unk_note() is None


def test_unk_of_the_text_keeps_its_rank_and_is_not_counted(tmp_path):
    corpus = own_text(tmp_path, "a <unk> b\n<unk> a <unk>\n", "a zebra <unk>\n", "b\n")
    assert corpus.vocab.itos == ["<eos>", "<unk>", "a", "b"]  # <unk> 3 times, a twice, <eos> first
    assert corpus.unk_read("valid") == 1  # zebra; the text's own <unk> is a token like any other
    assert corpus.unk_read("train") == 0


def test_unseen_characters_are_read_as_unk(tmp_path):
    corpus = own_text(tmp_path, "abc\ncab\n", "abz\n", "a\n", level="char")
    assert corpus.vocab.itos == ["<eos>", "<unk>", "a", "b", "c"]
    assert corpus.unk_read("valid") == 1 and corpus.unk_read("test") == 0


@pytest.mark.parametrize(
    "settings, itos, train_unk",
    [
        ({}, ["<eos>", "a", "b", "c", "d", "e"], 0),
        ({"min_count": 2}, ["<eos>", "<unk>", "a", "b"], 3),
        ({"min_count": 3}, ["<eos>", "<unk>", "a"], 5),
        ({"max_vocab": 6}, ["<eos>", "a", "b", "c", "d", "e"], 0),  # it fits: nothing cut, no <unk>
        ({"max_vocab": 5}, ["<eos>", "<unk>", "a", "b", "c"], 2),  # c, d, e tie: the first seen is kept
        ({"max_vocab": 3}, ["<eos>", "<unk>", "a"], 5),
        ({"min_count": 2, "max_vocab": 10}, ["<eos>", "<unk>", "a", "b"], 3),
    ],
)
def test_min_count_and_max_vocab_give_the_vocabulary(tmp_path, settings, itos, train_unk):
    corpus = own_text(tmp_path, "a b c a\nd b a e\n", "a b\n", "a\n", **settings)
    assert corpus.vocab.itos == itos
    assert corpus.unk_read("train") == train_unk


def test_bad_vocabulary_settings_name_their_key():
    with pytest.raises(InfolmError, match=r"^data\.min_count must be at least 1"):
        DataConfig(min_count=0)
    with pytest.raises(InfolmError, match=r"^data\.max_vocab must be at least 3"):
        DataConfig(max_vocab=2)
    with pytest.raises(InfolmError, match=r"data\.max_vocab must be of type int"):
        load_config(ROOT / "configs/tiny.yaml", ["data.max_vocab=many"])


def test_ptb_with_max_vocab_of_its_size_is_ptb():
    """PTB's text has <unk>: a cut keeps it, and data.max_vocab=10000 is PTB's own vocabulary."""
    capped = load_corpus(DataConfig(name="ptb", max_vocab=10000))
    assert capped.vocab.digest() == "c5acd74081b7beac"  # data.name=ptb's vocabulary, as before max_vocab existed
    assert capped.unk_note() is None  # every <unk> of PTB is written in its text
    small = load_corpus(DataConfig(name="ptb", max_vocab=50, max_train_tokens=2000, max_eval_tokens=2000))
    assert len(small.vocab) == 50 and small.vocab.itos[:3] == ["<eos>", "the", "<unk>"]


def test_every_missing_file_is_named_in_one_error(tmp_path):
    (tmp_path / "valid.txt").write_text("a b\n")
    config = DataConfig(name="path", train=str(tmp_path / "nope.txt"), valid=str(tmp_path / "valid.txt"))
    with pytest.raises(InfolmError) as error:
        load_corpus(config)
    message = str(error.value)
    assert f"data.train {tmp_path / 'nope.txt'} not found" in message
    assert "data.test is not set" in message and "data.valid" not in message


def test_short_training_file_is_one_line_and_writes_nothing(tmp_path):
    write_splits(tmp_path, "the cat sat\non the mat\n", "the cat\n", "the mat\n")
    args = ["data.name=path", "data.train=train.txt", "data.valid=valid.txt", "data.test=test.txt", "run.dir=run"]
    result = run_cli("train", str(ROOT / "configs/tiny.yaml"), *args, cwd=tmp_path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        "infolm: error: data.train train.txt has 8 tokens, too few for data.batch_size=8 rows of 2 tokens or "
        "more; data.batch_size=4 or less fits (a whole data.bptt=20 window needs 21 tokens), or use a longer text"
    ]
    assert not (tmp_path / "run").exists()


def test_train_ngram_and_neural_model_share_the_vocabulary_of_own_files(tmp_path):
    from infolm.ngram.arpa import read_arpa

    lines = [f"w{i % 4} w{i % 3} x{i % 30}" for i in range(60)]  # every x twice: under data.min_count=3
    files = write_splits(tmp_path, "\n".join(lines) + "\n", "w1 w2 zebra\n", "w3 w4\nw0 okapi w1\n")
    data = ["data.name=path", *(f"data.{split}={path}" for split, path in files.items()), "data.min_count=3"]
    trained = run_in_process(
        "train", "configs/tiny.yaml", f"run.dir={tmp_path / 'run'}", *data, "train.max_steps=2", "train.eval_every=2"
    )
    assert trained.returncode == 0, trained.stderr
    note = "infolm: note: data: tokens read as <unk> (no id among the vocabulary's 6): "
    assert trained.stderr.splitlines() == [note + "train 60 (25.0%), valid 1 (25.0%), test 2 (28.6%)"]
    arpa = tmp_path / "kn2.arpa"
    built = run_in_process("ngram", "build", "--order", "2", "--out", str(arpa), *data, "--json")
    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout)["train_tokens"] == 240
    run_vocab = Vocab.load(tmp_path / "run/vocab.json")
    assert run_vocab.itos == ["<eos>", "<unk>", "w0", "w1", "w2", "w3"]
    read_arpa(arpa, run_vocab)  # every token of the run's vocabulary has a unigram, and no other token
    scored = run_in_process("ngram", "eval", str(arpa), "--split", "test", "--json", *data)
    assert scored.returncode == 0, scored.stderr
    assert json.loads(scored.stdout)["tokens"] == 7
    (tmp_path / "data.yaml").write_text("data: {name: path, min_count: 3}\n")
    from_config = run_in_process(
        "ngram", "eval", str(arpa), "--split", "test", "--json", "--config", str(tmp_path / "data.yaml"), *data[1:4]
    )
    assert from_config.stdout == scored.stdout


def test_ngram_refuses_settings_other_than_data(tmp_path):
    result = run_in_process("ngram", "build", "--out", str(tmp_path / "x.arpa"), "run.dir=x")
    assert result.returncode != 0
    assert result.stderr.strip() == (
        "infolm: error: infolm ngram takes data.* settings only (as infolm train reads them), got 'run.dir=x'"
    )
    assert not (tmp_path / "x.arpa").exists()
