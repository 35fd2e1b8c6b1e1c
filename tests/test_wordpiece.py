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
