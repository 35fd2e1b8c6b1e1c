"""Composability: every (task, model, objective) combination the registries declare compatible
trains; the others are refused when the config is read, with one line naming both sides."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from infolm.build import build_model, build_objective, build_task
from infolm.compatibility import incompatibility
from infolm.config import DataConfig, load_config
from infolm.models import MODELS
from infolm.objectives import OBJECTIVES
from infolm.tasks import TASKS
from infolm.training import Trainer
from tests.conftest import run_cli

# Small settings so that each combination takes two steps in well under a second.
TASK_SETTINGS = {
    "sentence-lm": {"max_len": 24, "truncate": ["train", "valid", "test"]},
    "masked-lm": {"max_len": 32, "vocab_size": 300, "min_frequency": 1, "pairs": True},
    "classification": {"max_len": 32, "vocab_size": 300, "min_frequency": 1},
}
MODEL_SETTINGS = {
    "lstm": {"emb": 16, "hidden": 16, "layers": 2, "dropout": 0.2},
    "gru": {"emb": 16, "hidden": 16, "layers": 2, "dropout": 0.2},
    "transformer": {"dim": 16, "layers": 1, "heads": 2, "max_len": 32},
    "melis": {"hidden": 16, "layers": 1, "rounds": 2, "rank": 4, "dropout_input": 0.1},
    "awd-lstm-mos": {"emb": 16, "hidden": 16, "last_hidden": 16, "layers": 2, "n_experts": 2},
    "sentence-gru": {"emb": 8, "hidden": 12, "latent": 3},
    "latent-sentence-lstm": {"embedding": 8, "hidden": 8, "latent_size": 4, "latent_embedding": 8},
    "latent-synthetic": {"embedding": 8, "hidden": 8, "latent_size": 4},
    "latent-synthetic-vq": {"embedding": 8, "hidden": 8, "vq_latents": 2, "vq_categories": 3, "vq_dim": 4},
    "bert": {"dim": 16, "layers": 1, "heads": 2, "ff_dim": 32, "max_len": 32, "num_labels": 2},
    "melis-seq2seq": {"cell": "lstm", "hidden": 12, "layers": 1, "emb": 8},
}
OBJECTIVE_SETTINGS = {
    "imm": {"k": 2, "j": 1, "sample_chunk": 2, "context_window": 8, "positions_per_batch": 4},
    "multisample": {"samples": 2},
    "bmi": {"batch_size": 4, "hidden": 8},
    **{name: {"samples": 2} for name in ("mi-kl", "mi-renyi", "mi-power")},
    "imm-mlm": {"k": 2, "positions_per_batch": 4},
    "skipgram-nce": {"max_pairs": 64},
}


def task_data(config, corpus):
    """What the task trains on, made from the small PTB slice (encoder tasks: its lines as WordPiece
    sentences; classification: labelled by line-length parity; copy: a small reverse-copy corpus), so that
    no data mirror is needed."""
    name = config.task["name"]
    if name == "copy":
        from infolm.data.copy_task import CopyTaskConfig, copy_task_corpus

        return copy_task_corpus(CopyTaskConfig(length=5, vocab_size=12, train=64, valid=8, test=8))
    if name not in ("masked-lm", "classification"):
        return corpus
    from infolm.tasks.masked_lm import MaskedLMConfig, subword_corpus

    settings = MaskedLMConfig(vocab_size=300, min_frequency=1)
    data = subword_corpus(corpus, config, settings)
    if name == "classification":
        from infolm.data.subwords import EncoderData, SubwordSentences
        from infolm.tasks.wordpiece_run import corpus_lines

        sentences = {
            split: SubwordSentences.from_ids(data.tokenizer.encode(corpus_lines(corpus, split)), max_len=32)
            for split in corpus.splits
        }
        labels = {split: part.lengths % 2 for split, part in sentences.items()}
        return EncoderData.of(data.tokenizer, sentences, labels=labels)
    return data


def declared_compatible():
    combos = []
    for task, model, objective in itertools.product(TASKS.names(), MODELS.names(), OBJECTIVES.names()):
        task_config = TASKS.make_config(task, TASK_SETTINGS.get(task, {}), "task")
        model_config = MODELS.make_config(model, MODEL_SETTINGS.get(model, {}), "model")
        terms = {objective: OBJECTIVES.make_config(objective, OBJECTIVE_SETTINGS.get(objective, {}), "objective")}
        if incompatibility(task, task_config, model, model_config, terms, DataConfig(bptt=12)) is None:
            combos.append(pytest.param(task, model, objective, id=f"{task}-{model}-{objective}"))
    return combos


def overrides(section, name, settings):
    return [f"{section}.name={name}", *(f"{section}.{k}={v}" for k, v in settings.items())]


@pytest.mark.parametrize(("task_name", "model_name", "objective_name"), declared_compatible())
def test_declared_compatible_combination_trains(task_name, model_name, objective_name, small_corpus, tmp_path):
    assert model_name in MODEL_SETTINGS, f"add small settings for model {model_name}"
    terms = {objective_name: OBJECTIVE_SETTINGS.get(objective_name, {})}
    config = load_config(
        None,
        [
            *overrides("task", task_name, TASK_SETTINGS.get(task_name, {})),
            *overrides("model", model_name, MODEL_SETTINGS[model_name]),
            *(f"objective.{name}={settings or {}}" for name, settings in terms.items()),
            "data.batch_size=8",
            "data.bptt=12",
            "run.device=cpu",
            f"run.dir={tmp_path}",
        ],
    )
    data = task_data(config, small_corpus)
    torch.manual_seed(0)
    model = build_model(config, len(data.vocab))
    objective = build_objective(config)
    objective.setup(data, model)
    trainer = Trainer(config, model, objective, build_task(config, data))
    before = [p.detach().clone() for p in model.parameters()]
    for _ in range(2):
        values = trainer.train_step(trainer.batches.next_batch())
        assert math.isfinite(values["loss"])
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_every_task_trains_some_model():
    served = {name: [c for c in declared_compatible() if c.values[0] == name] for name in TASKS.names()}
    assert all(served.values()), {k: len(v) for k, v in served.items()}


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (
            ["task.name=sentence-lm", "objective.bmi.weight=0.1"],
            ["objective bmi", "task sentence-lm", "tasks that do: stream-lm"],
        ),
        (
            ["task.name=sentence-lm", "model={name: transformer, dim: 16, heads: 2}"],
            ["task sentence-lm", "model transformer", "512", "task.max_len"],
        ),
        (["model={name: transformer, dim: 16, heads: 2, max_len: 8}"], ["task stream-lm", "model transformer", "35"]),
        (
            ["model={name: transformer, dim: 16, heads: 2}", "objective.bmi.weight=0.1"],
            ["objective bmi", "model transformer", "any length"],
        ),
        (
            ["task.name=stream-lm", "model={name: latent-sentence-lstm}", "objective={mi-kl: {}}"],
            ["task stream-lm", "model latent-sentence-lstm", "latent-variable"],
        ),
        (["task.name=sentence-lm", "task.max_len=1"], ["task.max_len"]),
        (["task.name=no-such-task"], ["unknown task", "stream-lm"]),
    ],
)
def test_mismatch_is_refused_when_the_config_is_read(args, fragments, tmp_path):
    base = tmp_path / "base.yaml"  # the defaults (stream-lm, lstm, mle) and the overrides only
    base.write_text("run: {device: cpu}\n")
    result = run_cli("train", str(base), f"run.dir={tmp_path / 'run'}", *args)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not (tmp_path / "run").exists()  # refused before anything is written
