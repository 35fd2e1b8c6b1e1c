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


# --- the deterministic trainer (infolm.data.wordpiece_trainer) ---

TRAIN_IN_A_PROCESS = """
import sys
from infolm.data.wordpiece import WordPiece, WordPieceConfig
lines = [line.rstrip("\\n") for line in open(sys.argv[1])]
WordPiece.train(lines, WordPieceConfig(vocab_size=120, min_frequency=2)).save(sys.argv[2])
"""


def _tie_heavy_lines() -> list[str]:
    """Words of a small alphabet, each twice or three times: many pairs share a count."""
    import random

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 7))) for _ in range(300)]
    return [" ".join(words[i : i + 10]) for i in range(0, len(words), 10)] * 2 + [" ".join(words[::3])]


def test_two_processes_train_the_same_tokenizer_json(tmp_path):
    import os
    import subprocess
    import sys

    lines = _tie_heavy_lines()
    (tmp_path / "lines.txt").write_text("\n".join(lines) + "\n")
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = tmp_path / f"tokenizer-{seed}.json"
        subprocess.run(
            [sys.executable, "-c", TRAIN_IN_A_PROCESS, str(tmp_path / "lines.txt"), str(out)], env=env, check=True
        )
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    here = WordPiece.train(lines, WordPieceConfig(vocab_size=120, min_frequency=2))
    assert len(here) == 120
    assert [here.id_to_token(i) for i in range(len(SPECIALS))] == list(SPECIALS)
    here.save(tmp_path / "here.json")
    assert (tmp_path / "here.json").read_bytes() == outputs[0]


def test_ties_go_to_the_smallest_ids_and_ids_follow_a_fixed_order():
    # "zab" x 3, "ba" x 3: symbols z ##a ##b and b ##a. Ids after the specials: the alphabet a 5, b 6,
    # z 7, the continuations ##a 8, ##b 9. All three pairs occur 3 times: (b, ##a) = (6, 8) is the
    # smallest and merges first ("ba", 10); then (z, ##a) = (7, 8) before (##a, ##b) = (8, 9): "za" 11;
    # then (za, ##b): "zab" 12. (Ordering pairs by their strings would merge "##ab" first.)
    lines = ["zab ba"] * 3
    wordpiece = WordPiece.train(lines, WordPieceConfig(vocab_size=13, min_frequency=1))
    tokens = [wordpiece.id_to_token(i) for i in range(len(wordpiece))]
    assert tokens == [*SPECIALS, "a", "b", "z", "##a", "##b", "ba", "za", "zab"]


def test_min_frequency_and_vocab_size_are_honoured():
    lines = ["zab ba"] * 3
    initial = len(SPECIALS) + 5  # a b z ##a ##b
    assert (
        len(WordPiece.train(lines, WordPieceConfig(vocab_size=50, min_frequency=4))) == initial
    )  # pairs occur 3 times
    assert len(WordPiece.train(lines, WordPieceConfig(vocab_size=50, min_frequency=3))) == initial + 3
    capped = WordPiece.train(lines, WordPieceConfig(vocab_size=initial + 1, min_frequency=1))
    assert [capped.id_to_token(i) for i in range(initial, len(capped))] == ["ba"]
    assert len(WordPiece.train(_tie_heavy_lines(), WordPieceConfig(vocab_size=90, min_frequency=2))) == 90


def _recounting_reference(word_counts, vocab_size, min_frequency, prefix="##"):
    """BPE-style WordPiece training that recounts every pair before each merge (no incremental state)."""
    from infolm.data.wordpiece_trainer import initial_tokens, merge_word

    words = sorted(word_counts)
    tokens = initial_tokens(words, SPECIALS, prefix)
    ids = {token: i for i, token in enumerate(tokens)}
    symbols = [[ids[w[0]], *(ids[prefix + c] for c in w[1:])] for w in words]
    while len(tokens) < vocab_size:
        counts = {}
        for word, s in zip(words, symbols):
            for pair in zip(s, s[1:]):
                counts[pair] = counts.get(pair, 0) + word_counts[word]
        if not counts:
            break
        left, right = min(counts, key=lambda pair: (-counts[pair], pair))
        if counts[(left, right)] < min_frequency:
            break
        token = tokens[left] + tokens[right].removeprefix(prefix)
        if token not in ids:
            ids[token] = len(tokens)
            tokens.append(token)
        symbols = [merge_word(s, left, right, ids[token]) for s in symbols]
    return tokens


def test_incremental_pair_counts_equal_recounting():
    from collections import Counter

    from infolm.data.wordpiece_trainer import train_vocabulary

    counts = Counter(" ".join(_tie_heavy_lines()).split() + ["aaaaa", "aaaa", "abab", "ababab"] * 3)
    for vocab_size, min_frequency in ((150, 1), (400, 2), (1000, 1)):
        expected = _recounting_reference(counts, vocab_size, min_frequency)
        assert train_vocabulary(counts, vocab_size, min_frequency, SPECIALS, "##") == expected


def test_a_training_line_decodes_to_its_normalized_text():
    lines = ["The Café served Crème Brûlée", "the chef served cafe creme daily"] * 3
    wordpiece = WordPiece.train(lines, WordPieceConfig(vocab_size=45, min_frequency=2))
    ids = wordpiece.encode(lines[:1])[0]
    assert any(wordpiece.id_to_token(i).startswith("##") for i in ids)  # some words are split into pieces
    assert wordpiece.decode(ids) == "the cafe served creme brulee"


def test_special_tokens_in_the_text_are_not_subword_material():
    wordpiece = WordPiece.train(["<unk> cat [MASK] <unk>"] * 5, WordPieceConfig(vocab_size=60, min_frequency=1))
    tokens = {wordpiece.id_to_token(i) for i in range(len(wordpiece))}
    assert tokens == {*SPECIALS, "c", "a", "t", "##a", "##t", "ca", "cat"}
    assert wordpiece.encode(["<unk> cat [MASK]"]) == [[wordpiece.unk_id, wordpiece.tokenizer.token_to_id("cat"), 4]]


def test_a_tokenizer_json_of_the_library_trainer_still_loads(tmp_path):
    import tokenizers as tk

    from infolm.data.wordpiece import CONTINUATION, UNK

    tokenizer = tk.Tokenizer(tk.models.WordPiece(unk_token=UNK, continuing_subword_prefix=CONTINUATION))
    tokenizer.normalizer = tk.normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tokenizer.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = tk.decoders.WordPiece(prefix=CONTINUATION)
    trainer = tk.trainers.WordPieceTrainer(
        vocab_size=60, min_frequency=1, special_tokens=list(SPECIALS), show_progress=False
    )
    tokenizer.train_from_iterator(TEXT, trainer=trainer)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    loaded = WordPiece.load(tmp_path / "tokenizer.json")
    ids = loaded.encode(["the lazy dogs jumped"])[0]
    assert ids == [tokenizer.token_to_id(t) for t in tokenizer.encode("the lazy dogs jumped").tokens]
    assert loaded.decode(ids) == "the lazy dogs jumped"


def test_only_the_first_process_writes_the_run_tokenizer(tmp_path, monkeypatch):
    from infolm.tasks.wordpiece_run import TOKENIZER_FILE, save_tokenizer

    tokenizer = WordPiece.train(["the cat sat", "the dog sat"], WordPieceConfig(vocab_size=40))
    monkeypatch.setenv("RANK", "1")  # a second torchrun process: the run directory is the first's to write
    save_tokenizer(tokenizer, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    monkeypatch.setenv("RANK", "0")
    save_tokenizer(tokenizer, tmp_path / "run")
    assert (tmp_path / "run" / TOKENIZER_FILE).exists()
