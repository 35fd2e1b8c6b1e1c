"""Every task on awkward user files, through the CLI as a new user runs it: each case either works (exit 0,
finite scores) or is refused with one line on stderr and a non-zero exit, never a traceback, and a refused
``train`` leaves nothing in its run directory.

The files are tiny and their valid / test words all occur in train; each training run takes two steps of a
tiny model.
"""

from __future__ import annotations

import json
import math
import subprocess
import traceback
from pathlib import Path

import pytest

from tests.conftest import run_in_process

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "big", "small", "red"]


def sentences(count: int, length: int, words: list[str] = WORDS, offset: int = 0) -> str:
    """``count`` lines of ``length`` words, cycling through ``words`` (every word appears in a long enough text)."""
    return "".join(
        " ".join(words[(offset + i * 3 + j) % len(words)] for j in range(length)) + "\n" for i in range(count)
    )


UNICODE = "café naïve\t東京 の 猫 😀\tüber\nnaïve 猫\t😀 café 東京\nüber über 猫 の café\n" * 4

# shape -> split -> file text; valid and test default to the training text
TEXT_SHAPES: dict[str, dict[str, str]] = {
    "one-line": {"train": "the cat sat on the mat and the dog ran to the cat\n"},
    "long-line": {"train": sentences(1, 3000), "valid": sentences(3, 6), "test": sentences(3, 6)},
    "over-max-len": {"train": sentences(12, 40), "valid": sentences(4, 40), "test": sentences(4, 40)},
    "small-valid": {"train": sentences(40, 8), "valid": "the cat sat\n", "test": "the cat sat\n"},
    "vocab-3": {"train": sentences(30, 5, ["x", "y", "z"]), "valid": sentences(3, 4, ["x", "y", "z"])},
    "unicode-tabs": {"train": UNICODE},
    "empty-train": {"train": "", "valid": sentences(3, 5), "test": sentences(3, 5)},
    "blank-train": {"train": "\n\n   \n\t\n", "valid": sentences(3, 5), "test": sentences(3, 5)},
    "empty-valid": {"train": sentences(20, 5), "valid": "", "test": sentences(3, 5)},
    "accents-only": {"train": "\u0301\n\u0300 \u0301\n"},  # combining accents: words, but no subwords once normalized
}

TINY_LSTM = ["model.emb=8", "model.hidden=8", "model.layers=1"]
TINY_BERT = ["model.dim=16", "model.layers=1", "model.heads=2", "model.ff_dim=32", "model.max_len=16"]
STEPS = ["train.epochs=5", "train.max_steps=2", "train.eval_every=2", "train.checkpoint_every=2", "train.log_every=1"]

# task -> (config, overrides); data files are added per case
TASKS: dict[str, tuple[str, list[str]]] = {
    "stream-lm": ("configs/tiny.yaml", ["data.batch_size=2", "data.bptt=4", "data.eval_batch_size=4", *TINY_LSTM]),
    "sentence-lm": (
        "configs/ptb/sentence-lstm.yaml",
        ["run.device=cpu", "data.batch_size=4", "data.eval_batch_size=8", "task.max_len=10", *TINY_LSTM],
    ),
    "sentence-latent": (
        "configs/ptb/smim-cpu.yaml",
        [
            "data.batch_size=4",
            "data.eval_batch_size=8",
            "task.max_len=10",
            "task.valid_samples=2",
            "task.test_samples=2",
            "task.chunk=2",
            "model.emb=8",
            "model.hidden=8",
            "model.latent=2",
        ],
    ),
    "masked-lm": (
        "configs/ptb/bert-nce.yaml",
        [
            "data.batch_size=4",
            "data.eval_batch_size=8",
            "data.max_eval_tokens=null",
            "task.max_len=16",
            "task.vocab_size=60",
            "task.min_frequency=1",
            *TINY_BERT,
        ],
    ),
}

# (task, shape) -> what happens: "works", or a fragment of the one line that refuses it
EXPECTED: dict[tuple[str, str], str] = {}
for _task in TASKS:
    EXPECTED.update(
        {
            (_task, "one-line"): "works",
            (_task, "long-line"): "works",
            (_task, "over-max-len"): "works",
            (_task, "small-valid"): "works",
            (_task, "vocab-3"): "works",
            (_task, "unicode-tabs"): "works",
            (_task, "empty-train"): "is empty",
            (_task, "blank-train"): "is empty",
            (_task, "empty-valid"): "is empty",
            (_task, "accents-only"): "works",
        }
    )
EXPECTED["masked-lm", "accents-only"] = "train.txt has no WordPiece subwords once normalized"


def run(*args: str) -> subprocess.CompletedProcess:
    """``infolm ARGS`` in this process; an exception that escapes ``main`` is a failed case, its traceback the
    stderr (so that the assertions show it)."""
    try:
        return run_in_process(*args)
    except Exception:  # noqa: BLE001 - a crash is what these tests look for
        return subprocess.CompletedProcess(["infolm", *args], 1, "", traceback.format_exc())


def assert_outcome(result: subprocess.CompletedProcess, expected: str) -> None:
    if expected == "works":
        assert result.returncode == 0, result.stderr
        return
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    assert expected in lines[0], lines[0]


def write_files(directory: Path, texts: dict[str, str], suffix: str = "txt") -> list[str]:
    """The splits' files in ``directory`` as ``data.*`` overrides (valid and test default to train's text)."""
    overrides = ["data.name=path"]
    for split in ("train", "valid", "test"):
        path = directory / f"{split}.{suffix}"
        path.write_text(texts.get(split, texts["train"]), encoding="utf-8")
        overrides.append(f"data.{split}={path}")
    return overrides


def assert_nothing_written(run_dir: Path) -> None:
    left = sorted(p.name for p in run_dir.iterdir()) if run_dir.exists() else []
    assert left == [], left


def train(config: str, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return run("train", config, f"run.dir={run_dir}", *STEPS, *overrides, "--json")


def assert_trained(result: subprocess.CompletedProcess, run_dir: Path) -> None:
    """Two steps and an evaluation, every loss finite."""
    summary = json.loads(result.stdout)
    assert math.isfinite(summary["best_valid_loss"]), summary
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in records) == 2
    assert any(r.get("split") == "valid" for r in records)
    assert all(math.isfinite(r["loss"]) for r in records if "loss" in r), records


def scores_if_trained(result: subprocess.CompletedProcess, run_dir: Path, expected: str) -> dict | None:
    """The training outcome checked: a refusal wrote nothing (None); a run that works trained and scores test
    (its ``infolm evaluate --json`` numbers)."""
    assert_outcome(result, expected)
    if expected != "works":
        assert_nothing_written(run_dir)
        return None
    assert_trained(result, run_dir)
    evaluated = run("evaluate", str(run_dir), "--split", "test", "--json")
    assert_outcome(evaluated, "works")
    return json.loads(evaluated.stdout)


@pytest.mark.parametrize("task, shape", sorted(EXPECTED), ids=lambda v: v)
def test_text_tasks(task, shape, tmp_path):
    config, overrides = TASKS[task]
    expected = EXPECTED[task, shape]
    run_dir = tmp_path / "run"
    result = train(config, run_dir, *overrides, *write_files(tmp_path, TEXT_SHAPES[shape]))
    scores = scores_if_trained(result, run_dir, expected)
    if scores is None:
        return
    assert all(math.isfinite(v) for v in scores.values() if isinstance(v, float)), scores


def tsv(rows: list[tuple[object, str]]) -> str:
    return "".join(f"src\t{label}\t\t{sentence}\n" for label, sentence in rows)


def labelled(count: int, length: int, words: list[str] = WORDS) -> list[tuple[object, str]]:
    return [(i % 2, line) for i, line in enumerate(sentences(count, length, words).splitlines())]


GOOD = tsv(labelled(12, 5))
TSV_SHAPES: dict[str, dict[str, str]] = {
    "one-line": {"train": tsv([(1, "the cat sat")]), "valid": tsv([(0, "the cat")])},
    "long-line": {"train": tsv([(1, sentences(1, 3000).strip()), *labelled(6, 5)])},
    "over-max-len": {"train": tsv(labelled(12, 40))},
    "small-valid": {"train": GOOD, "valid": tsv([(1, "the cat sat")])},
    "vocab-3": {"train": tsv(labelled(12, 5, ["x", "y", "z"]))},
    "unicode": {"train": tsv([(i % 2, line) for i, line in enumerate(UNICODE.replace("\t", " ").splitlines())])},
    "one-class": {"train": tsv([(1, line) for _, line in labelled(12, 5)])},
    "empty-train": {"train": "", "test": GOOD},
    "blank-train": {"train": "\n \n\t\n", "test": GOOD},
    "tab-in-sentence": {"train": GOOD + "src\t1\t\tthe cat\tsat\n"},
    "missing-column": {"train": GOOD + "src\t1\tthe cat sat\n"},
    "label-2": {"train": GOOD + "src\t2\t\tthe cat sat\n"},
    "label-word": {"train": GOOD + "src\tyes\t\tthe cat sat\n"},
    "empty-sentence": {"train": GOOD + "src\t1\t\t \n"},
    "one-row-no-valid": {"train": tsv([(1, "the cat sat")])},
    # lines end at "\n" only: U+0085, U+2028 and a form feed inside a sentence do not end it (line numbers hold)
    "line-breaking-characters": {"train": GOOD + "src\t1\t\tthe cat\x85sat\u2028on\x0ca mat\n"},
    "row-after-line-breaking-characters": {"train": GOOD + "src\t1\t\tthe\x85cat\nsrc\t1\tthe cat\n"},
}
TSV_EXPECTED = {
    "one-line": "works",
    "long-line": "works",
    "over-max-len": "works",
    "small-valid": "works",
    "vocab-3": "works",
    "unicode": "works",
    "one-class": "works",
    "empty-train": "is empty",
    "blank-train": "is empty",
    "tab-in-sentence": "train.tsv:13: expected 4 tab-separated columns",
    "missing-column": "train.tsv:13: expected 4 tab-separated columns",
    "label-2": "train.tsv:13: label '2' is not one of 0, 1",
    "label-word": "train.tsv:13: label 'yes' is not one of 0, 1",
    "empty-sentence": "train.tsv:13: empty sentence",
    "line-breaking-characters": "works",
    "row-after-line-breaking-characters": "train.tsv:14: expected 4 tab-separated columns",
    "one-row-no-valid": "has 1 sentence(s): holding out task.valid_fraction=0.25 for validation leaves none",
}
CLASSIFICATION = [
    "data.batch_size=4",
    "data.eval_batch_size=8",
    "task.max_len=16",
    "task.vocab_size=60",
    "task.min_frequency=1",
    "task.valid_fraction=0.25",
    *TINY_BERT,
]


@pytest.mark.parametrize("shape", sorted(TSV_SHAPES))
def test_classification(shape, tmp_path):
    expected = TSV_EXPECTED[shape]
    run_dir = tmp_path / "run"
    files = write_files(tmp_path, TSV_SHAPES[shape], suffix="tsv")
    if "valid" not in TSV_SHAPES[shape]:
        files = [f for f in files if not f.startswith("data.valid=")]  # held out of train
    result = train("configs/cola/finetune-base.yaml", run_dir, *CLASSIFICATION, *files)
    scores = scores_if_trained(result, run_dir, expected)
    if scores is None:
        return
    assert 0.0 <= scores["accuracy"] <= 1.0 and -1.0 <= scores["mcc"] <= 1.0, scores


def copy_lines(count: int, length: int, symbols: list[str] = WORDS) -> str:
    out = []
    for i in range(count):
        source = [symbols[(i + 5 * j) % len(symbols)] for j in range(length)]
        out.append(" ".join([*source, "<rev>", *reversed(source)]) + "\n")
    return "".join(out)


COPY_SHAPES: dict[str, dict[str, str]] = {
    "one-line": {"train": copy_lines(1, 3)},
    "long-line": {"train": copy_lines(2, 300)},
    "small-valid": {"train": copy_lines(20, 4), "valid": copy_lines(1, 4)},
    "vocab-3": {"train": copy_lines(20, 4, ["x", "y", "z"])},
    "unicode-tabs": {"train": copy_lines(10, 4, ["café", "東京", "😀", "naïve"]).replace(" <rev> ", "\t<rev>\t")},
    "lengths-differ": {"train": copy_lines(5, 4) + copy_lines(5, 6)},
    "no-marker": {"train": sentences(10, 6)},
    "odd-halves": {"train": "a b c <rev> c b\n" * 5},
    "empty-train": {"train": "", "valid": copy_lines(3, 4), "test": copy_lines(3, 4)},
    "blank-train": {"train": "\n\n \n", "valid": copy_lines(3, 4), "test": copy_lines(3, 4)},
}
COPY_EXPECTED = {
    "one-line": "works",
    "long-line": "works",
    "small-valid": "works",
    "vocab-3": "works",
    "unicode-tabs": "works",
    "lengths-differ": "train.txt differ in length (9 to 13 tokens); write one length per file",
    "no-marker": "train.txt has no <rev>",
    "odd-halves": "train.txt must hold S symbols, <rev> and S symbols; got 6 tokens",
    "empty-train": "is empty",
    "blank-train": "is empty",
}
COPY = [
    "data.batch_size=4",
    "data.eval_batch_size=250",
    "model.emb=8",
    "model.hidden=8",
    "model.layers=1",
]


@pytest.mark.parametrize("shape", sorted(COPY_SHAPES))
def test_copy(shape, tmp_path):
    expected = COPY_EXPECTED[shape]
    run_dir = tmp_path / "run"
    result = train("configs/copy/reverse-20-lstm.yaml", run_dir, *COPY, *write_files(tmp_path, COPY_SHAPES[shape]))
    scores = scores_if_trained(result, run_dir, expected)
    if scores is None:
        return
    assert 0.0 <= scores["sequence_accuracy"] <= scores["token_accuracy"] <= 1.0, scores


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["model.num_labels=0"], "model bert has no classification head (model.num_labels); set model.num_labels=2"),
        (["task.num_labels=3"], "has 3 classes (task.num_labels), but model bert has a head of 2 classes"),
        (["model.num_labels=3"], "has 2 classes (task.num_labels), but model bert has a head of 3 classes"),
    ],
)
def test_classification_head_must_match_the_classes(overrides, fragment, tmp_path):
    """A head of other classes than the task's crashed in the loss or the confusion matrix, after writing the run."""
    rows = tsv([(i % 3, line) for i, (_, line) in enumerate(labelled(12, 5))])
    files = [f for f in write_files(tmp_path, {"train": rows}, "tsv") if not f.startswith("data.valid=")]
    result = train("configs/cola/finetune-base.yaml", tmp_path / "run", *CLASSIFICATION, *files, *overrides)
    assert_outcome(result, fragment)
    assert_nothing_written(tmp_path / "run")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One trained run per task on awkward files, for the subcommands that read a run."""
    base = tmp_path_factory.mktemp("runs")
    trained = {}
    for name, task, shape in (
        ("stream-lm", "stream-lm", "unicode-tabs"),
        ("sentence-lm", "sentence-lm", "unicode-tabs"),
        ("sentence-latent", "sentence-latent", "small-valid"),
        ("masked-lm", "masked-lm", "unicode-tabs"),
    ):
        (base / name).mkdir()
        config, overrides = TASKS[task]
        result = train(config, base / name / "run", *overrides, *write_files(base / name, TEXT_SHAPES[shape]))
        assert result.returncode == 0, result.stderr
        trained[name] = base / name / "run"
    (base / "copy").mkdir()
    files = write_files(base / "copy", COPY_SHAPES["unicode-tabs"])
    result = train("configs/copy/reverse-20-lstm.yaml", base / "copy" / "run", *COPY, *files)
    assert result.returncode == 0, result.stderr
    trained["copy"] = base / "copy" / "run"
    (base / "classification").mkdir()
    (base / "empty.arpa").write_text("")
    (base / "t.txt").write_text(TEXT_SHAPES["vocab-3"]["train"])
    (base / "garbage.arpa").write_text("hello\n\\data\\\nngram 1=zz\n")
    trained["ngram"] = base
    return trained


LONG_UNKNOWN = " ".join(["zebra"] * 200)
# (run, argv after the run directory, expected): the subcommands a new user tries on each run
SUBCOMMANDS = [
    ("stream-lm", ["generate", "{run}", "--prompt", "café 猫", "--max-tokens", "4"], "works"),
    ("stream-lm", ["generate", "{run}", "--prompt", "the cat", "--max-tokens", "4"], "prompt word 'the' is not in"),
    ("stream-lm", ["evaluate", "{run}", "--induced-ngram", "2", "--split", "test"], "works"),
    ("stream-lm", ["evaluate", "{run}", "--tune-temperature"], "works"),
    ("stream-lm", ["evaluate", "{run}", "--mc-dropout", "2", "--mc-no-tuning"], "works"),
    ("stream-lm", ["evaluate", "{run}", "--reverse-ppl", "50"], "reverse perplexity needs at least 100 generated"),
    ("stream-lm", ["evaluate", "{run}", "--bptt", "-1"], "--bptt must be positive (0: the run's own), got -1"),
    ("stream-lm", ["generate", "{run}", "--temperature", "nan"], "--temperature must be non-negative, got nan"),
    ("stream-lm", ["latent", "evaluate", "{run}"], "holds a lstm model, not a latent-variable model"),
    ("stream-lm", ["export", "{run}", "{tmp}/hf"], "holds no BERT-style encoder"),
    ("sentence-lm", ["generate", "{run}", "--prompt", "猫", "--samples", "2", "--max-tokens", "4"], "works"),
    ("sentence-lm", ["evaluate", "{run}", "--split", "test", "--samples", "3"], "which draws no latents"),
    ("sentence-lm", ["evaluate", "{run}", "--dynamic"], "whose rows are not a stream"),
    ("sentence-latent", ["evaluate", "{run}", "--split", "valid", "--samples", "3"], "works"),
    ("sentence-latent", ["latent", "evaluate", "{run}", "--split", "valid", "--samples", "2", "--melbo"], "works"),
    ("sentence-latent", ["latent", "reconstruct", "{run}", "the cat", "a mat"], "works"),
    ("sentence-latent", ["latent", "reconstruct", "{run}", LONG_UNKNOWN], "'zebra zebra"),
    ("sentence-latent", ["latent", "reconstruct", "{run}", " "], "a sentence to encode is empty"),
    ("sentence-latent", ["latent", "interpolate", "{run}", "the cat", "dog", "--steps", "3"], "works"),
    ("sentence-latent", ["latent", "sample", "{run}", "--count", "2", "--max-length", "4"], "works"),
    ("sentence-latent", ["generate", "{run}"], "samples with `infolm latent sample RUN`"),
    ("sentence-latent", ["evaluate", "{run}", "--batch-size", "-1"], "--batch-size must be positive"),
    ("masked-lm", ["evaluate", "{run}", "--split", "test"], "works"),
    ("masked-lm", ["export", "{run}", "{tmp}/hf"], "works"),
    ("masked-lm", ["generate", "{run}"], "which samples no text"),
    ("masked-lm", ["export", "{run}", "{run}"], "is the run directory itself"),
    ("copy", ["generate", "{run}", "--prompt", "café 😀 東京"], "works"),
    ("copy", ["generate", "{run}", "--prompt", "café <rev>"], "give only the symbols to copy"),
    ("copy", ["generate", "{run}"], "give the symbols to copy as the prompt"),
    (
        "ngram",
        ["ngram", "build", "data.name=path", "data.train={run}/t.txt", "--out", "{tmp}/a"],
        "data.valid",
    ),
    (
        "ngram",
        ["ngram", "build", "optim.lr=1", "--out", "{tmp}/a"],
        "takes data.* settings only",
    ),
    ("ngram", ["ngram", "eval", "{run}/empty.arpa"], "is not an ARPA file"),
    ("ngram", ["ngram", "eval", "{run}/garbage.arpa"], "the ARPA file is truncated"),
]


def case_id(value: object) -> str:
    return " ".join(value)[:40] if isinstance(value, list) else str(value)


@pytest.mark.parametrize("name, argv, expected", SUBCOMMANDS, ids=case_id)
def test_subcommands(runs, name, argv, expected, tmp_path):
    result = run(*(a.format(run=runs[name], tmp=tmp_path) for a in argv))
    assert_outcome(result, expected)
    if expected == "works" and "--json" not in argv:
        assert result.stdout.strip(), result.stderr


@pytest.mark.parametrize("shape", ["unicode-tabs", "vocab-3", "long-line"])
def test_ngram_on_files_of_your_own(shape, tmp_path):
    """``data.name=path`` with ``data.train/valid/test``: the dataset option could not name files before."""
    files = []
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text(TEXT_SHAPES[shape].get(split, TEXT_SHAPES[shape]["train"]))
        files.append(f"data.{split}={tmp_path / f'{split}.txt'}")
    arpa = str(tmp_path / "kn.arpa")
    built = run("ngram", "build", "data.name=path", *files, "--order", "2", "--out", arpa, "--json")
    assert_outcome(built, "works")
    text = TEXT_SHAPES[shape]["train"]
    assert json.loads(built.stdout)["train_tokens"] == len(text.split()) + len(text.splitlines())  # words, <eos>
    scored = run("ngram", "eval", arpa, "data.name=path", *files, "--split", "test", "--json")
    assert_outcome(scored, "works")
    assert 1.0 < json.loads(scored.stdout)["ppl"] < 100.0


def test_latent_evaluate_of_a_split_too_small_for_the_entropy_estimate(runs):
    """One validation sentence: every bound is reported, the kNN entropy skipped with a note (it refused the whole
    evaluation before)."""
    result = run("latent", "evaluate", str(runs["sentence-latent"]), "--split", "valid", "--samples", "2", "--json")
    assert_outcome(result, "works")
    report = json.loads(result.stdout)
    assert report["bounds"]["examples"] == 1 and math.isfinite(report["bounds"]["nll"])
    assert report["latent_entropy"]["entropy"] is None
    assert report["latent_entropy"]["note"] == "skipped: 1 distinct codes, Kraskov k=3 needs more than 3"


def test_a_long_sentence_is_shortened_in_its_refusal(runs):
    result = run("latent", "reconstruct", str(runs["sentence-latent"]), LONG_UNKNOWN)
    assert_outcome(result, "has no word in the vocabulary")
    # one short line whatever the run's path (a parallel test worker's temporary folder is longer)
    message = result.stderr.replace(str(runs["sentence-latent"]), "RUN")
    assert len(message) < 160 and "... (200 words)" in message and message.count("\n") == 1


def test_finetune_from_a_masked_lm_run_on_unicode_sentences(runs, tmp_path):
    files = [f for f in write_files(tmp_path, TSV_SHAPES["unicode"], "tsv") if not f.startswith("data.valid=")]
    args = ["finetune", "configs/cola/finetune-base.yaml", "--seeds", "1,2", f"run.dir={tmp_path / 'ft'}"]
    result = run(*args, f"run.init_from={runs['masked-lm']}", *STEPS, *CLASSIFICATION, *files, "--json")
    assert_outcome(result, "works")
    summary = json.loads((tmp_path / "ft" / "summary.json").read_text())
    assert sorted(summary["per_seed"]) == ["1", "2"]
    assert all(-1.0 <= m["test"]["mcc"] <= 1.0 for m in summary["per_seed"].values()), summary["per_seed"]
    exported = run("export", str(tmp_path / "ft" / "seed-1"), str(tmp_path / "hf"), "--json")
    assert_outcome(exported, "works")
    assert json.loads(exported.stdout)["architecture"] == "BertForSequenceClassification"


STREAM_SMALL = ["data.batch_size=2", "data.bptt=4", "data.eval_batch_size=2", "data.max_eval_tokens=null"]


@pytest.mark.parametrize(
    "shape, expected",
    [("vocab-3", "works"), ("one-line", "objective bmi pairs consecutive sentences of the training text")],
)
def test_bmi_needs_two_training_lines(shape, expected, tmp_path):
    """One line of text gave "a sentence index needs at least two sentences": no objective, no text named."""
    run_dir = tmp_path / "run"
    overrides = [*STREAM_SMALL, "data.variable_bptt=false", "objective.bmi.hidden=8", "objective.bmi.batch_size=2"]
    result = train("configs/ptb/bmi-base.yaml", run_dir, *overrides, *write_files(tmp_path, TEXT_SHAPES[shape]))
    assert_outcome(result, expected)
    if expected == "works":
        assert_trained(result, run_dir)
    else:
        assert_nothing_written(run_dir)
