"""``infolm report``: runs grouped by config with mean ± std over seeds, as a table, JSON and CSV, and
their learning curves as a PNG."""

from __future__ import annotations

import csv
import io
import json
import statistics

import pytest

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
    assert pair["seeds"] == [0, 1]
    ppl = [_last_valid(run)["ppl"] for run in runs[:2]]
    assert pair["mean"]["ppl"] == pytest.approx(statistics.fmean(ppl))
    assert pair["std"]["ppl"] == pytest.approx(statistics.stdev(ppl))
    assert groups["optim.lr=10.0"]["std"]["ppl"] == 0.0 and pair["mean"]["step"] == 4
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_table_and_csv(runs, tmp_path):
    table, result = run_cli_concurrently(
        ["report", *map(str, runs), "--no-plot"], ["report", *map(str, runs), "--csv", "--no-plot"]
    )
    assert table.returncode == 0, table.stderr
    assert "| config | seeds |" in table.stdout and "| optim.lr=20.0 | 0, 1 |" in table.stdout
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [r["config"] for r in rows] == ["optim.lr=20.0", "optim.lr=10.0"]
    assert float(rows[1]["ppl_mean"]) == pytest.approx(_last_valid(runs[2])["ppl"], rel=1e-5)


def test_report_of_something_that_is_not_a_run(tmp_path):
    assert_one_line_error(run_cli("report", str(tmp_path), "--no-plot"), "is not an infolm run directory")


def test_format_mean_std_cells() -> None:
    from infolm.report import format_mean_std

    assert format_mean_std([]) == "–" and format_mean_std([], empty="—") == "—"
    assert format_mean_std([2.0]) == "2.00" and format_mean_std([2.0], digits=1) == "2.0"
    assert format_mean_std([1.0, 2.0, 3.0]) == "2.00 ± 1.00"  # the sample standard deviation
    assert (
        format_mean_std([0.5], signed=True) == "+0.50" and format_mean_std([-1.0, -3.0], signed=True) == "-2.00 ± 1.41"
    )
