"""masked-lm and classification tasks: batches, resumable order, evaluation, end-to-end CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from infolm.cli.main import main
from infolm.config import load_config
from infolm.data.masking import IGNORE_INDEX, MLM_INPUTS, SPAN_IDS
from infolm.tasks import TASKS
from infolm.tasks.classification import Classification
from infolm.tasks.masked_lm import EVAL_SEED, masked_rows, subword_corpus
from tests.conftest import ROOT


def run_in_process(capsys, monkeypatch, *args: str) -> tuple[int, str]:
    """The CLI in this process (no interpreter start-up): exit code and stderr."""
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().err


MLM_SETTINGS = ["task.name=masked-lm", "task.max_len=24", "task.vocab_size=300", "model.name=bert"]


def masked_lm_task(small_corpus, tmp_path, *extra: str):
    config = load_config(None, [*MLM_SETTINGS, f"run.dir={tmp_path}", "data.batch_size=4", *extra])
    task = TASKS.build("masked-lm", {k: v for k, v in config.task.items() if k != "name"})
    task.setup(config, subword_corpus(small_corpus, config, task.config))
    return task


def test_masked_lm_batches_mask_spans_of_the_original_rows(small_corpus, tmp_path):
    task = masked_lm_task(small_corpus, tmp_path)
    batch = task.train_batches().next_batch()
    masked = batch.targets != IGNORE_INDEX
    assert batch.inputs.size(1) <= 24 and bool(batch.padding_mask[:, 0].all())
    assert torch.equal(batch.extras[SPAN_IDS] >= 0, masked)  # spans are exactly the masked positions
    kept = ~masked & batch.padding_mask
    rows = task.rows["train"].tokens
    assert any(torch.equal(batch.inputs[0][kept[0]], r[: batch.inputs.size(1)][kept[0]]) for r in rows)


def test_masked_lm_order_and_masks_resume_exactly(small_corpus, tmp_path):
    task = masked_lm_task(small_corpus, tmp_path)
    first = task.train_batches()
    for _ in range(3):
        first.next_batch()
    state = first.state_dict()
    expected = [first.next_batch() for _ in range(2)]
    second = task.train_batches()
    second.load_state_dict(state)
    for want in expected:
        got = second.next_batch()
        assert torch.equal(got.inputs, want.inputs) and torch.equal(got.targets, want.targets)


def test_pairs_put_a_second_sep_in_every_row(small_corpus, tmp_path):
    task = masked_lm_task(small_corpus, tmp_path, "task.pairs=true")
    batch = task.train_batches().next_batch()
    assert bool(((batch.inputs == 3).sum(1) == 2).all())
    assert batch.inputs.size(1) <= 24


def write_cola(directory, rows):
    path = directory / "train.tsv"
    path.write_text("".join(f"src\t{label}\t\t{text}\n" for label, text in rows))
    return path


def cola_files(tmp_path):
    rng = np.random.default_rng(0)
    words = ["the", "cat", "dog", "sat", "ran", "on", "a", "mat", "big", "small"]
    good = [(1, " ".join(rng.choice(words, size=5))) for _ in range(60)]
    bad = [(0, " ".join(rng.choice(words, size=3)) + " sat sat") for _ in range(30)]
    train = write_cola(tmp_path, good + bad)
    test = tmp_path / "test.tsv"
    test.write_text(train.read_text())
    return train, test


def test_classification_batches_and_metrics(tmp_path):
    train, test = cola_files(tmp_path)
    config = load_config(
        None,
        [
            "task.name=classification",
            "task.vocab_size=60",
            "task.min_frequency=1",
            "model.name=bert",
            "model.num_labels=2",
            "data.name=path",
            f"data.train={train}",
            f"data.test={test}",
            f"run.dir={tmp_path / 'run'}",
            "data.batch_size=8",
        ],
    )
    task = TASKS.build("classification", {k: v for k, v in config.task.items() if k != "name"})
    task.setup(config, Classification.load_data(config))
    assert len(task.rows["valid"]) == 9 and len(task.rows["train"]) == 81  # 10% held out
    batch = task.train_batches().next_batch()
    assert batch.labels is not None and batch.labels.shape == (8,)
    masked = batch.targets != IGNORE_INDEX
    assert torch.equal(batch.extras[MLM_INPUTS][~masked], batch.inputs[~masked])
    assert torch.equal(batch.targets[masked], batch.inputs[masked])


def test_pretrain_then_finetune_over_two_seeds_with_a_summary(tmp_path, capsys, monkeypatch):
    pretrain = tmp_path / "pretrain"
    common = ["model.dim=16", "model.layers=1", "model.heads=2", "model.ff_dim=32", "model.max_len=32"]
    code, err = run_in_process(
        capsys,
        monkeypatch,
        "train",
        "configs/ptb/infoword.yaml",
        f"run.dir={pretrain}",
        "data.max_train_tokens=3000",
        "data.max_eval_tokens=1000",
        "task.max_len=32",
        "task.vocab_size=400",
        "train.max_steps=3",
        "train.eval_every=3",
        *common,
    )
    assert code == 0, err
    assert (pretrain / "tokenizer.json").is_file()
    code, err = run_in_process(capsys, monkeypatch, "export", str(pretrain), str(tmp_path / "hf"))
    assert code == 0, err
    from transformers import BertForMaskedLM

    from infolm.build import load_run

    _, _, encoder = load_run(pretrain)
    tokens = torch.tensor([[2, 40, 41, 42, 3]])
    with torch.no_grad():
        ours = encoder.mlm_logits(encoder.mlm_features(encoder(tokens).states))
        theirs = BertForMaskedLM.from_pretrained(tmp_path / "hf").eval()(input_ids=tokens).logits
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    from infolm.data.wordpiece import WordPiece

    assert (
        WordPiece.load(tmp_path / "hf" / "tokenizer.json").digest()
        == WordPiece.load(pretrain / "tokenizer.json").digest()
    )
    train, test = cola_files(tmp_path)
    finetune = tmp_path / "cola"
    code, err = run_in_process(
        capsys,
        monkeypatch,
        "finetune",
        "configs/cola/finetune-imm.yaml",
        f"run.init_from={pretrain}",
        "--seeds",  # after the config, between overrides
        "1,2",
        f"run.dir={finetune}",
        "data.name=path",
        f"data.train={train}",
        f"data.test={test}",
        "task.max_len=32",
        "train.epochs=1",
        "train.max_steps=2",
        "objective.imm-mlm.positions_per_batch=8",
        *common,
    )
    assert code == 0, err
    summary = json.loads((finetune / "summary.json").read_text())
    assert set(summary["per_seed"]) == {"1", "2"}
    mcc = [summary["per_seed"][s]["test"]["mcc"] for s in ("1", "2")]
    assert abs(summary["summary"]["test"]["mcc"]["mean"] - sum(mcc) / 2) < 1e-12
    assert abs(summary["summary"]["test"]["mcc"]["std"] - abs(mcc[0] - mcc[1]) / 2**0.5) < 1e-12
    # the fine-tuned classifier exported: raw text through transformers alone gives the run's class scores
    code, err = run_in_process(capsys, monkeypatch, "export", str(finetune / "seed-1"), str(tmp_path / "hf-cola"))
    assert code == 0, err
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from infolm.data.subwords import SubwordSentences

    _, _, classifier = load_run(finetune / "seed-1")
    texts = ["The cat sat on the mat.", "Dogs RAN, didn't they?", "A zebra <unk> grazed!"]
    rows = SubwordSentences.from_ids(WordPiece.load(finetune / "seed-1" / "tokenizer.json").encode(texts))
    inputs = AutoTokenizer.from_pretrained(tmp_path / "hf-cola", local_files_only=True)(
        texts, padding=True, return_tensors="pt"
    )
    assert torch.equal(inputs["input_ids"], rows.rows)
    hf = AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf-cola", local_files_only=True).eval()
    with torch.no_grad():
        ours = classifier.classify(classifier(rows.rows, padding_mask=rows.real()).sentence)
        theirs = hf(**inputs).logits
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)
    for run in (pretrain, finetune / "seed-1"):  # masked-lm and classification sample no text
        code, err = run_in_process(capsys, monkeypatch, "generate", str(run), "--max-tokens", "3")
        assert code == 2 and len(err.strip().splitlines()) == 1 and "samples no text" in err, err


def test_bad_cola_files_and_mismatched_runs_are_one_line_and_write_nothing(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad.tsv"
    cases = {
        "missing label column": "src\t\tThe cat sat.\n",
        "empty sentence": "src\t1\t\t \n",
        "label outside": "src\t2\t\tThe cat sat.\n",
    }
    run_dir = tmp_path / "never"
    for expected, text in cases.items():
        bad.write_text("src\t1\t\tA dog ran.\n" + text)
        files = ["data.name=path", f"data.train={bad}", f"data.test={bad}", f"run.dir={run_dir}"]
        code, err = run_in_process(capsys, monkeypatch, "train", "configs/cola/finetune-base.yaml", *files)
        assert code != 0
        assert len(err.strip().splitlines()) == 1 and "bad.tsv:2" in err, err
        assert not run_dir.exists(), expected
    good, _ = cola_files(tmp_path)
    data = ["data.name=path", f"data.train={good}", f"data.test={good}"]
    cases_run = {
        "tokenizer.json": [*data, f"run.init_from={tmp_path}"],  # a directory that is no encoder run
        "max_len": ["model.max_len=64"],  # rows of up to 128 subwords, 64 positions
    }
    for expected, extra in cases_run.items():
        code, err = run_in_process(
            capsys, monkeypatch, "train", "configs/cola/finetune-base.yaml", f"run.dir={run_dir}", *extra
        )
        assert code != 0 and expected in err and len(err.strip().splitlines()) == 1, err
        assert not run_dir.exists()


def test_extra_training_text_joins_the_pretraining_text_and_the_wordpiece_vocabulary(small_corpus, tmp_path):
    """task.extra_train adds a registered dataset's training lines to train (and to WordPiece's input);
    valid and test stay the corpus's own."""
    from infolm.data.datasets import dataset_texts

    base = masked_lm_task(small_corpus, tmp_path / "base")
    config = load_config(
        None, [*MLM_SETTINGS, f"run.dir={tmp_path / 'extra'}", "task.extra_train=[uniform-symbols-1000]"]
    )
    task = TASKS.build("masked-lm", {k: v for k, v in config.task.items() if k != "name"})
    data = subword_corpus(small_corpus, config, task.config)
    extra = [line for line in dataset_texts("uniform-symbols-1000")[1]["train"].splitlines() if line.strip()]
    plain = subword_corpus(small_corpus, load_config(None, [*MLM_SETTINGS, f"run.dir={tmp_path / 'p'}"]), base.config)
    assert len(data.sentences["train"]) == len(plain.sentences["train"]) + len(extra)
    assert len(data.sentences["valid"]) == len(plain.sentences["valid"])
    assert data.tokenizer is not None
    tail = data.sentences["train"].rows[-3:]
    for row, line in zip(tail, extra[-3:], strict=True):  # the extra lines close the training text
        assert row[1 : 1 + len(data.tokenizer.encode([line])[0])].tolist() == data.tokenizer.encode([line])[0]
    assert data.vocab.itos != plain.vocab.itos  # WordPiece was trained on the joined text


def test_unknown_extra_training_text_is_one_line_at_config_time(capsys, tmp_path, monkeypatch):
    code, err = run_in_process(
        capsys, monkeypatch, "train", "configs/ptb/bert-nce.yaml", f"run.dir={tmp_path / 'run'}",
        "task.extra_train=[shakespear]",
    )  # fmt: skip
    assert code == 2 and "task.extra_train: unknown text dataset 'shakespear'; known:" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_finetune_that_predicts_one_class_warns_on_stderr_and_in_the_summary(tmp_path, capsys, monkeypatch):
    train, test = cola_files(tmp_path)
    run_dir = tmp_path / "cola"
    tiny = ["model.dim=16", "model.layers=1", "model.heads=2", "model.ff_dim=32", "model.max_len=32"]
    data = ["data.name=path", f"data.train={train}", f"data.test={test}", "task.vocab_size=60", "task.min_frequency=1"]
    code, err = run_in_process(
        capsys,
        monkeypatch,
        "finetune",
        "configs/cola/finetune-base.yaml",
        "--seeds",
        "1,2",
        f"run.dir={run_dir}",
        "task.max_len=32",
        "train.max_steps=1",
        "optim.lr=0",  # the classifier stays at its initialization: one class for every sentence
        *data,
        *tiny,
    )
    assert code == 0, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [summary["per_seed"][s]["valid"]["predicted_classes"] for s in ("1", "2")] == [1.0, 1.0]
    assert summary["one_class_seeds"] == [1, 2] and summary["summary"]["valid"]["mcc"]["mean"] == 0.0
    (warning,) = summary["warnings"]
    assert "predicts one class for all of valid (MCC 0)" in warning
    assert [line for line in err.splitlines() if "warning" in line] == [f"infolm: warning: {warning}"]


def test_one_class_warning_needs_every_seed_at_one_class():
    from infolm.finetune import one_class_seeds, one_class_warning

    stuck = {"valid": {"mcc": 0.0, "predicted_classes": 1.0}}
    learned = {"valid": {"mcc": 0.31, "predicted_classes": 2.0}}
    assert one_class_seeds({1: stuck, 2: learned, 3: stuck}) == [1, 3]
    assert one_class_warning({1: stuck, 2: learned, 3: stuck}) is None
    assert one_class_warning({1: stuck, 3: stuck}) is not None
    assert one_class_warning({1: {"valid": {"nll": 5.0}}}) is None  # a task that reports no classes


def test_export_writes_a_model_card_from_the_run_directory_alone(ptb_slice_files, tmp_path, capsys, monkeypatch):
    """The data the run trained on is gone and nothing may be fetched: the run's config, vocab.json and
    checkpoint suffice for the weights, metrics.jsonl and meta.json for the card."""
    import shutil
    from pathlib import Path

    from infolm import __version__

    data_dir, run_dir, out = tmp_path / "data", tmp_path / "run", tmp_path / "hf"
    data_dir.mkdir()
    files = [f"data.{split}={shutil.copy(ptb_slice_files[split], data_dir)}" for split in ("train", "valid", "test")]
    tiny = ["model.dim=16", "model.layers=1", "model.heads=2", "model.ff_dim=32", "model.max_len=24"]
    objective = ["objective.mlm-nce.weight=0.5"]
    code, err = run_in_process(
        capsys,
        monkeypatch,
        "train",
        "configs/ptb/infoword.yaml",
        *MLM_SETTINGS,
        "data.name=path",
        *files,
        f"run.dir={run_dir}",
        "train.max_steps=2",
        "train.eval_every=1",
        *tiny,
        *objective,
    )
    assert code == 0, err
    shutil.rmtree(data_dir)
    (tmp_path / "empty").mkdir()
    for name, value in {"INFOLM_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "INFOLM_DATA_MIRROR": tmp_path / "empty"}.items():
        monkeypatch.setenv(name, str(value))
    code, err = run_in_process(capsys, monkeypatch, "export", str(run_dir), str(out))
    assert code == 0, err
    written = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"}
    assert {p.name for p in out.iterdir()} == written
    card = (out / "README.md").read_text()
    assert "- task: `masked-lm`" in card and f"train file: `{data_dir / 'train.txt'}`" in card
    assert "- objective: `mlm-nce` (weight 0.5), `dim` (weight 1.0)" in card
    assert "`BertForMaskedLM`" in card and f"infolm {__version__}" in card and "`train.max_steps=2`" in card
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r.get("split") == "valid"]
    best = min(valid, key=lambda r: r["loss"])
    assert len(valid) == 2 and f"| loss | {best['loss']:.4f} |" in card and f"at step {best['step']}:" in card
    parameters = sum(t.numel() for t in load_file(out / "model.safetensors").values())
    # the saved tensors hold no tied copy of the word embeddings: the card counts the model's own parameters
    assert f"{parameters:,} parameters" in card
    from transformers import AutoTokenizer

    from infolm.data.subwords import SubwordSentences
    from infolm.data.wordpiece import WordPiece

    # PTB text as it is (its unknown words spelled <unk>): transformers reads the ids the run's tokenizer gives
    lines = Path(ptb_slice_files["valid"]).read_text().splitlines()[:8]
    assert any("<unk>" in line for line in lines)
    ours = SubwordSentences.from_ids(WordPiece.load(run_dir / "tokenizer.json").encode(lines), 24).rows
    theirs = AutoTokenizer.from_pretrained(out, local_files_only=True)(lines, padding=True, truncation=True)
    assert theirs["input_ids"] == ours.tolist()


class ZeroScores(torch.nn.Module):
    """An encoder whose masked-subword scores are all zero: uniform under the full softmax."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab

    def forward(self, inputs, padding_mask=None):
        from types import SimpleNamespace

        return SimpleNamespace(states=torch.zeros(*inputs.shape, 1))

    def mlm_features(self, states):
        return states

    def mlm_logits(self, features):
        return features.new_zeros(features.size(0), self.vocab)


def test_the_prior_corrected_reading_adds_the_training_unigram_to_the_scores(small_corpus, tmp_path):
    """*_prior metrics read softmax(scores + ln q), q the training subwords' add-one unigram: with all
    scores zero that is q itself, so its NLL is the targets' mean -ln q and its argmax the commonest subword."""
    task = masked_lm_task(small_corpus, tmp_path)
    vocab = task.vocab_size
    metrics = task.evaluate(ZeroScores(vocab), "valid").values
    assert metrics["mlm_nll"] == pytest.approx(math.log(vocab)) and metrics["mlm_accuracy_prior"] > 0
    assert torch.allclose(task.log_unigram.exp().sum(), torch.tensor(1.0))
    targets = []
    for number, start in enumerate(range(0, len(task.rows["valid"]), task.data.eval_batch_size)):
        index = np.arange(start, min(start + task.data.eval_batch_size, len(task.rows["valid"])))
        batch = masked_rows(task.rows["valid"], index, task.config, vocab, np.random.default_rng([EVAL_SEED, number]))
        targets.append(batch.targets[batch.targets != IGNORE_INDEX])
    targets = torch.cat(targets)
    assert metrics["masked"] == len(targets)
    assert metrics["mlm_nll_prior"] == pytest.approx(float(-task.log_unigram[targets].double().mean()), rel=1e-5)
    commonest = int(task.log_unigram.argmax())
    assert metrics["mlm_accuracy_prior"] == pytest.approx(float((targets == commonest).double().mean()))
