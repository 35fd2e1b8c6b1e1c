"""The task contract, checked for every registered task: resumable batches, disjoint rows per rank,
deterministic evaluation, the selection metric deciding best/ and early stopping, and a run killed
mid-epoch that resumes bit for bit."""

from __future__ import annotations

import collections
import json

import pytest
import torch
from safetensors.torch import load_file

from infolm.build import build_model, build_objective, build_task
from infolm.build import task_data as build_task_data
from infolm.config import load_config
from infolm.tasks import TASKS, Metrics, Task
from infolm.training import Trainer
from infolm.training.metrics import read_metrics
from tests.conftest import run_in_process, train_killed_after_checkpoint

# A small model, a training term and an optimizer for every model protocol a task may serve (a task
# serving a new protocol adds a line), and task settings that keep evaluation cheap.
SMALL = {
    "causal-lm": {
        "model": {"name": "lstm", "emb": 16, "hidden": 16, "layers": 1, "dropout": 0.3},
        "objective": {"mle": {}},
        "optim": {"name": "sgd", "lr": 20.0},
    },
    "latent-variable": {
        "model": {"name": "sentence-gru", "emb": 8, "hidden": 12, "latent": 3},
        "objective": {"elbo": {}},
        "optim": {"name": "adam", "lr": 0.01},
    },
    "seq2seq": {
        "model": {"name": "melis-seq2seq", "cell": "lstm", "layers": 1, "emb": 8, "hidden": 12},
        "objective": {"mle": {}},
        "optim": {"name": "adam", "lr": 0.01},
    },
    "encoder": {
        "model": {"name": "bert", "dim": 16, "layers": 1, "heads": 2, "ff_dim": 32, "max_len": 32, "num_labels": 2},
        "objective": {"mlm": {}},
        "optim": {"name": "adam", "lr": 0.001},
    },
}
CHEAP = {
    "sentence-latent": {"valid_samples": 2, "test_samples": 2, "chunk": 2},
    "masked-lm": {"max_len": 24, "vocab_size": 300},
    "classification": {"max_len": 24, "vocab_size": 60, "min_frequency": 1},
}
# The training term of a task whose protocol's default term does not fit it.
OBJECTIVE = {"classification": {"classification": {}}}
# Tasks that read their own kind of file instead of the PTB slice: the fixture giving their data section.
OWN_DATA = {"copy": "copy_task_files", "masked-lm": "ptb_slice_files", "classification": "cola_task_files"}
# Tasks whose data is not a word-level corpus (WordPiece rows): built by the task from the config.
TASK_BUILT_DATA = {"masked-lm", "classification"}

TASK_NAMES = list(TASKS.names())


def small_sections(name):
    protocols = sorted(TASKS.get(name).factory.serves & set(SMALL))
    assert protocols, f"add a small model for one of the protocols task {name} serves"
    sections = {"task": {"name": name, **CHEAP.get(name, {})}, **SMALL[protocols[0]]}
    if name in OBJECTIVE:
        sections["objective"] = OBJECTIVE[name]
    return sections


def task_data(name, request, small_corpus, run_dir=None):
    """The data section (None: the PTB slice) and the corpus task ``name`` trains on in these tests
    (for tasks that build their own data, with the tokenizer of a run in ``run_dir``)."""
    if name not in OWN_DATA:
        return None, small_corpus
    from infolm.config import DataConfig
    from infolm.data import load_corpus

    section = request.getfixturevalue(OWN_DATA[name])
    if name in TASK_BUILT_DATA:
        return section, build_task_data(task_config(name, run_dir, data=section))
    return section, load_corpus(DataConfig(**section))


def task_config(name, tmp_path=None, *extra, data=None):
    sections = small_sections(name)
    if data is not None:
        sections["data"] = data
    overrides = [f"{key}={json.dumps(value)}" for key, value in sections.items()]
    overrides += ["data.batch_size=8", "data.eval_batch_size=4", "data.bptt=12", *extra]
    if tmp_path is not None:
        overrides.append(f"run.dir={tmp_path}")
    return load_config(None, [*overrides, "run.device=cpu", "train.progress=false"])


def rows_of(batch):
    """The real tokens of every row (padding dropped), as tuples."""
    rows = []
    for r in range(batch.inputs.size(0)):
        n = int(batch.lengths[r]) if batch.lengths is not None else batch.inputs.size(1)
        rows.append((tuple(batch.inputs[r, :n].tolist()), tuple(batch.targets[r, :n].tolist())))
    return rows


def walk(batches, count):
    """The next ``count`` results of ``next_batch`` (None marks an epoch end) as row tuples."""
    out = []
    for _ in range(count):
        batch = batches.next_batch()
        out.append(None if batch is None else (rows_of(batch), batch.lr_scale))
    return out


@pytest.mark.parametrize("name", TASK_NAMES)
def test_batches_resume_where_they_were_saved(name, request, small_corpus, tmp_path):
    """state_dict/load_state_dict: a fresh iterator loaded mid-epoch (and right after an epoch end)
    yields exactly the batches the saved one goes on to yield, across later epoch ends."""
    data, corpus = task_data(name, request, small_corpus, tmp_path)
    task = build_task(task_config(name, tmp_path, "data.variable_bptt=true", data=data), corpus)
    batches = task.train_batches()
    per_epoch = len(batches)
    walk(batches, per_epoch // 2)
    for _ in range(2):
        state = json.loads(json.dumps(batches.state_dict()))  # plain containers, as in a checkpoint
        expected = walk(batches, 2 * per_epoch + 3)
        assert None in expected
        resumed = task.train_batches()
        resumed.load_state_dict(state)
        assert walk(resumed, len(expected)) == expected
        while batches.next_batch() is not None:  # the second round saves at an epoch boundary
            pass


@pytest.mark.parametrize("name", TASK_NAMES)
def test_ranks_see_disjoint_rows_of_the_same_batches(name, request, small_corpus, tmp_path):
    data, corpus = task_data(name, request, small_corpus, tmp_path)
    task = build_task(task_config(name, tmp_path, data=data), corpus)
    whole, halves = task.train_batches(0, 1), [task.train_batches(rank, 2) for rank in (0, 1)]
    for _ in range(len(whole) + 2):
        full = whole.next_batch()
        parts = [h.next_batch() for h in halves]
        if full is None:
            assert parts == [None, None]
            continue
        rows = [rows_of(p) for p in parts]
        assert rows[0] and rows[1]
        assert collections.Counter(rows[0] + rows[1]) == collections.Counter(rows_of(full))
        assert len(rows[0]) + len(rows[1]) == full.inputs.size(0)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_evaluation_is_deterministic_and_restores_the_mode(name, request, small_corpus, tmp_path):
    data, corpus = task_data(name, request, small_corpus, tmp_path)
    config = task_config(name, tmp_path, data=data)
    task = build_task(config, corpus)
    torch.manual_seed(0)
    model = build_model(config, len(corpus.vocab))
    model.train()
    first, second = task.evaluate(model, "valid"), task.evaluate(model, "valid")
    assert model.training
    assert first.values == second.values
    assert first.selection in first.values and first.loss == first.values[first.selection]
    assert first.log_name(first.selection) in first.logged()


class Selecting(Task):
    """A task's batches with its selection metric read in the given direction (whatever the task says)."""

    def __init__(self, inner, higher_is_better):
        self.inner, self.carries_state, self.provides = inner, inner.carries_state, inner.provides
        self.higher_is_better = higher_is_better

    def train_batches(self, rank=0, world=1):
        return self.inner.train_batches(rank, world)

    def evaluate(self, model, split, device="cpu"):
        m = self.inner.evaluate(model, split, device)
        return Metrics(m.values, m.selection, higher_is_better=self.higher_is_better, log_names=m.log_names)


@pytest.mark.parametrize("higher", [False, True], ids=["lower-is-better", "higher-is-better"])
@pytest.mark.parametrize("name", TASK_NAMES)
def test_the_selection_metric_decides_best_and_early_stopping(name, higher, request, small_corpus, tmp_path):
    data, corpus = task_data(name, request, small_corpus, tmp_path)
    extra = ("train.max_steps=12", "train.eval_every=3", "train.early_stopping=2")
    config = task_config(name, tmp_path, *extra, data=data)
    task = Selecting(build_task(config, corpus), higher)
    torch.manual_seed(0)
    model = build_model(config, len(corpus.vocab))
    objective = build_objective(config)
    objective.setup(corpus, model)
    Trainer(config, model, objective, task).fit()
    evals = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r.get("split") == "valid"]
    pick = max if higher else min
    key = next(k[len("best_") :] for k in evals[0] if k.startswith("best_"))  # the selection metric's log name
    chosen = pick(evals, key=lambda r: r[key])
    best_meta = json.loads((tmp_path / "checkpoints/best/meta.json").read_text())
    assert best_meta["step"] == chosen["step"]
    assert evals[-1][f"best_{key}"] == chosen[key]
    better = (lambda a, b: a > b) if higher else (lambda a, b: a < b)  # noqa: E731  (a tie is no improvement)
    improving = [e for i, e in enumerate(evals) if all(better(e[key], x[key]) for x in evals[:i])]
    bad_run = len(evals) - 1 - evals.index(improving[-1])
    assert bad_run <= 2  # never more evaluations without improvement than the patience
    if evals[-1]["step"] < 12:  # stopped early: after exactly two evaluations without improvement
        assert bad_run == 2


def final_weights(run_dir):
    ckpts = sorted((run_dir / "checkpoints").glob("step-*"))
    return load_file(str(ckpts[-1] / "model.safetensors"))


@pytest.mark.parametrize("name", TASK_NAMES)
def test_run_killed_mid_epoch_resumes_bit_for_bit(name, request, tmp_path):
    """A real ``infolm train`` process, SIGKILLed right after its step-12 checkpoint (mid-epoch), resumed:
    it ends with the weights and the log of the uninterrupted run. The uninterrupted run and the resume
    run in this process; the uninterrupted one while the killed one trains, on the other core."""
    config = tmp_path / "config.yaml"
    data = {"name": "ptb", "batch_size": 8, "eval_batch_size": 4, "bptt": 20, "max_eval_tokens": 600}
    data["max_train_tokens"] = 2000  # epochs of about 10 batches: the run crosses epoch ends
    if name in OWN_DATA:  # 200 examples: epochs of 10 batches
        data = {**request.getfixturevalue(OWN_DATA[name]), "batch_size": 20, "eval_batch_size": 4}
    train = {"epochs": 10, "max_steps": 24, "eval_every": 8, "checkpoint_every": 3, "log_every": 1}
    sections = {"run": {"device": "cpu"}, "data": data, **small_sections(name), "train": train}
    config.write_text(json.dumps(sections))  # JSON is YAML
    common = [str(config)]

    straight, killed = tmp_path / "straight", tmp_path / "killed"
    with train_killed_after_checkpoint(*common, run_dir=killed, step=12):
        result = run_in_process("train", *common, f"run.dir={straight}")
        assert result.returncode == 0, result.stderr
    assert max(r["step"] for r in read_metrics(killed / "metrics.jsonl")) < 24, "finished before the kill"
    result = run_in_process("train", *common, f"run.dir={killed}")
    assert result.returncode == 0, result.stderr

    a, b = final_weights(straight), final_weights(killed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    timeless = lambda rows: [{k: v for k, v in r.items() if k not in ("tokens_per_s", "elapsed")} for r in rows]  # noqa: E731
    assert timeless(read_metrics(straight / "metrics.jsonl")) == timeless(read_metrics(killed / "metrics.jsonl"))
    assert [r for r in read_metrics(straight / "metrics.jsonl") if r.get("epoch", 0) >= 1], "no epoch end crossed"


def test_a_sentence_latent_run_logs_its_mi_per_token_beside_its_nll_per_token(small_corpus, tmp_path):
    config = task_config("sentence-latent", tmp_path)
    task = build_task(config, small_corpus)
    torch.manual_seed(0)
    metrics = task.evaluate(build_model(config, len(small_corpus.vocab)), "valid")
    values = metrics.values
    assert values["mi_per_token"] == pytest.approx(values["mi"] * values["sentences"] / values["tokens"])
    assert values["tokens"] > values["sentences"]  # so the two units differ
    assert "mi_per_token" in metrics.logged()
