"""`infolm pareto` reads a run's selected checkpoint (not its last evaluation), or its training-split
estimates (Melis thesis Figs. 5.8-5.9), which ``sentence-latent`` logs with ``task.train_eval_sentences``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from infolm.latent.pareto import collect
from infolm.training.metrics import selected_record
from tests.conftest import run_cli

KL = {"mi-kl": {"estimator": "dreg", "samples": 16}}


def write_run(path: Path, records: list[dict]) -> None:
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(json.dumps({"objective": KL}))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def valid(step: int, loss: float, mi: float, best: float, **extra: float) -> dict:
    """A validation line as the trainer writes it: best_loss is the best selection value so far."""
    return {"step": step, "split": "valid", "loss": loss, "mi": mi, **extra, "best_loss": best}


# best at step 20 (loss 9.3, mi 2.0); step 40 is worse (9.8, mi 4.0) and leaves best_loss at 9.3;
# step 30 ties the best without improving on it (the trainer keeps step 20's checkpoint)
RUN = [
    {"step": 10, "loss": 9.9},  # a training line
    valid(10, 9.5, 1.0, 9.5, train_loss=9.4, train_mi=1.1),
    valid(20, 9.3, 2.0, 9.3, train_loss=9.2, train_mi=2.2),
    valid(30, 9.3, 2.5, 9.3, train_loss=9.25, train_mi=2.6),
    valid(40, 9.8, 4.0, 9.3, train_loss=9.0, train_mi=4.4),
]


def test_the_selected_record_is_the_last_new_best() -> None:
    assert selected_record(RUN)["step"] == 20
    assert selected_record([RUN[0]]) is None  # no validation line
    higher = [{"split": "valid", "step": s, "mcc": v, "best_mcc": b} for s, v, b in [(1, 0.2, 0.2), (2, 0.1, 0.2)]]
    assert selected_record(higher)["step"] == 1  # a higher-is-better selection metric
    nan_first = [valid(1, None, 0.0, None), valid(2, 9.0, 1.0, 9.0)]  # type: ignore[arg-type]
    assert selected_record(nan_first)["step"] == 2


def test_a_run_worse_at_its_end_gives_its_best_point(tmp_path: Path) -> None:
    write_run(tmp_path / "run", RUN)
    (best,) = collect([str(tmp_path / "run")], "loss", "mi")
    assert (best.nll, best.mi) == (9.3, 2.0)
    (last,) = collect([str(tmp_path / "run")], "loss", "mi", at="last")
    assert (last.nll, last.mi) == (9.8, 4.0)
    (train,) = collect([str(tmp_path / "run")], "loss", "mi", split="train")
    assert (train.nll, train.mi) == (9.2, 2.2)  # the same checkpoint's training-split estimates


def test_pareto_cli_reads_the_training_frontier(tmp_path: Path) -> None:
    write_run(tmp_path / "a", RUN)
    write_run(tmp_path / "b", [valid(5, 9.1, 0.1, 9.1, train_loss=9.0, train_mi=0.1)])
    out = tmp_path / "out"
    result = run_cli(
        "pareto", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out), "--split", "train", "--json"
    )
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader((out / "pareto.csv").open()))
    assert {row["run"].split("/")[-1]: (row["train_mi"], row["train_loss"]) for row in rows} == {
        "a": ("2.200000", "9.200000"),
        "b": ("0.100000", "9.000000"),
    }


def test_pareto_without_training_estimates_says_so_in_one_line(tmp_path: Path) -> None:
    write_run(tmp_path / "run", [valid(5, 9.1, 0.1, 9.1)])
    result = run_cli("pareto", str(tmp_path / "run"), "--out", str(tmp_path / "out"), "--split", "train")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "train_eval_sentences" in result.stderr


LINES = ["the cat sat on the mat", "a dog ran home", "the dog sat", "a cat ran on the mat", "the mat ran home"]


@pytest.mark.parametrize("cap", [100, 2])
def test_train_eval_sentences_scores_the_first_training_sentences(tmp_path: Path, cap: int) -> None:
    """With the training split equal to the validation split and every sentence scored, train_* equals
    the validation values (the same seeded draws); a cap scores that many sentences."""
    from infolm.build import build_task
    from infolm.config import Config
    from infolm.data import load_corpus
    from infolm.models import MODELS

    data = tmp_path / "data.txt"
    data.write_text("\n".join(LINES) + "\n")
    gru = {"emb": 8, "hidden": 12, "latent": 3}
    config = Config(model={"name": "sentence-gru", **gru}, objective={"amim": {}})
    config.task = {"name": "sentence-latent", "valid_samples": 4, "test_samples": 4, "chunk": 2,
                   "train_eval_sentences": cap}  # fmt: skip
    config.data.name, config.data.train, config.data.valid, config.data.test = ("path", str(data), str(data), str(data))
    corpus = load_corpus(config.data)
    task = build_task(config, corpus)
    torch.manual_seed(0)
    model = MODELS.build("sentence-gru", gru, vocab_size=len(corpus.vocab))
    metrics = task.evaluate(model, "valid")
    logged = metrics.logged()
    assert metrics.values["train_sentences"] == min(cap, len(LINES))
    if cap >= len(LINES):
        assert logged["train_loss"] == logged["loss"] and logged["train_mi"] == logged["mi"]
        assert logged["train_mi_per_token"] == logged["mi_per_token"] and logged["train_kl"] == logged["kl"]
    else:
        assert logged["train_loss"] != logged["loss"]
    assert "train_loss" not in task.evaluate(model, "test").logged()
