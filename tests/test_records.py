"""A run's record keeps the small files of a run directory (config, log, summary, cached scores) and
nothing else, is written whole or not at all, and cannot be scored again."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from infolm.errors import InfolmError
from infolm.training import records
from infolm.training.run_lock import run_dir_lock
from tests.test_experiment_arms import experiment


def make_run(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.yaml").write_text("run:\n  seed: 1\n")
    (path / "metrics.jsonl").write_text(json.dumps({"step": 1, "split": "valid", "loss": 4.0}) + "\n")
    (path / "train-summary.json").write_text(json.dumps({"epoch": 3, "early_stopped": True}))
    (path / "eval-test.json").write_text(json.dumps({"nll": 4.1}))
    (path / "vocab.json").write_text(json.dumps(["<unk>", "a"]))
    (path / "checkpoints").mkdir()
    (path / "checkpoints" / "last.pt").write_bytes(b"\0" * 1000)
    for name, commit in (("step-00000010", "aaa"), ("best", "bbb"), ("step-00000020", "bbb")):
        (path / "checkpoints" / name).mkdir()
        meta = {"git_commit": commit, "step": 10, "machine": "x86_64", "versions": {"torch": "2"}, "config": {}}
        (path / "checkpoints" / name / "meta.json").write_text(json.dumps(meta))
    (path / "eval-test.tmp").write_text("half")
    return path


def test_a_record_keeps_the_small_files_and_the_meta(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs" / "lm-s1")
    with run_dir_lock(run):  # leaves .lock and .lock.owner behind, as a training run does
        pass
    target = records.archive_run(run, tmp_path / "records", {"commit": "abc1234", "wall_s": 12.5})
    assert target == tmp_path / "records" / "lm-s1"
    kept = sorted(path.name for path in target.iterdir())
    assert kept == ["config.yaml", "eval-test.json", "metrics.jsonl", "record.json", "train-summary.json"]
    for name in kept[:-2] + ["train-summary.json"]:
        assert (target / name).read_bytes() == (run / name).read_bytes()
    meta = json.loads((target / "record.json").read_text())
    assert meta["commit"] == "abc1234" and meta["wall_s"] == 12.5
    assert meta["files"] == ["config.yaml", "eval-test.json", "metrics.jsonl", "train-summary.json"]
    best = {"step": 10, "git_commit": "bbb", "versions": {"torch": "2"}, "machine": "x86_64"}
    assert meta["checkpoints"] == {"commits": ["bbb", "aaa"], "best": best}  # best first, then by folder name
    assert records.is_record(target) and not records.is_record(run)
    assert [path.name for path in (tmp_path / "records").iterdir()] == ["lm-s1"]  # no staging folder left


def test_archiving_again_replaces_the_record_whole(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs" / "lm-s1")
    records.archive_run(run, tmp_path / "records")
    (run / "eval-test.json").unlink()
    (run / "eval-valid.json").write_text(json.dumps({"nll": 4.0}))
    target = records.archive_run(run, tmp_path / "records")
    assert not (target / "eval-test.json").exists() and (target / "eval-valid.json").is_file()
    assert sorted(path.name for path in (tmp_path / "records").iterdir()) == ["lm-s1"]


def test_archive_refuses_what_is_no_finished_small_run(tmp_path: Path, monkeypatch) -> None:
    run = make_run(tmp_path / "runs" / "lm-s1")
    with run_dir_lock(run), pytest.raises(InfolmError, match="training now"):
        records.archive_run(run, tmp_path / "records")
    with pytest.raises(InfolmError, match="not a run directory"):
        records.archive_run(tmp_path / "runs", tmp_path / "records")
    monkeypatch.setattr(records, "MAX_FILE_BYTES", 40)
    with pytest.raises(InfolmError, match="metrics.jsonl is [0-9]+ bytes"):
        records.archive_run(run, tmp_path / "records")
    assert not (tmp_path / "records" / "lm-s1").exists()
    monkeypatch.undo()
    target = records.archive_run(run, tmp_path / "records")
    with pytest.raises(InfolmError, match="already a record"):
        records.archive_run(target, tmp_path / "elsewhere")


def test_a_record_is_never_scored_again(tmp_path: Path) -> None:
    """A record's cached score is read whatever the file times say (a checkout sets them all); a score it
    lacks is an error naming it, not an evaluation of a checkpoint that is not there."""
    module = experiment("thesis_table5_1")
    target = records.archive_run(make_run(tmp_path / "runs" / "lm-s1"), tmp_path / "records")
    (target / "metrics.jsonl").touch()  # now newer than the cached score
    assert module.score(target, "test", None, target / "eval-test.json") == {"nll": 4.1}
    with pytest.raises(SystemExit, match="record without eval-valid.json"):
        module.score(target, "valid", None, target / "eval-valid.json")


def test_a_run_directory_stands_for_its_record(tmp_path: Path) -> None:
    """Runs are found in the run folder first, then in the records; one per name, sorted, hidden
    folders (an archive in progress) and what ``accept`` refuses left out."""
    live = make_run(tmp_path / "runs" / "b-s1")
    make_run(tmp_path / "runs" / "c-s1")
    archived = records.archive_run(live, tmp_path / "records")
    only_record = records.archive_run(make_run(tmp_path / "elsewhere" / "a-s1"), tmp_path / "records")
    (tmp_path / "records" / ".d-s1.new").mkdir()
    found = records.runs_and_records(
        [tmp_path / "runs", tmp_path / "records", tmp_path / "missing"], lambda path: not path.name.startswith("c")
    )
    assert found == [only_record, live] and archived not in found


def test_a_record_keeps_a_score_filed_outside_the_run(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs" / "full-s0")
    score = tmp_path / "runs" / "full-s0.score.json"
    score.write_text(json.dumps({"test": {"ppl": 90.0}}))
    target = records.archive_run(run, tmp_path / "records", extra={"score.json": score})
    assert (target / "score.json").read_bytes() == score.read_bytes()
    assert "score.json" in json.loads((target / "record.json").read_text())["files"]
    for clash in ("metrics.jsonl", "record.json", "a/b.json"):
        with pytest.raises(InfolmError, match="cannot be kept"):
            records.archive_run(run, tmp_path / "again", extra={clash: score})
    with pytest.raises(InfolmError, match="cannot be kept"):
        records.archive_run(run, tmp_path / "again", extra={"score.json": tmp_path / "missing.json"})


def bmi_run(out: Path, arm: str, seed: int, scale: float) -> None:
    """A scored BMI run as ``bmi_ptb_table2.py train`` leaves it: the log (steps of each phase and
    validations with the averaging switch) and ``OUT/ARM-sSEED.score.json``."""
    run = out / f"{arm}-s{seed}"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("run:\n  seed: 0\n")
    lines = []
    for step in range(20, 220, 20):
        phase = {} if arm == "baseline" else {"bmi_phase": 1.0 if step < 120 else 2.0, "bmi_acc": 0.6, "bmi_mine": 0.1}
        lines.append({"step": step, "epoch": 0, "tokens_per_s": 1.0, "elapsed": step * scale, **phase})
        if step % 100 == 0:
            lines.append({"step": step, "split": "valid", "ppl": 200.0 / step * scale, "started_at": 101})
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (run / "train-summary.json").write_text(json.dumps({"epoch": 1}))
    score = {
        "valid": {"ppl": 100.0 * scale},
        "test": {"ppl": 95.0 * scale},
        "reverse": {"valid_ppl": 150.0, "test_ppl": 140.0},
        "mi": {"mean": 0.3 * scale},
        "discriminator": None if arm == "baseline" else {"accuracy": 0.6, "mine": 0.1},
        "command": f"infolm train {arm}",
        "commit": "abc1234",
        "budget": "converged",
    }
    (out / f"{arm}-s{seed}.score.json").write_text(json.dumps(score))


def test_bmi_table_from_records_equals_the_table_from_runs(tmp_path: Path, capsys) -> None:
    """``archive`` keeps each scored run with its score file and the real-data scores (a record folder
    each, as the generator reads them); the per-run table rebuilt from the records alone is the table from
    the run directories; ``train`` sees a recorded arm as done."""
    module = experiment("bmi_ptb_table2")
    out, kept = tmp_path / "runs", tmp_path / "records"
    for seed in (0, 1):
        for arm, scale in (("baseline", 1.0), ("base", 1.1), ("full", 1.2)):
            bmi_run(out, arm, seed, scale + seed / 10)
        (out / f"real-s{seed}.score.json").write_text(
            json.dumps({"mi": {"mean": 1.1}, "reverse": {"valid_ppl": 80.0, "test_ppl": 75.0}})
        )
    (out / "full-s2").mkdir()  # a run still without a log: neither a table row nor a record

    def table(folder: Path, found: list[Path]) -> str:
        module.cmd_table(argparse.Namespace(out=folder, records=found, png=None))
        return capsys.readouterr().out

    from_runs = table(out, [])
    assert "python -m experiments.report bmi" in from_runs and "| full-s1 (scored) |" in from_runs
    module.cmd_archive(argparse.Namespace(out=out, records=kept))
    arms = ["base-s0", "base-s1", "baseline-s0", "baseline-s1", "full-s0", "full-s1"]
    assert sorted(path.name for path in kept.iterdir()) == [*arms, "real-s0", "real-s1"]
    assert module.recorded_score(kept, "full-s1") == kept / "full-s1" / "score.json"
    assert module.recorded_score(kept, "real-s0") == kept / "real-s0" / "score.json"
    assert json.loads((kept / "real-s0" / "score.json").read_text())["mi"] == {"mean": 1.1}
    assert json.loads((kept / "real-s0" / "record.json").read_text())["files"] == ["score.json"]
    assert module.recorded_score(kept, "full-s2") is None
    (tmp_path / "empty").mkdir()
    assert table(tmp_path / "empty", [kept]) == from_runs
    assert table(out, [kept]) == from_runs  # a run directory stands for its record


def test_bmi_train_archives_each_converged_run_as_soon_as_it_is_scored(tmp_path: Path, monkeypatch) -> None:
    """A converged run's record is written the moment its score is, before the next arm trains: a machine
    lost in the middle of a queue still leaves the numbers of every arm it scored in the working tree.
    The smoke budget keeps no records."""
    from experiments.reproduce.jobs import Done

    module = experiment("bmi_ptb_table2")
    out, kept = tmp_path / "runs", tmp_path / "records"
    seen: list[tuple[str, list[str]]] = []  # (run trained now, records present when it started)

    def fake_train(command: list[str], **_: object) -> Done:
        run = Path(next(word for word in command if word.startswith("run.dir=")).split("=", 1)[1])
        seen.append((run.name, sorted(path.name for path in kept.iterdir()) if kept.is_dir() else []))
        arm, seed = run.name.rsplit("-s", 1)
        bmi_run(tmp_path / "made", arm, int(seed), 1.0)
        run.parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "made" / run.name).rename(run)
        return Done(command, 0, 1.0, json.dumps({"epoch": 15, "early_stopped": True}) + "\n", "")

    monkeypatch.setattr(module, "run_command", fake_train)
    monkeypatch.setattr(module, "records_of", lambda budget: kept if budget == "converged" else tmp_path / "smoke")
    monkeypatch.setattr(module, "extended_limit", lambda summary, records, epochs: None)
    monkeypatch.setattr(module, "score_run", lambda run, seed, budget: {"valid": {"ppl": 9.0}, "test": {"ppl": 8.0},
                        "reverse": {"valid_ppl": 1.0, "test_ppl": 1.0}, "mi": {"mean": 0.0}})  # fmt: skip
    monkeypatch.setattr(module, "score_real", lambda out, seed, budget: {"mi": {"mean": 0.1}, "reverse": {}})
    monkeypatch.setattr(module, "git_commit", lambda: "abc1234")
    args = argparse.Namespace(out=out, seeds=[0], arms=["baseline", "full"], budget="converged", override=[])
    module.cmd_train(args)
    assert seen == [("baseline-s0", []), ("full-s0", ["baseline-s0"])]
    assert sorted(path.name for path in kept.iterdir()) == ["baseline-s0", "full-s0", "real-s0"]
    assert json.loads((kept / "full-s0" / "score.json").read_text())["test"] == {"ppl": 8.0}
    assert json.loads((kept / "full-s0" / "record.json").read_text())["commit"] == "abc1234"
    seen.clear()
    module.cmd_train(argparse.Namespace(**{**vars(args), "out": tmp_path / "smoke-runs", "budget": "smoke"}))
    assert [name for name, _ in seen] == ["baseline-s0", "full-s0"] and not (tmp_path / "smoke").exists()
    seen.clear()  # extra overrides: not the protocol's runs, so no record is replaced by them
    before = (kept / "full-s0" / "record.json").read_bytes()
    module.cmd_train(
        argparse.Namespace(**{**vars(args), "out": tmp_path / "lr10", "seeds": [1], "override": ["optim.lr=10"]})
    )
    assert [name for name, _ in seen] == ["baseline-s1", "full-s1"]
    assert sorted(path.name for path in kept.iterdir()) == ["baseline-s0", "full-s0", "real-s0"]
    assert (kept / "full-s0" / "record.json").read_bytes() == before
    seen.clear()  # a study of a seed the protocol has recorded trains its own runs: the records do not stand for them
    study = {"out": tmp_path / "w002", "override": [], "switch_step": 100, "bmi_weight": 0.02}
    module.cmd_train(argparse.Namespace(**{**vars(args), **study}))
    assert [name for name, _ in seen] == ["baseline-s0", "full-s0"]
    assert (kept / "full-s0" / "record.json").read_bytes() == before


def test_table5_1_train_scores_and_archives_each_run_that_ends_by_itself(tmp_path: Path, monkeypatch) -> None:
    """``train --score``: a run that ended by itself is scored as ``table`` reads it (latent arms IWAE-100 on
    valid and IWAE-500 on test, the LM exactly) and archived before the next run trains; a run cut at the
    deadline or trained with ``--set`` overrides is neither."""
    import subprocess

    module = experiment("thesis_table5_1")
    out, kept = tmp_path / "runs", tmp_path / "records"
    seen: list[tuple[str, list[str]]] = []  # (run trained now, records present when it started)
    scored: list[tuple[str, str, int | None]] = []

    real_run = subprocess.run

    def fake_run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        if not any(word.startswith("run.dir=") for word in command):  # git, uname: as they are
            return real_run(command, **kwargs)  # type: ignore[call-overload,no-any-return]
        run = Path(next(word for word in command if word.startswith("run.dir=")).split("=", 1)[1])
        seen.append((run.name, sorted(path.name for path in kept.iterdir()) if kept.is_dir() else []))
        made = make_run(tmp_path / "made" / run.name)
        (made / "eval-test.json").unlink()
        run.parent.mkdir(parents=True, exist_ok=True)
        made.rename(run)
        return subprocess.CompletedProcess(command, 0, b'{"epoch": 17, "early_stopped": true}\n', b"")

    def fake_score(run: Path, split: str, samples: int | None, path: Path) -> dict:
        scored.append((run.name, split, samples))
        path.write_text(json.dumps({"nll": 4.0, "split": split}))
        return {"nll": 4.0}

    monkeypatch.setattr(module.subprocess, "run", fake_run)
    monkeypatch.setattr(module, "score", fake_score)
    args = argparse.Namespace(
        out=str(out), arms=["lm", "dreg-1"], lams=[0.3], alpha=2.0, seeds=[2], jobs=1, deadline_s=0, set=[],
        records=str(kept), score=True, valid_samples=100, test_samples=500,
    )  # fmt: skip
    module.cmd_train(args)
    assert seen == [("lm-s2", []), ("dreg-1-lam0.3-s2", ["lm-s2"])]
    assert scored == [
        ("lm-s2", "valid", None), ("lm-s2", "test", None), ("dreg-1-lam0.3-s2", "valid", 100),
        ("dreg-1-lam0.3-s2", "test", 500),
    ]  # fmt: skip
    record = kept / "dreg-1-lam0.3-s2"
    assert json.loads((record / "eval-test-iwae500.json").read_text())["split"] == "test"
    meta = json.loads((record / "record.json").read_text())
    assert meta["ended_by_itself"] is True and [job["run"] for job in meta["jobs"]] == ["dreg-1-lam0.3-s2"]
    assert (kept / "lm-s2" / "eval-valid.json").is_file()
    seen.clear()  # ended runs with records are not trained again; overrides: trained, never archived
    module.cmd_train(args)
    assert seen == []
    module.cmd_train(argparse.Namespace(**{**vars(args), "out": str(tmp_path / "other"), "seeds": [3],
                                           "set": ["optim.lr=0.01"]}))  # fmt: skip
    assert [name for name, _ in seen] == ["lm-s3", "dreg-1-lam0.3-s3"]
    assert sorted(path.name for path in kept.iterdir()) == ["dreg-1-lam0.3-s2", "lm-s2"]


def test_a_cut_run_is_archived_only_when_asked_and_stays_cut(tmp_path: Path, capsys) -> None:
    """``archive`` leaves a run cut at a deadline out; ``archive --cut`` keeps it if it was scored on test,
    marked cut, and the table then counts it as cut while ``train`` would train it again."""
    module = experiment("thesis_table5_1")
    out, kept = tmp_path / "runs", tmp_path / "records"
    cut = make_run(out / "dreg-16-kl-lam0.3-s0")
    (cut / "train-summary.json").unlink()
    unscored = make_run(out / "dreg-16-kl-lam0.3-s1")
    (unscored / "train-summary.json").unlink()
    (unscored / "eval-test.json").unlink()
    module.cmd_archive(argparse.Namespace(out=str(out), records=str(kept), cut=False))
    assert not kept.exists() or not any(kept.iterdir())
    assert "dreg-16-kl-lam0.3-s0: not ended, left out" in capsys.readouterr().err
    module.cmd_archive(argparse.Namespace(out=str(out), records=str(kept), cut=True))
    assert sorted(path.name for path in kept.iterdir()) == ["dreg-16-kl-lam0.3-s0"]
    meta = json.loads((kept / "dreg-16-kl-lam0.3-s0" / "record.json").read_text())
    assert meta["cut"] is True and meta["ended_by_itself"] is False
    assert not module.finished(kept / "dreg-16-kl-lam0.3-s0", 30)
    todo = module.pending(tmp_path / "fresh", ["dreg-16-kl"], [0.3], 2.0, [0], [], kept)
    assert list(todo) == [tmp_path / "fresh" / "dreg-16-kl-lam0.3-s0"]


def test_a_parked_run_resumes_bit_for_bit_on_a_machine_that_lost_it(tmp_path: Path) -> None:
    """A run killed mid-training, parked, its run directory deleted (a new machine) and laid out again
    from the parked copy, resumes from its latest checkpoint to the weights and log of the uninterrupted
    run. The copy keeps one step checkpoint and the best weights once when they are that step's; a
    changed file is refused, and a run directory already there is left as it is."""
    import shutil

    import torch
    from safetensors.torch import load_file

    from infolm.training.metrics import read_metrics
    from tests.conftest import run_in_process, train_killed_after_checkpoint
    from tests.test_warmup_linear import small_run_config

    config = small_run_config(tmp_path)
    straight, run = tmp_path / "straight", tmp_path / "runs" / "lm-s0"
    with train_killed_after_checkpoint(str(config), run_dir=run, step=15):
        assert run_in_process("train", str(config), f"run.dir={straight}").returncode == 0
    parked = records.park_run(run, tmp_path / "parked")
    kept = sorted(str(path.relative_to(parked)) for path in parked.rglob("*") if path.is_file())
    latest = sorted(path.name for path in (run / "checkpoints").glob("step-*"))[-1]
    assert f"checkpoints/{latest}/trainer.pt" in kept and "vocab.json" in kept and records.PARKED in kept
    assert not [name for name in kept if name.startswith("checkpoints/step-") and latest not in name]
    assert not records.is_record(parked)
    shutil.rmtree(run)
    assert records.unpark_run(parked, run.parent) == run
    assert records.unpark_run(parked, run.parent) is None  # the run there stands
    best = load_file(str(run / "checkpoints" / "best" / "model.safetensors"))
    assert best.keys()  # the best weights are back, shared or copied
    result = run_in_process("train", str(config), f"run.dir={run}")
    assert result.returncode == 0, result.stderr
    # resumed, not started again: the log keeps the killed run's first rows, timings and all
    assert read_metrics(run / "metrics.jsonl")[:3] == read_metrics(parked / "metrics.jsonl")[:3]
    assert not list(run.glob("metrics.jsonl.attempt-*"))
    a = load_file(str(sorted((straight / "checkpoints").glob("step-*"))[-1] / "model.safetensors"))
    b = load_file(str(sorted((run / "checkpoints").glob("step-*"))[-1] / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    timeless = lambda rows: [{k: v for k, v in r.items() if k not in ("tokens_per_s", "elapsed")} for r in rows]  # noqa: E731
    assert timeless(read_metrics(straight / "metrics.jsonl")) == timeless(read_metrics(run / "metrics.jsonl"))
    (parked / "metrics.jsonl").write_text("changed\n")
    with pytest.raises(InfolmError, match="not the file that was parked"):
        records.unpark_run(parked, tmp_path / "elsewhere")
    assert not (tmp_path / "elsewhere" / "lm-s0").exists()


def test_a_parked_run_keeps_best_weights_once_when_they_are_the_latest_steps(tmp_path: Path) -> None:
    """Best weights that are the latest step checkpoint's own bytes are parked once and copied back on
    unparking; best weights of an earlier step are parked as they are. Runs that cannot be parked (no
    step checkpoint, training now) are refused with the reason."""
    run = make_run(tmp_path / "runs" / "lm-s1")
    latest = run / "checkpoints" / "step-00000020"
    for folder in (latest, run / "checkpoints" / "best"):
        (folder / "model.safetensors").write_bytes(b"same weights")
    (latest / "trainer.pt").write_bytes(b"state")
    parked = records.park_run(run, tmp_path / "parked")
    assert not (parked / "checkpoints" / "best" / "model.safetensors").exists()
    assert (parked / "checkpoints" / "best" / "meta.json").is_file()
    assert not (parked / "checkpoints" / "step-00000010").exists()  # only the latest step
    assert json.loads((parked / records.PARKED).read_text())["best_as_latest"] == ["model.safetensors"]
    back = records.unpark_run(parked, tmp_path / "new")
    assert back is not None and (back / "checkpoints" / "best" / "model.safetensors").read_bytes() == b"same weights"
    (run / "checkpoints" / "best" / "model.safetensors").write_bytes(b"earlier weights")
    parked = records.park_run(run, tmp_path / "parked")  # replaces the parked copy whole
    assert (parked / "checkpoints" / "best" / "model.safetensors").read_bytes() == b"earlier weights"
    with run_dir_lock(run), pytest.raises(InfolmError, match="training now"):
        records.park_run(run, tmp_path / "parked")
    for step in (run / "checkpoints").glob("step-*"):
        shutil.rmtree(step)
    with pytest.raises(InfolmError, match="no step checkpoint"):
        records.park_run(run, tmp_path / "parked")


def test_weights_that_differ_only_in_the_tied_name_kept_are_the_same_weights(tmp_path: Path) -> None:
    """The best weights (written from the evaluation copy) and the step checkpoint's (from the training
    copy) can name a tied tensor the other way round: same tensors, other bytes, parked once."""
    import torch
    from safetensors.torch import save_file

    tensor, other = torch.arange(6.0).reshape(2, 3), torch.zeros(2, 3)
    save_file(
        {"embedding": tensor, "b": other}, str(tmp_path / "a.safetensors"), {"format": "pt", "decoder": "embedding"}
    )
    save_file(
        {"decoder": tensor, "b": other}, str(tmp_path / "b.safetensors"), {"format": "pt", "embedding": "decoder"}
    )
    save_file(
        {"decoder": tensor, "b": other + 1}, str(tmp_path / "c.safetensors"), {"format": "pt", "embedding": "decoder"}
    )
    (tmp_path / "d.safetensors").write_bytes(b"not weights")
    assert (tmp_path / "a.safetensors").read_bytes() != (tmp_path / "b.safetensors").read_bytes()
    assert records._same_weights(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    assert not records._same_weights(tmp_path / "a.safetensors", tmp_path / "c.safetensors")
    assert not records._same_weights(tmp_path / "a.safetensors", tmp_path / "d.safetensors")
