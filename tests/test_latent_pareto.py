"""`infolm pareto`: the frontier rule, the files it writes, and one-line refusals."""

from __future__ import annotations

import csv
import json

from infolm.latent.pareto import frontier
from tests.conftest import run_cli


def test_frontier_keeps_points_no_other_point_beats_in_both() -> None:
    # (mi, nll): (2, 9.5) beats (1, 9.6); (0, 9.21) has the lowest NLL; (2, 9.7) is dominated by (2, 9.5)
    points = [(0.0, 9.21), (1.0, 9.6), (2.0, 9.5), (2.0, 9.7), (3.0, 9.9), (0.5, 9.3)]
    assert frontier(points) == [True, False, True, False, True, True]
    assert frontier([(1.0, 9.0), (1.0, 9.0)]) == [True, False]  # a tie is kept once
    assert frontier([]) == []


def write_run(path, objective: dict, records: list[dict]) -> None:
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(json.dumps({"objective": objective}))  # JSON is YAML
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_pareto_writes_csv_and_png(tmp_path) -> None:
    kl = {"mi-kl": {"estimator": "dreg", "samples": 16}}
    renyi = {"mi-renyi": {"estimator": "dreg", "samples": 16, "mi_samples": 1}}
    valid = {"split": "valid"}
    write_run(
        tmp_path / "a", kl, [{"step": 1, "loss": 3.0}, {"step": 9, "loss": 9.3, "mi": 1.0, "best_loss": 9.3, **valid}]
    )
    write_run(tmp_path / "b", kl, [{"step": 9, "loss": 9.4, "mi": 0.5, "best_loss": 9.4, **valid}])  # dominated by a
    write_run(
        tmp_path / "sweep" / "trial-0000", renyi, [{"step": 9, "loss": 9.25, "mi": 0.2, "best_loss": 9.25, **valid}]
    )
    out = tmp_path / "out"
    result = run_cli("pareto", str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "sweep"), "--out", str(out),
                     "--optimum", "9.2103", "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["on_frontier"] == 2
    rows = list(csv.DictReader((out / "pareto.csv").open()))
    flags = {row["run"].split("/")[-1]: row["on_frontier"] for row in rows}
    assert flags == {"a": "1", "b": "0", "trial-0000": "1"}
    assert {row["group"] for row in rows} == {"mi-kl dreg 16", "mi-renyi dreg 16/1"}
    assert (out / "pareto.png").stat().st_size > 1000


def test_pareto_refuses_a_directory_without_runs(tmp_path) -> None:
    result = run_cli("pareto", str(tmp_path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "not a run directory" in result.stderr
    assert not (tmp_path / "out").exists()
