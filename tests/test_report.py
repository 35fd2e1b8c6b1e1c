"""``infolm report``: runs grouped by config with mean ± std over seeds, as a table, JSON and CSV, and
their learning curves as a PNG (per group the mean ± sd over seeds, the seeds faint in the same colour)."""

from __future__ import annotations

import csv
import io
import json
import math
import statistics

import numpy as np
import pytest
import yaml

from tests.conftest import run_cli, run_cli_concurrently, run_in_process
from tests.test_cli import assert_one_line_error


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    dirs = []
    for lr, seed in ((20, 0), (20, 1), (10, 0)):
        run = root / f"lr{lr}-s{seed}"
        result = run_in_process(
            "train",
            "configs/tiny.yaml",
            f"run.dir={run}",
            f"run.seed={seed}",
            f"optim.lr={lr}",
            "train.max_steps=4",
            "train.eval_every=2",
            "train.log_every=2",
        )
        assert result.returncode == 0, result.stderr
        dirs.append(run)
    return dirs


def _last_valid(run):
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r.get("split") == "valid"][-1]


def test_report_groups_by_config_with_mean_and_std_over_seeds(runs, tmp_path):
    png = tmp_path / "curves.png"
    result = run_cli("report", *map(str, runs), "--json", "--plot", str(png))
    assert result.returncode == 0, result.stderr
    groups = {g["group"]: g for g in json.loads(result.stdout)}
    assert set(groups) == {"optim.lr=20.0", "optim.lr=10.0"}  # only the differing key names a group
    pair = groups["optim.lr=20.0"]
    assert pair["label"] == "lr=20" and pair["config"] == {"optim.lr": 20.0} and pair["seeds"] == [0, 1]
    ppl = [_last_valid(run)["ppl"] for run in runs[:2]]
    assert pair["mean"]["valid_ppl"] == pytest.approx(statistics.fmean(ppl))
    assert pair["std"]["valid_ppl"] == pytest.approx(statistics.stdev(ppl))
    assert groups["optim.lr=10.0"]["std"]["valid_ppl"] == 0.0 and pair["mean"]["step"] == 4
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_number_is_named_by_its_split(runs):
    result = run_in_process("report", *map(str, runs), "--json", "--no-plot")
    group = json.loads(result.stdout)[0]
    names = {"step", "train_loss", "valid_loss", "valid_ppl", "best_valid_loss", "elapsed_s"}
    assert set(group["mean"]) == names and set(group["per_run"][0]) == names | {"run_dir", "seed"}
    assert group["per_run"][0]["valid_loss"] == _last_valid(runs[0])["loss"]
    assert group["per_run"][0]["best_valid_loss"] == _last_valid(runs[0])["best_loss"]


def test_report_table_and_csv(runs, tmp_path):
    table, result = run_cli_concurrently(
        ["report", *map(str, runs), "--no-plot"], ["report", *map(str, runs), "--csv", "--no-plot"]
    )
    assert table.returncode == 0, table.stderr
    header = "| group | seeds | step | train_loss | valid_loss | best_valid_loss | valid_ppl | elapsed_s |"
    assert header in table.stdout and "| lr=20 | 0, 1 |" in table.stdout
    assert "- lr=20: optim.lr=20.0" in table.stdout  # each label with its keys in full
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(r["group"], r["config"]) for r in rows] == [("lr=20", "optim.lr=20.0"), ("lr=10", "optim.lr=10.0")]
    assert float(rows[1]["valid_ppl_mean"]) == pytest.approx(_last_valid(runs[2])["ppl"], rel=1e-5)
    assert float(rows[1]["train_loss_mean"]) > 0 and "ppl_mean" not in rows[1]


def test_report_of_something_that_is_not_a_run(tmp_path):
    (tmp_path / "notes").mkdir()
    assert_one_line_error(run_cli("report", str(tmp_path), "--no-plot"), "is not an infolm run directory")
    assert_one_line_error(run_in_process("report", str(tmp_path / "nothing"), "--no-plot"), "no such folder")
    (tmp_path / "notes.txt").write_text("")
    assert_one_line_error(run_in_process("report", str(tmp_path / "notes.txt"), "--no-plot"), "not a folder")


def test_format_mean_std_cells() -> None:
    from infolm.report import format_mean_std

    assert format_mean_std([]) == "–" and format_mean_std([], empty="—") == "—"
    assert format_mean_std([2.0]) == "2.00" and format_mean_std([2.0], digits=1) == "2.0"
    assert format_mean_std([1.0, 2.0, 3.0]) == "2.00 ± 1.00"  # the sample standard deviation
    assert (
        format_mean_std([0.5], signed=True) == "+0.50" and format_mean_std([-1.0, -3.0], signed=True) == "-2.00 ± 1.41"
    )


# ---- curves on synthetic runs ------------------------------------------------------------------------


def _write_run(path, seed, records, **config):
    path.mkdir(parents=True)
    settings = {"run": {"dir": str(path), "seed": seed}, "optim": {"lr": 20.0}, "task": {"name": "stream-lm"}}
    for key, value in config.items():
        section, name = key.split("__")
        settings.setdefault(section, {})[name] = value
    (path / "config.yaml").write_text(yaml.safe_dump(settings))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _train(step, loss, elapsed):
    return {"step": step, "epoch": 0, "loss": loss, "elapsed": elapsed}


def _valid(step, ppl):
    return {"step": step, "epoch": 0, "split": "valid", "loss": math.log(ppl), "ppl": ppl, "best_loss": math.log(ppl)}


@pytest.fixture
def synthetic(tmp_path):
    """lr=20 on two seeds that logged at different steps, lr=5 on one seed."""
    seed0 = [_train(10, 4.0, 1.0), _valid(10, 100.0), _train(20, 3.0, 2.0), _train(30, 2.0, 3.0), _valid(30, 50.0)]
    seed1 = [_train(10, 5.0, 2.0), _valid(10, 200.0), _train(25, 3.5, 4.0), _train(40, 2.5, 6.0), _valid(40, 60.0)]
    other = [_train(10, 6.0, 1.0), _valid(10, 300.0), _train(20, 5.0, 2.0), _valid(20, 250.0)]
    return [
        _write_run(tmp_path / "a0", 0, seed0),
        _write_run(tmp_path / "a1", 1, seed1),
        _write_run(tmp_path / "b0", 0, other, optim__lr=5.0),
    ]


def test_summary_curve_interpolates_over_the_range_all_seeds_cover():
    from infolm.report import summary_curve

    curve = summary_curve([[(10, 4.0), (20, 3.0), (30, 2.0)], [(10, 5.0), (25, 3.5), (40, 2.5)]])
    # the second seed at 20 and 30 lies on its lines 10-25 and 25-40; nothing beyond 30, where seed 0 ends
    second = np.array([5.0, 4.0, 3.5, 3.5 - 1.0 / 3])
    first = np.array([4.0, 3.0, 2.5, 2.0])
    np.testing.assert_allclose(curve.x, [10, 20, 25, 30])
    np.testing.assert_allclose(curve.mean, (first + second) / 2)
    np.testing.assert_allclose(curve.sd, np.abs(first - second) / math.sqrt(2))  # sample sd of two
    assert curve.seeds == 2
    one = summary_curve([[(5, 1.0), (5, 2.0)]])  # a step logged again (a resumed run) keeps its last value
    assert one.x.tolist() == [5.0] and one.mean.tolist() == [2.0] and one.sd.tolist() == [0.0]
    assert summary_curve([[(0, 1.0), (1, 1.0)], [(2, 1.0), (3, 1.0)]]) is None  # no step both cover


def test_plot_draws_each_group_mean_and_band_in_one_colour_per_group(synthetic, tmp_path):
    from infolm.report import group_curves, plot_curves, plot_warnings, report

    runs, _ = report(synthetic)
    lr20, lr5 = group_curves(runs)
    assert (lr20.label, lr20.seeds, lr5.label) == ("lr=20", [0, 1], "lr=5")
    _, train = lr20.panels["train", "step"]
    np.testing.assert_allclose(train.mean, [4.5, 3.5, 3.0, (2.0 + 3.5 - 1.0 / 3) / 2])
    seeds, valid = lr20.panels["valid", "step"]  # perplexity: the exp of the logged per-token NLL
    assert seeds[1] == [(10.0, pytest.approx(200.0)), (40.0, pytest.approx(60.0))]
    np.testing.assert_allclose(valid.x, [10, 30])
    np.testing.assert_allclose(valid.mean, [150.0, (50.0 + 200.0 - 140.0 * 2 / 3) / 2])
    np.testing.assert_allclose(valid.sd[0], statistics.stdev([100.0, 200.0]))
    _, timed = lr20.panels["train", "time"]  # the step grid's means at the seeds' mean elapsed seconds
    np.testing.assert_allclose(
        timed.x, [(1 + 2) / 2, (2 + 2 + 2 * 10 / 15) / 2, (2.5 + 4) / 2, (3 + 4 + 2 * 5 / 15) / 2]
    )
    np.testing.assert_allclose(timed.mean, train.mean)

    assert plot_warnings(runs) == ["lr=20: its seeds end at steps 30, 40; the mean stops at step 30"]

    figure = plot_curves(runs, tmp_path / "curves.png")
    steps, _, valid_axes, _ = figure.axes[:4]
    lines = {line.get_gid(): line for line in steps.get_lines()}
    assert set(lines) == {"lr=20/seed 0", "lr=20/seed 1", "lr=20/mean", "lr=5/mean"}
    assert lines["lr=20/seed 0"].get_color() == lines["lr=20/seed 1"].get_color() == lines["lr=20/mean"].get_color()
    assert lines["lr=5/mean"].get_color() != lines["lr=20/mean"].get_color()
    assert lines["lr=20/seed 0"].get_alpha() < 1 and lines["lr=20/mean"].get_linewidth() > 1
    np.testing.assert_allclose(lines["lr=20/mean"].get_ydata(), train.mean)
    assert len(steps.collections) == 1  # one band: lr=5 has a single seed
    assert "perplexity" in valid_axes.get_ylabel() and "step" in steps.get_xlabel()
    assert "seconds" in figure.axes[1].get_xlabel() and "nats per token" in steps.get_ylabel()


def test_a_metric_that_is_not_an_nll_is_drawn_as_itself(tmp_path):
    from infolm.report import group_curves, plot_curves, report

    def valid(step, mcc):
        return {"step": step, "split": "valid", "mcc": mcc, "accuracy": 0.7, "loss": 0.6, "best_mcc": mcc}

    records = [_train(10, 0.7, 1.0), valid(10, 0.1), _train(20, 0.6, 2.0), valid(20, 0.3)]
    run = _write_run(tmp_path / "cola", 1, records, task__name="classification")
    runs, groups = report([run])
    (group,) = group_curves(runs)
    assert group.panels["valid", "step"][0] == [[(10.0, 0.1), (20.0, 0.3)]]  # MCC as logged, no exp
    assert set(groups[0].stats) >= {"valid_mcc", "best_valid_mcc", "valid_accuracy", "valid_loss", "train_loss"}
    figure = plot_curves(runs, tmp_path / "curves.png")
    assert figure.axes[2].get_ylabel() == "validation MCC" and "nats per sentence" in figure.axes[0].get_ylabel()


def test_a_run_with_one_point_is_drawn_as_a_marker_with_a_warning(tmp_path):
    from infolm.report import plot_curves, report

    run = _write_run(tmp_path / "short", 0, [_train(5, 7.0, 0.5), _valid(5, 900.0)])
    png = tmp_path / "curves.png"
    result = run_in_process("report", str(run), "--plot", str(png))
    assert result.returncode == 0, result.stderr
    assert f"warning: {run}: one training loss point only (step 5)" in result.stderr
    assert f"warning: {run}: one validation point only (step 5)" in result.stderr
    (mean,) = plot_curves(report([run])[0], png).axes[0].get_lines()
    assert mean.get_marker() == "o" and mean.get_xdata().tolist() == [5.0]


def test_group_labels_are_short_and_unique_and_the_full_keys_are_kept():
    from infolm.report import LABEL_CHARS, group_labels

    base = {"run.dir": "x", "optim.lr": 20.0, "model.name": "lstm", "objective.mle.weight": 1.0}
    many = [{**base, **{f"model.setting_{i:02d}": (i + 1) * j + 0.5 for i in range(40)}} for j in range(4)]
    named = group_labels(many)
    labels = [label for _, label, _ in named]
    assert labels == ["setting_00=0.5", "setting_00=1.5", "setting_00=2.5", "setting_00=3.5"]  # one key tells
    assert all(len(full) == 40 for _, _, full in named)  # the full mapping loses nothing
    assert named[1][0].startswith("model.setting_00=1.5 model.setting_01=2.5 ")

    imm = {**base, "objective.imm.weight": 0.1, "objective.imm.k": 10, "objective.imm.arpa": "runs/kn3.arpa"}
    configs = [base, imm, {**imm, "objective.imm.weight": 0.5}]
    assert [label for _, label, _ in group_labels(configs)] == ["no imm", "imm.weight=0.1", "imm.weight=0.5"]
    configs = [{**base, "objective.ar.weight": 2.0}, {**base, "objective.ar.weight": 2.0, "objective.tar.weight": 1.0}]
    assert [label for _, label, _ in group_labels(configs)] == ["no tar", "+tar"]  # ar is common to both
    grid = [{**base, "optim.lr": lr, "model.dropout": dropout} for lr in (5.0, 20.0) for dropout in (0.0, 0.5)]
    assert [label for _, label, _ in group_labels(grid)] == [
        "dropout=0, lr=5",
        "dropout=0.5, lr=5",
        "dropout=0, lr=20",
        "dropout=0.5, lr=20",
    ]
    noising = {**base, "objective.noising.weight": 1.0, "objective.noising.gamma0": 0.2}
    del noising["objective.mle.weight"]  # noising in place of MLE: named by the term it adds
    ablation = [base, noising, {**base, "optim.lr": 5.0}, {**base, "optim.decay": 0.5}]
    labelled = group_labels(ablation)
    assert [label for _, label, _ in labelled] == ["lr=20", "+noising, lr=20", "lr=5", "decay=0.5, lr=20"]
    wide = {**base, **{f"model.setting_{i}": "a-long-default-value" for i in range(5)}}
    one_hot = [wide] + [{**wide, f"model.setting_{i}": "another-long-value"} for i in range(5)]
    labels = [label for _, label, _ in group_labels(one_hot)]  # 5 keys needed: capped, numbered
    assert len(set(labels)) == 6 and all(len(label) <= LABEL_CHARS for label in labels)
    assert labels[0] == "g1 setting_0=a-long…t-value, setting_1=…"
    paths = [{**base, "data.train": f"/corpora/wikitext-103-tokenized-part-{i}.txt"} for i in (1, 2)]
    assert [label for _, label, _ in group_labels(paths)] == ["train=wikite…t-1.txt", "train=wikite…t-2.txt"]
    assert group_labels([base, {**base, "run.seed": 3, "train.max_steps": 9}])[0][1] == "all runs"


def test_a_finetune_folder_reports_its_seeds(tmp_path):
    parent = tmp_path / "finetune"
    result = run_in_process("finetune", "configs/tiny.yaml", "--seeds", "1,2", f"run.dir={parent}", "train.max_steps=2")
    assert result.returncode == 0, result.stderr
    result = run_in_process("report", str(parent), "--json", "--no-plot")
    assert result.returncode == 0, result.stderr
    (group,) = json.loads(result.stdout)
    assert group["seeds"] == [1, 2] and group["runs"] == [str(parent / "seed-1"), str(parent / "seed-2")]
    assert f"{parent}: 2 runs of a finetune (seed-1, seed-2)" in result.stderr


def test_a_folder_of_sweep_trials_reports_the_trials_that_have_metrics(synthetic, tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    for number, run in enumerate(synthetic):
        run.rename(sweep / f"trial-{number:04d}")
    (sweep / "trial-0003").mkdir()
    (sweep / "trial-0003" / "config.yaml").write_text("run: {seed: 0}\n")  # started, nothing logged yet
    result = run_in_process("report", str(sweep), "--csv", "--no-plot")
    assert result.returncode == 0, result.stderr
    assert [row["group"] for row in csv.DictReader(io.StringIO(result.stdout))] == ["lr=20", "lr=5"]
    assert f"{sweep / 'trial-0003'}: no metrics.jsonl yet, left out" in result.stderr
