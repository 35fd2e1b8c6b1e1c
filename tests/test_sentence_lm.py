"""sentence-lm: rows, truncation, bucketing, evaluation identities, a learned initial state, and
every CLI path (train, evaluate --json, generate whole sentences, torchrun)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from infolm.build import build_task
from infolm.config import load_config
from infolm.data.batching import IGNORE_INDEX
from infolm.objectives.activation_reg import activation_regularization, temporal_activation_regularization
from infolm.tasks.sentence_lm import split_sentences
from tests.conftest import ROOT, run_cli, run_cli_concurrently, run_in_process, tiny_model


def sentence_task(corpus, *extra):
    config = load_config(None, ["task.name=sentence-lm", "data.batch_size=8", "data.eval_batch_size=5", *extra])
    return build_task(config, corpus)


def test_rows_are_eos_then_the_sentence_and_eos_is_the_last_target(small_corpus):
    task = sentence_task(small_corpus)
    eos = small_corpus.vocab.eos_id
    sentences = task.sentences("valid")
    batch = sentences.batch(np.arange(6), eos)
    for row in range(6):
        line = small_corpus.sentence("valid", row)
        n = int(batch.lengths[row])
        assert n == len(line) and bool(batch.padding_mask[row, :n].all()) and not batch.padding_mask[row, n:].any()
        assert batch.targets[row, :n].tolist() == line.tolist() and batch.targets[row, n - 1] == eos
        assert batch.inputs[row, 0] == eos and batch.inputs[row, 1:n].tolist() == line[:-1].tolist()
        assert bool((batch.targets[row, n:] == IGNORE_INDEX).all())


def test_max_len_keeps_the_first_tokens_and_eos_of_the_splits_it_names(small_corpus):
    eos = small_corpus.vocab.eos_id
    cut = split_sentences(small_corpus, "train", 10)
    whole = split_sentences(small_corpus, "train", None)
    assert cut.lengths.max() == 10 and len(cut) == len(whole)
    for i in range(len(whole)):
        line = whole.flat[whole.starts[i] : whole.starts[i] + whole.lengths[i]]
        row = cut.flat[cut.starts[i] : cut.starts[i] + cut.lengths[i]]
        expected = line if len(line) <= 10 else torch.cat([line[:9], line[-1:]])
        assert row.tolist() == expected.tolist() and row[-1] == eos
    task = sentence_task(small_corpus, "task.max_len=10")  # default: train and valid cut, test whole
    assert task.sentences("valid").lengths.max() == 10
    assert task.sentences("test").lengths.max() == whole_max(small_corpus, "test") > 10


def whole_max(corpus, split):
    return int(np.diff(corpus.sentence_offsets(split)).max())


def test_bucketing_pads_less_and_an_epoch_holds_every_sentence_once(small_corpus):
    def epoch(bucket):
        batches = sentence_task(small_corpus, f"task.bucket_batches={bucket}").train_batches()
        real = padded = 0
        seen = []
        while (batch := batches.next_batch()) is not None:
            real += int(batch.padding_mask.sum())
            padded += batch.padding_mask.numel()
            seen.extend(batch.lengths.tolist())
        return 1 - real / padded, sorted(seen)

    bucketed, lengths = epoch(50)
    unbucketed, lengths_1 = epoch(1)
    assert lengths == lengths_1 == sorted(np.diff(small_corpus.sentence_offsets("train")).tolist())
    assert bucketed < 0.5 * unbucketed


def test_evaluation_equals_a_sentence_by_sentence_sum(small_corpus):
    """Padding changes nothing: batched scores equal each sentence scored alone from the initial state."""
    torch.manual_seed(0)
    model = tiny_model("lstm", len(small_corpus.vocab)).eval()
    batched = sentence_task(small_corpus).evaluate(model, "valid").values
    eos = small_corpus.vocab.eos_id
    total = without_eos = 0.0
    tokens = 0
    with torch.no_grad():
        for line in small_corpus.sentences("valid"):
            inputs = torch.cat([line.new_tensor([eos]), line[:-1]]).unsqueeze(0)
            nll = F.cross_entropy(model(inputs, None).logits[0], line, reduction="none")
            total += float(nll.sum())
            without_eos += float(nll[:-1].sum())
            tokens += len(line)
    sentences = small_corpus.num_sentences("valid")
    assert batched["tokens"] == tokens and batched["sentences"] == sentences
    assert batched["nll"] == pytest.approx(total / tokens, rel=1e-5)
    assert batched["sentence_nll"] == pytest.approx(total / sentences, rel=1e-5)
    assert batched["nll_without_eos"] == pytest.approx(without_eos / (tokens - sentences), rel=1e-5)
    assert batched["ppl"] == pytest.approx(math.exp(batched["nll"]))
    one_by_one = sentence_task(small_corpus, "data.eval_batch_size=1").evaluate(model, "valid").values
    assert one_by_one["nll"] == pytest.approx(batched["nll"], rel=1e-5)


def test_learned_initial_state_is_trained_and_zero_adds_no_weights(small_corpus):
    vocab = len(small_corpus.vocab)
    zero = tiny_model("lstm", vocab)
    learned = tiny_model("lstm", vocab, initial_state="learned")
    assert set(learned.state_dict()) - set(zero.state_dict()) == {"initial_states.0", "initial_states.1"}
    batch = sentence_task(small_corpus).train_batches().next_batch()
    out = learned(batch.inputs, None)
    F.cross_entropy(out.logits.transpose(1, 2), batch.targets).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in learned.initial_states)
    with torch.no_grad():  # all zeros, the learned start is the zero start
        assert torch.equal(learned.init_state(3)[0][0], zero.init_state(3)[0][0])


def test_activation_regularizers_count_real_positions_only():
    torch.manual_seed(0)
    hidden = torch.randn(3, 6, 4)
    lengths = torch.tensor([6, 2, 4])
    mask = torch.arange(6) < lengths.unsqueeze(1)
    rows = [hidden[i, : int(n)] for i, n in enumerate(lengths)]
    assert activation_regularization(hidden, mask) == pytest.approx(float(torch.cat(rows).pow(2).mean()))
    diffs = torch.cat([(r[1:] - r[:-1]) for r in rows])
    assert temporal_activation_regularization(hidden, mask) == pytest.approx(float(diffs.pow(2).mean()))
    full = torch.ones(3, 6, dtype=torch.bool)
    assert activation_regularization(hidden, full) == pytest.approx(float(activation_regularization(hidden)))


# -- the CLI -----------------------------------------------------------------------------------

SENTENCE = ["configs/tiny.yaml", "task.name=sentence-lm", "task.max_len=30"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("sentence-run")
    result = run_in_process("train", *SENTENCE, f"run.dir={path}", "train.max_steps=10", "train.eval_every=5")
    assert result.returncode == 0, result.stderr
    return path


def test_evaluate_reports_per_token_and_per_sentence_nll_with_eos_counted(run_dir):
    args = ("evaluate", str(run_dir), "--split", "test")
    result, text = run_cli_concurrently([*args, "--json"], [*args])
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["nll"] * payload["tokens"] == pytest.approx(payload["sentence_nll"] * payload["sentences"])
    assert any("<eos> is counted" in note for note in payload["notes"])
    assert "<eos> is counted" in text.stdout
    evals = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in evals if r.get("split") == "valid"] == [5, 10]


def test_generate_samples_whole_sentences(run_dir):
    args = ["generate", str(run_dir), "--samples", "4", "--max-tokens", "40", "--seed", "1"]
    first, second = run_cli_concurrently(args, args)  # two processes, one seed
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout and first.stdout.count("\n") == 4
    assert "<eos>" not in first.stdout


def test_stream_evaluations_are_refused_on_sentences(run_dir):
    result = run_cli("evaluate", str(run_dir), "--dynamic")
    assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1
    assert "--dynamic" in result.stderr and "sentence-lm" in result.stderr


@pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")
def test_torchrun_trains_a_sentence_lm_on_two_ranks(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "infolm"]
    cmd += ["train", *SENTENCE, "train.max_steps=4", "train.eval_every=4", f"run.dir={tmp_path}"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("split") == "valid"] == [4]
    assert (tmp_path / "checkpoints/best/model.safetensors").exists()


def test_info_lists_the_tasks():
    result = run_cli("info", "--json")
    assert result.returncode == 0, result.stderr
    assert {"stream-lm", "sentence-lm"} <= json.loads(result.stdout)["tasks"].keys()
