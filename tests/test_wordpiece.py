"""WordPiece tokenizer: specials, save/load, word boundaries, <unk>."""

from __future__ import annotations

from infolm.data.wordpiece import SPECIALS, WordPiece, WordPieceConfig

TEXT = ["the quick brown fox jumps over the lazy dog", "the dogs jumped over quickly <unk>"] * 20


def test_trained_tokenizer_round_trips_and_marks_continuations(tmp_path):
    wordpiece = WordPiece.train(TEXT, WordPieceConfig(vocab_size=60, min_frequency=1))
    assert [wordpiece.id_to_token(i) for i in range(len(SPECIALS))] == list(SPECIALS)
    ids = wordpiece.encode(["the lazy dogs jumped", "a <unk> fox"])
    wordpiece.save(tmp_path / "tokenizer.json")
    loaded = WordPiece.load(tmp_path / "tokenizer.json")
    assert loaded.encode(["the lazy dogs jumped", "a <unk> fox"]) == ids
    assert loaded.digest() == wordpiece.digest()
    assert wordpiece.unk_id in ids[1]
    continuation = wordpiece.continuation_table()
    pieces = [wordpiece.id_to_token(i) for i in ids[0]]
    assert [bool(continuation[i]) for i in ids[0]] == [p.startswith("##") for p in pieces]
    starts = sum(1 for i in ids[0] if not continuation[i])
    assert starts == 4  # one first piece per word
    assert wordpiece.decode(ids[0]) == "the lazy dogs jumped"


def test_a_run_takes_its_own_or_its_init_from_tokenizer_and_refuses_another(tmp_path):
    import pytest

    from infolm.errors import InfolmError
    from infolm.tasks.wordpiece_run import TOKENIZER_FILE, run_tokenizer, save_tokenizer

    settings = WordPieceConfig(vocab_size=60, min_frequency=1)
    pretrained, other, run = tmp_path / "pretrained", tmp_path / "other", tmp_path / "run"
    save_tokenizer(WordPiece.train(TEXT, settings), pretrained)
    save_tokenizer(WordPiece.train(TEXT[:1], settings), other)
    taken = run_tokenizer(run, str(pretrained), lambda: [], settings)
    assert taken.digest() == WordPiece.load(pretrained / TOKENIZER_FILE).digest()
    save_tokenizer(taken, run)
    with pytest.raises(InfolmError, match="another tokenizer"):
        run_tokenizer(run, str(other), lambda: [], settings)
    with pytest.raises(InfolmError, match="not a run of a WordPiece encoder"):
        run_tokenizer(tmp_path / "fresh", str(tmp_path / "lstm-run"), lambda: [], settings)
