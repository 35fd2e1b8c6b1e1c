"""N-gram models: hand-computed KN / absolute discounting, normalization, a brute-force reference,
ARPA round trips, KenLM agreement and the KN bigram of the IMM paper's Table 1."""

from __future__ import annotations

import functools
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from infolm.data.corpus import Corpus, read_text
from infolm.data.vocab import Vocab
from infolm.errors import InfolmError
from infolm.ngram import build_ngram, count_ngrams, estimate_discounts, read_arpa, write_arpa
from infolm.ngram.cli import build_command, eval_command

PTB = Path(__file__).resolve().parents[1] / "src" / "infolm" / "data" / "ptb"
METHODS = ("modified-kn", "kn", "absolute")
TINY = [0, 1, 0, 1, 0, 2]  # a b a b a c, V = 3, no history


@functools.lru_cache(maxsize=1)
def ptb() -> Corpus:
    texts = {s: read_text(PTB / f"ptb.{s}.txt.gz") for s in ("train", "valid", "test")}
    return Corpus.from_texts("ptb", "word", texts)


def zipf_stream(vocab_size: int, length: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab_size + 1)
    return rng.choice(vocab_size, size=length, p=p / p.sum())


def all_contexts(vocab_size: int, length: int) -> torch.Tensor:
    grid = torch.cartesian_prod(*[torch.arange(vocab_size)] * length) if length > 1 else torch.arange(vocab_size)
    return grid.reshape(-1, length)


# --- hand-computed values ---------------------------------------------------------------------


def test_modified_kn_discounts_from_counts_of_counts() -> None:
    counts = np.array([1, 1, 1, 1, 2, 2, 2, 3, 3, 4, 7])  # n1..n4 = 4, 3, 2, 1
    (d1, d2, d3), fallback = estimate_discounts(counts, "modified-kn")
    y = 4 / (4 + 2 * 3)  # Chen & Goodman Eq. 26
    assert not fallback
    assert (d1, d2, d3) == pytest.approx((1 - 2 * y * 3 / 4, 2 - 3 * y * 2 / 3, 3 - 4 * y * 1 / 2))
    assert estimate_discounts(counts, "kn")[0] == pytest.approx((y, y, y))
    assert estimate_discounts(np.array([1, 2, 2]), "modified-kn") == ((0.5, 1.0, 1.5), True)  # no n3, n4


def test_absolute_discounting_tiny_by_hand() -> None:
    model = build_ngram(TINY, 3, 2, "absolute", history_id=None)
    # unigram counts 3,2,1 -> D = 1/3; P(w) = (c - D)/6 + (3 D / 6) / 3
    assert model.tables[0].prob == pytest.approx([1 / 2, 1 / 3, 1 / 6])
    # bigram counts (a,b)=2 (b,a)=2 (a,c)=1 -> D = 1/5; gamma(a) = 2 D / 3, gamma(b) = D / 2
    dist = model.next_token_distribution(torch.tensor([[0], [1], [2]])).double()
    expected = [[1 / 15, 29 / 45, 13 / 45], [1.8 / 2 + 0.1 / 2, 0.1 / 3, 0.1 / 6], [1 / 2, 1 / 3, 1 / 6]]
    assert dist.numpy() == pytest.approx(np.array(expected), abs=1e-7)


def test_kneser_ney_tiny_by_hand() -> None:
    model = build_ngram(TINY, 3, 2, "kn", history_id=None)
    # continuation counts N1+(. w) = 1, 1, 1, plus one "start" history for a (the first token)
    # -> 2, 1, 1; D = 2 / (2 + 2) = 1/2; P(w) = (N - D)/4 + (3 D / 4) / 3 = 1/2, 1/4, 1/4
    assert model.tables[0].prob == pytest.approx([1 / 2, 1 / 4, 1 / 4])
    dist = model.next_token_distribution(torch.tensor([[0]])).double()[0]
    assert dist.numpy() == pytest.approx([1 / 15, 19 / 30, 9 / 30], abs=1e-7)  # raw counts at the top, D = 1/5


def test_modified_kn_tiny_by_hand_with_fallback_discounts() -> None:
    model = build_ngram(TINY, 3, 2, "modified-kn", history_id=None)
    assert model.discounts == [(0.5, 1.0, 1.5), (0.5, 1.0, 1.5)] and model.fallback_orders == [1, 2]
    assert model.tables[0].prob == pytest.approx([5 / 12, 7 / 24, 7 / 24])  # N = 2,1,1; D2 = 1, D1 = 1/2
    dist = model.next_token_distribution(torch.tensor([[0]])).double()[0]
    assert dist.numpy() == pytest.approx([10 / 48, 23 / 48, 15 / 48], abs=1e-7)


# --- a brute-force reference: the interpolated recursion with Python dicts ---------------------


def reference_probability(stream: list[int], vocab_size: int, order: int, method: str):
    """P(w | context) by the textbook recursion (Chen & Goodman), slow and obvious."""
    grams = {k: Counter(tuple(stream[i : i + k]) for i in range(len(stream) - k + 1)) for k in range(1, order + 1)}

    def adjusted(k: int) -> Counter:
        if k == order or method == "absolute":
            return grams[k]
        left = Counter(g[1:] for g in grams[k + 1])
        left[tuple(stream[:k])] += 1  # the n-gram at the start of the stream: one "start" history
        return left

    table = {k: adjusted(k) for k in range(1, order + 1)}
    discounts = {k: estimate_discounts(np.array(list(table[k].values())), method)[0] for k in table}

    def prob(w: int, context: tuple[int, ...]) -> float:
        k = len(context) + 1
        lower = 1.0 / vocab_size if k == 1 else prob(w, context[1:])
        counts = {g[-1]: c for g, c in table[k].items() if g[:-1] == context}
        total = sum(counts.values())
        if total == 0:
            return lower
        d = discounts[k]
        disc = {v: min(d[min(c, 3) - 1], c) for v, c in counts.items()}
        gamma = sum(disc.values()) / total
        return (counts.get(w, 0) - disc.get(w, 0)) / total + gamma * lower

    return prob


@pytest.mark.parametrize("method", METHODS)
def test_trigram_matches_the_brute_force_recursion(method: str) -> None:
    stream = zipf_stream(7, 400, seed=1).tolist()
    model = build_ngram(stream, 7, 3, method, history_id=None)
    reference = reference_probability(stream, 7, 3, method)
    contexts = all_contexts(7, 2)
    dist = model.next_token_distribution(contexts).double().numpy()
    expected = np.array([[reference(w, tuple(c)) for w in range(7)] for c in contexts.tolist()])
    assert dist == pytest.approx(expected, abs=1e-6)


# --- normalization and consistency -------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_every_context_gives_a_distribution(method: str) -> None:
    vocab_size = 9  # the last two ids never occur: only the uniform floor gives them mass
    model = build_ngram(zipf_stream(7, 600), vocab_size, 3, method, history_id=0)
    for length in (0, 1, 2):
        dist = model.next_token_distribution(all_contexts(vocab_size, length) if length else torch.zeros(5, 0).long())
        assert dist.dtype == torch.float32 and dist.shape[1] == vocab_size
        assert (dist > 0).all()
        assert torch.allclose(dist.double().sum(1), torch.ones(len(dist), dtype=torch.float64), atol=1e-6)


@pytest.mark.parametrize("order", (1, 2, 4))
def test_stream_scores_equal_the_batched_distributions(order: int) -> None:
    train, test = zipf_stream(11, 3000, seed=2), zipf_stream(11, 200, seed=3)
    model = build_ngram(train, 11, order, "modified-kn", history_id=0)
    log_probs = model.token_log_probs(test)
    history = np.concatenate([[0], test])
    for i in range(len(test)):  # token i of test sits at i + 1 in history; context = the previous order-1
        context = torch.from_numpy(history[max(0, i + 2 - order) : i + 1][None, :])
        p = model.next_token_distribution(context)[0, test[i]].item()
        assert math.log(p) == pytest.approx(log_probs[i], abs=1e-5)
    total, n = model.log_prob_stream(torch.from_numpy(test))
    assert n == len(test) and total == pytest.approx(log_probs.sum())


def test_counts_and_bigram_statistics() -> None:
    counts = count_ngrams(TINY, 3, 3, history_id=None)
    assert counts.words(2).tolist() == [[0, 1], [0, 2], [1, 0]] and counts.raw(2).tolist() == [2, 1, 2]
    assert counts.raw(1).tolist() == [3, 2, 1]
    assert counts.context_counts().tolist() == [3, 2, 0]
    assert counts.distinct_continuations().tolist() == [2, 1, 0]
    assert counts.distinct_histories().tolist() == [1, 1, 1]
    assert counts.continuation(2).tolist() == [2, 1, 1]  # (a b) preceded by b, plus the start


def test_bad_inputs_are_user_errors() -> None:
    with pytest.raises(InfolmError, match="method"):
        build_ngram(TINY, 3, 2, "witten-bell")
    with pytest.raises(InfolmError, match="lie in"):
        build_ngram([0, 5], 3, 2)
    with pytest.raises(InfolmError, match="too short"):
        build_ngram([0, 1], 3, 4, history_id=None)


# --- ARPA ---------------------------------------------------------------------------------------


def tiny_vocab(size: int) -> Vocab:
    return Vocab(["<eos>"] + [f"w{i}" for i in range(1, size)])


@pytest.mark.parametrize("method", METHODS)
def test_arpa_round_trip_gives_the_same_probabilities(method: str, tmp_path: Path) -> None:
    vocab = tiny_vocab(8)
    model = build_ngram(zipf_stream(8, 800), 8, 3, method, history_id=0)
    path = tmp_path / "lm.arpa"
    write_arpa(model, path, vocab)
    assert [p.name for p in tmp_path.iterdir()] == ["lm.arpa"]  # no temporary file left behind
    again = read_arpa(path, vocab)
    contexts = all_contexts(8, 2)
    assert torch.allclose(again.next_token_distribution(contexts), model.next_token_distribution(contexts), atol=1e-7)
    stream = zipf_stream(8, 300, seed=5)
    assert again.token_log_probs(stream) == pytest.approx(model.token_log_probs(stream), abs=1e-8)
    with pytest.raises(InfolmError, match="no counts"):
        again.counts.raw(1)
    header = path.read_text().splitlines()[:5]
    assert header == [
        "\\data\\",
        f"ngram 1={8 + 3}",
        f"ngram 2={model.num_grams(2)}",
        f"ngram 3={model.num_grams(3)}",
        "",
    ]


def test_a_hand_written_arpa_file_has_backoff_semantics(tmp_path: Path) -> None:
    lg = math.log10
    text = (
        "\\data\\\nngram 1=4\nngram 2=2\n\n\\1-grams:\n"
        f"{lg(0.1)}\t<eos>\t-0.5\n{lg(0.3)}\tw1\n{lg(0.6)}\tw2\t-0.2\n-99\t<s>\t0\n\n"  # some without backoff
        f"\\2-grams:\n{lg(0.5)}\t<eos> w1\n{lg(0.7)}\tw2 w2\n\n\\end\\\n"
    )
    (tmp_path / "hand.arpa").write_text(text)
    model = read_arpa(tmp_path / "hand.arpa", tiny_vocab(3))
    dist = model.next_token_distribution(torch.tensor([[0], [1], [2]])).double().numpy()
    unigram = np.array([0.1, 0.3, 0.6])
    expected = [[0.1 * 10**-0.5, 0.5, 0.6 * 10**-0.5], unigram, [0.1 * 10**-0.2, 0.3 * 10**-0.2, 0.7]]
    assert dist == pytest.approx(np.array(expected), rel=1e-6)
    log_probs = model.token_log_probs([1, 2, 2, 0])  # after <eos>: w1 | <eos>, w2 | w1, w2 | w2, <eos> | w2
    assert np.exp(log_probs) == pytest.approx([0.5, 0.6, 0.7, 0.1 * 10**-0.2])


def test_whitespace_tokens_are_escaped(tmp_path: Path) -> None:
    vocab = Vocab(["<eos>", " ", "a", "b"])
    model = build_ngram(zipf_stream(4, 200), 4, 2, "kn")
    write_arpa(model, tmp_path / "c.arpa", vocab)
    assert "<0x20>" in (tmp_path / "c.arpa").read_text()
    assert read_arpa(tmp_path / "c.arpa", vocab).tables[0].prob == pytest.approx(model.tables[0].prob)


@pytest.mark.parametrize(
    "text, message",
    [
        ("hello\n", "no \\\\data"),
        ("\\data\\\nngram 1=2\n\n\\1-grams:\n-0.3\t<eos>\n", "truncated"),
        ("\\data\\\nngram 1=3\n\n\\1-grams:\n-0.3\t<eos>\n-0.3\tw1\n\\end\\\n", "declares 3"),
        ("\\data\\\nngram 1=2\n\n\\1-grams:\n-0.3\t<eos>\n-0.3\tzzz\n\\end\\\n", "zzz"),
        ("\\data\\\nngram 1=2\n\n\\1-grams:\nx\t<eos>\n-0.3\tw1\n\\end\\\n", "bad number"),
        ("\\data\\\nngram 1=1\n\n\\1-grams:\n-0.3\t<eos>\n\\end\\\n", "no unigram"),
    ],
)
def test_bad_arpa_files_are_one_line_errors(text: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.arpa"
    path.write_text(text)
    with pytest.raises(InfolmError, match=message) as error:
        read_arpa(path, tiny_vocab(2))
    assert "\n" not in str(error.value)


def test_cli_build_and_eval(tmp_path: Path) -> None:
    corpus = Corpus.from_texts("toy", "word", {"train": "a b c a b\nb c a\n" * 20, "valid": "a c b\n"})
    report = build_command(corpus, 2, str(tmp_path / "m.arpa"), "modified-kn")
    assert report["ngrams"][1] == len(corpus.vocab) and (tmp_path / "m.arpa").is_file()
    result = eval_command(str(tmp_path / "m.arpa"), corpus, "valid")
    model = build_ngram(corpus.stream("train"), len(corpus.vocab), 2, "modified-kn", history_id=corpus.vocab.eos_id)
    assert result["tokens"] == 4 and result["ppl"] == pytest.approx(model.perplexity(corpus.stream("valid")), rel=1e-8)
    assert result["nll"] == pytest.approx(math.log(result["ppl"]))
    with pytest.raises(InfolmError, match="not found"):
        eval_command(str(tmp_path / "missing.arpa"), corpus, "valid")


# --- PTB ----------------------------------------------------------------------------------------


def test_kenlm_scores_an_infolm_arpa_file_like_infolm(tmp_path: Path) -> None:
    kenlm = pytest.importorskip("kenlm")
    corpus = ptb()
    train = corpus.stream("train")[:60000]
    model = build_ngram(train, len(corpus.vocab), 3, "modified-kn", history_id=corpus.vocab.eos_id)
    write_arpa(model, tmp_path / "ptb3.arpa", corpus.vocab)
    valid = corpus.stream("valid")[:5000]
    scores = list(
        kenlm.Model(str(tmp_path / "ptb3.arpa")).full_scores(
            "<eos> " + " ".join(corpus.vocab.decode(valid.tolist())), bos=False, eos=False
        )
    )[1:]  # drop the unigram score of the leading <eos>: it is the history, not a prediction
    kenlm_ppl = 10.0 ** (-sum(s[0] for s in scores) / len(scores))
    assert len(scores) == len(valid)
    assert kenlm_ppl == pytest.approx(model.perplexity(valid), rel=1e-4)


def test_kneser_ney_bigram_reproduces_imm_table_1() -> None:
    corpus = ptb()
    model = build_ngram(corpus.stream("train"), len(corpus.vocab), 2, "modified-kn", history_id=corpus.vocab.eos_id)
    paper = {"train": 92.19, "valid": 199.28, "test": 185.71}  # IMM paper, Table 1, Kneser-Ney column
    for split, value in paper.items():
        assert model.perplexity(corpus.stream(split)) == pytest.approx(value, abs=0.5)
