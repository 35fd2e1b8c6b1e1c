"""Interpolation with an n-gram at evaluation: the mixture is a distribution, alpha = 0 is the model and
alpha = 1 the n-gram as their own scorers give them, every token is paired with the n-gram's probability
of it in its own context (across windows and rows of a stream, from <eos> in a sentence), the tuned alpha
is the known optimum, the n-gram is read onto the run's vocabulary by word, and the CLI end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from infolm.build import build_task
from infolm.config import load_config
from infolm.data import Corpus
from infolm.data.vocab import UNK, Vocab
from infolm.errors import InfolmError
from infolm.evaluation.interpolation import interpolation_report, mix_log_probs, tune_alpha
from infolm.evaluation.perplexity import stream_nll, stream_token_scores
from infolm.models.base import LanguageModel, LMOutput
from infolm.ngram import build_ngram, read_arpa, write_arpa
from infolm.ngram.cli import eval_command
from infolm.ngram.remap import RemappedNgram, read_ngram_onto
from infolm.tasks import TASKS
from tests.conftest import run_in_process, tiny_model

WORDS = [f"w{i}" for i in range(9)]
ORDER = 3  # a trigram: its context reaches two tokens back, across a window or row boundary


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    rng = np.random.default_rng(0)
    zipf = 1.0 / np.arange(1, len(WORDS) + 1)

    def text(lines: int) -> str:
        return "\n".join(
            " ".join(rng.choice(WORDS, size=int(rng.integers(2, 9)), p=zipf / zipf.sum())) for _ in range(lines)
        )

    return Corpus.from_texts("synthetic", "word", {"train": text(300), "valid": text(12), "test": text(15)})


@pytest.fixture(scope="module")
def arpa(corpus, tmp_path_factory) -> str:
    """A modified Kneser-Ney trigram of the training text as ``infolm ngram build`` writes it."""
    vocab = corpus.vocab
    model = build_ngram(corpus.stream("train"), len(vocab), ORDER, "modified-kn", history_id=vocab.eos_id)
    path = tmp_path_factory.mktemp("ngram") / "kn3.arpa"
    write_arpa(model, path, vocab)
    return str(path)


class PreviousTokenLM(LanguageModel):
    """A stateless LM: the logits of the next token are a random row chosen by the previous token, so its
    prediction for a position is known without running it (``expected_log_prob``)."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.table = nn.Embedding(vocab_size, vocab_size)

    def forward(self, tokens: Tensor, state: object = None) -> LMOutput:
        logits = 2.0 * self.table(tokens)  # (B, T, V)
        return LMOutput(logits=logits, hiddens=[logits], state=None)

    def expected_log_prob(self, previous: int, token: int) -> float:
        return float(F.log_softmax(2.0 * self.table.weight[previous].detach().double(), dim=-1)[token])


@pytest.fixture(scope="module")
def lm(corpus) -> PreviousTokenLM:
    torch.manual_seed(0)
    return PreviousTokenLM(len(corpus.vocab)).eval()


def expected_mixture(lm, ngram, tokens: list[int], history: list[int], alpha: float) -> list[float]:
    """ln((1 - alpha) p + alpha q) of each token after ``history`` + the tokens before it, one by one:
    the model from the previous token, the n-gram from the last n-1 tokens (fewer at the start)."""
    text = history + tokens
    out = []
    for i, token in enumerate(tokens):
        here = len(history) + i
        context = text[max(0, here - (ngram.order - 1)) : here]
        q = float(ngram.next_token_distribution(torch.tensor([context]))[0, token])
        p = math.exp(lm.expected_log_prob(text[here - 1], token))
        out.append(math.log((1 - alpha) * p + alpha * q))
    return out


def test_the_mixture_is_a_distribution_over_the_vocabulary(corpus, arpa, lm):
    ngram = read_ngram_onto(arpa, corpus.vocab)
    contexts = torch.randint(0, len(corpus.vocab), (50, ORDER - 1), generator=torch.Generator().manual_seed(1))
    model_log_probs = F.log_softmax(lm(contexts[:, -1:]).logits[:, -1].double(), dim=-1)  # (50, V)
    ngram_log_probs = ngram.next_token_distribution(contexts).double().log()  # (50, V)
    for alpha in (0.1, 0.5, 0.9):
        total = mix_log_probs(model_log_probs, ngram_log_probs, alpha).exp().sum(-1)
        assert total.tolist() == pytest.approx([1.0] * 50, abs=1e-6)


def test_stream_tokens_meet_the_ngram_of_their_own_context_across_windows_and_rows(corpus, arpa, lm):
    ngram = read_ngram_onto(arpa, corpus.vocab)
    stream, eos = corpus.stream("test"), corpus.vocab.eos_id
    scores = stream_token_scores(lm, stream, eos, batch_size=3, bptt=4)  # 3 rows, windows of 4 steps
    ngram_log_probs = torch.from_numpy(ngram.segment_log_probs(scores.tokens, scores.starts, scores.lengths))
    mixed = mix_log_probs(scores.log_probs, ngram_log_probs, 0.4)
    assert mixed.tolist() == pytest.approx(expected_mixture(lm, ngram, stream.tolist(), [eos], 0.4), rel=1e-5)

    # alpha = 0: the model's NLL as evaluation sums it; alpha = 1: the perplexity `infolm ngram eval` gives
    nll_sum, tokens = stream_nll(lm, stream, eos, batch_size=3, bptt=4)
    assert -float(mix_log_probs(scores.log_probs, ngram_log_probs, 0.0).sum()) == pytest.approx(nll_sum, rel=1e-6)
    ngram_ppl = math.exp(-float(mix_log_probs(scores.log_probs, ngram_log_probs, 1.0).mean()))
    assert tokens == len(stream) and ngram_ppl == pytest.approx(eval_command(arpa, corpus, "test")["ppl"], rel=1e-9)


def test_sentence_tokens_meet_the_ngram_of_their_sentence_from_eos(corpus, arpa, lm):
    ngram = read_ngram_onto(arpa, corpus.vocab)
    config = load_config(None, ["task.name=sentence-lm", "data.eval_batch_size=4", "task.max_len=5"])
    task = build_task(config, corpus)  # valid rows cut to 5 tokens (the rows the model reads), test whole
    existing = read_arpa(arpa, corpus.vocab)
    eos = corpus.vocab.eos_id
    for split in ("valid", "test"):
        scores = task.token_scores(lm, split)
        rows = task.sentences(split)
        ngram_log_probs = torch.from_numpy(ngram.segment_log_probs(scores.tokens, scores.starts, scores.lengths))
        mixed = mix_log_probs(scores.log_probs, ngram_log_probs, 0.4)
        for start, length in zip(rows.starts.tolist(), rows.lengths.tolist()):
            row = rows.flat[start : start + length].tolist()
            expected = expected_mixture(lm, ngram, row, [eos], 0.4)
            assert mixed[start : start + length].tolist() == pytest.approx(expected, rel=1e-5)

        metrics = task.evaluate(lm, split).values
        model_nll = -float(mix_log_probs(scores.log_probs, ngram_log_probs, 0.0).mean())
        assert model_nll == pytest.approx(metrics["nll"], rel=1e-6) and len(scores.tokens) == metrics["tokens"]
        by_row = sum(existing.log_prob_stream(rows.flat[s : s + n])[0] for s, n in zip(rows.starts, rows.lengths))
        assert float(mix_log_probs(scores.log_probs, ngram_log_probs, 1.0).sum()) == pytest.approx(by_row, rel=1e-9)


@pytest.mark.parametrize("name", [n for n in TASKS.names() if TASKS.get(n).factory.scores_tokens])
def test_token_scores_sum_to_the_tasks_own_nll(name, small_corpus):
    """Every task that scores tokens one by one, with a recurrent model whose state a stream carries."""
    config = load_config(None, [f"task.name={name}", "data.eval_batch_size=3", "data.bptt=7"])
    task = build_task(config, small_corpus)
    torch.manual_seed(0)
    model = tiny_model("lstm", len(small_corpus.vocab)).eval()
    scores = task.token_scores(model, "valid")
    metrics = task.evaluate(model, "valid").values
    assert scores.tokens.tolist() == small_corpus.stream("valid").tolist()  # text order, every token once
    assert scores.nll() == pytest.approx(metrics["nll"], rel=1e-6) and len(scores.tokens) == metrics["tokens"]


def test_tuned_alpha_is_the_known_optimum():
    """Tokens in exact proportion to (1 - a) p + a q over three words: the likelihood is largest at a (Gibbs)."""
    p, q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64), torch.tensor([0.1, 0.2, 0.7], dtype=torch.float64)

    def tokens(weights: list[int]) -> tuple[Tensor, Tensor]:
        words = torch.repeat_interleave(torch.arange(3), torch.tensor(weights))
        return p[words].log(), q[words].log()

    assert tune_alpha(*tokens([400, 275, 325])) == pytest.approx(0.25, abs=1e-9)  # 0.75 p + 0.25 q, x1000
    # the unconstrained optimum outside [0, 1] (1.2 p - 0.2 q, -0.2 p + 1.2 q): the end point, exactly
    assert tune_alpha(*tokens([58, 32, 10])) == 0.0  # the model alone
    assert tune_alpha(*tokens([2, 18, 80])) == 1.0  # the n-gram alone
    log_p, log_q = tokens([400, 275, 325])
    report = interpolation_report(log_p, log_q, log_p, log_q)
    assert report["alpha"] == pytest.approx(0.25, abs=1e-9)
    assert report["mixed_nll"] < min(report["model_nll"], report["ngram_nll"])
    for alpha in (0.2, 0.3):
        assert report["mixed_nll"] < -float(mix_log_probs(log_p, log_q, alpha).mean())
    with pytest.raises(InfolmError, match="no score"):
        tune_alpha(log_p, torch.cat([log_q[:-1], torch.tensor([math.nan], dtype=torch.float64)]))


def test_the_ngram_is_read_onto_the_run_vocabulary_by_word(corpus, tmp_path):
    vocab, eos = corpus.vocab, corpus.vocab.eos_id
    direct = build_ngram(corpus.stream("train"), len(vocab), ORDER, "modified-kn", history_id=eos)
    # the same counts over the words in another order, and w8 read as <unk> by the n-gram
    own = Vocab(["<eos>", UNK, *sorted(set(vocab.itos) - {"<eos>", "w8"}, reverse=True)])
    recoded = torch.tensor([own.stoi.get(vocab.itos[i], own.stoi[UNK]) for i in corpus.stream("train").tolist()])
    other = build_ngram(recoded, len(own), ORDER, "modified-kn", history_id=own.eos_id)
    write_arpa(other, tmp_path / "other.arpa", own)
    mapped = read_ngram_onto(tmp_path / "other.arpa", vocab)
    assert mapped.missing == ["w8"]

    contexts = torch.tensor([[vocab.stoi[a], vocab.stoi[b]] for a in WORDS[:7] for b in ("<eos>", "w1", "w5")])
    dist = mapped.next_token_distribution(contexts)  # (N, V) over the run's ids
    known = [i for i, word in enumerate(vocab.itos) if word != "w8"]
    assert dist[:, known].numpy() == pytest.approx(direct.next_token_distribution(contexts)[:, known].numpy(), rel=1e-5)
    own_dist = other.next_token_distribution(torch.from_numpy(mapped.ids[contexts.numpy()]))
    assert dist[:, vocab.stoi["w8"]].tolist() == pytest.approx(own_dist[:, own.stoi[UNK]].tolist())


def test_a_ngram_of_other_words_is_refused():
    run = Vocab(["<eos>", "a", "b"])
    other = Vocab(["<eos>", UNK, "x", "y"])
    model = build_ngram([2, 3, 0, 3], len(other), 2, "kn", history_id=0)
    with pytest.raises(InfolmError, match="share no word"):
        RemappedNgram(model, other, run)
    without_unk = Vocab(["<eos>", "a", "y"])
    with pytest.raises(InfolmError, match="no <unk> to read the 1 run words"):
        RemappedNgram(build_ngram([1, 2, 0, 1], 3, 2, "kn", history_id=0), without_unk, run)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("run")
    result = run_in_process("train", "configs/tiny.yaml", f"run.dir={path}", "train.max_steps=10", "train.eval_every=5")
    assert result.returncode == 0, result.stderr
    built = run_in_process(
        "ngram", "build", "--config", "configs/tiny.yaml", "--order", "2", "--out", f"{path}/kn2.arpa"
    )
    assert built.returncode == 0, built.stderr
    return path


def test_evaluate_interpolate_reports_the_block_and_its_summary(tiny_run):
    args = ["evaluate", str(tiny_run), "--split", "test", "--as-trained", "--interpolate", f"{tiny_run}/kn2.arpa"]
    result = run_in_process(*args, "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    block = payload["interpolate"]
    assert block["split"] == "test" and block["tuned_on"] == "valid" and block["order"] == 2
    assert 0.0 < block["alpha"] < 1.0 and block["words_read_as_unk"] == 0
    assert block["model_nll"] == pytest.approx(payload["nll"], rel=1e-6) and block["tokens"] == payload["tokens"]
    assert block["valid_mixed_nll"] <= min(block["valid_model_nll"], block["valid_ngram_nll"])
    summary = payload["summaries"]["interpolate"]
    assert summary.startswith(f"2-gram interpolation: test ppl {block['model_ppl']:.2f} -> {block['mixed_ppl']:.2f}")
    text = run_in_process(*args)
    lines = text.stdout.splitlines()
    assert lines[-1] == summary and lines[-2].startswith("interpolate: ")


@pytest.mark.parametrize("arpa", ["missing.arpa", "config.yaml"])
def test_evaluate_interpolate_with_a_bad_arpa_file_is_one_error_line(tiny_run, arpa):
    result = run_in_process("evaluate", str(tiny_run), "--as-trained", "--interpolate", f"{tiny_run}/{arpa}")
    assert result.returncode != 0 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("infolm: error: ")


def test_a_file_with_sentence_markers_reads_eos_as_end_and_start_of_sentence(tmp_path) -> None:
    """A KenLM / SRILM file has <s> and </s> and no <eos>: the run's <eos> is scored as P(</s> | ...), and
    each sentence starts from <s>, as those tools score text."""
    import math

    import numpy as np

    from infolm.data.vocab import Vocab
    from infolm.ngram.remap import read_ngram_onto

    bigrams = {("<s>", "a"): 0.6, ("<s>", "b"): 0.4, ("a", "b"): 0.7, ("a", "</s>"): 0.3,
               ("b", "a"): 0.5, ("b", "</s>"): 0.5}  # fmt: skip
    unigrams = {"<s>": 0.0, "</s>": 0.3, "a": 0.4, "b": 0.3}
    lines = ["\\data\\", "ngram 1=4", "ngram 2=6", "", "\\1-grams:"]
    lines += [f"{math.log10(p) if p else -99:.6f}\t{w}\t0.0" for w, p in unigrams.items()]
    lines += ["", "\\2-grams:"] + [f"{math.log10(p):.6f}\t{h} {w}" for (h, w), p in bigrams.items()]
    lines += ["", "\\end\\", ""]
    path = tmp_path / "kenlm.arpa"
    path.write_text("\n".join(lines))
    vocab = Vocab(["<eos>", "a", "b"])
    ngram = read_ngram_onto(path, vocab)
    tokens = np.array([1, 2, 0, 2, 0])  # a b <eos> b <eos>
    got = ngram.segment_log_probs(tokens, np.array([0]), np.array([5]))
    want = [
        bigrams[("<s>", "a")],
        bigrams[("a", "b")],
        bigrams[("b", "</s>")],
        bigrams[("<s>", "b")],
        bigrams[("b", "</s>")],
    ]
    np.testing.assert_allclose(got, np.log(want), atol=1e-5)
    after_eos = ngram.next_token_distribution(np.array([[0]]))[0]  # the history <eos> reads as <s>
    np.testing.assert_allclose(after_eos.numpy(), [0.3, 0.6, 0.4], atol=1e-5)  # </s> after <s>: backed off
    assert "<eos>" not in ngram.missing
