"""infolm.sweep with declared objectives: a two-objective study traces an NLL-vs-MI front (Melis thesis
Sec. 5.7), values come from each run's selected checkpoint, resume keeps the count, a λ grid tunes lr per
point, and bad declarations are refused with one line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from infolm.errors import InfolmError
from infolm.sweep import load_sweep, run_sweep
from infolm.sweep.report import nondominated
from infolm.training.metrics import read_metrics

ROOT = Path(__file__).resolve().parent.parent
# The CPU synthetic task (uniform over 1,000 symbols), 40 steps with evaluations at 20 and 40: about a
# second a trial. At λ near 1 the MI term dominates and the NLL climbs after step 20, so the selected
# checkpoint (step 20) is not the last evaluation.
TOY = [
    "train.max_steps=40",
    "train.eval_every=20",
    "train.checkpoint_every=40",
    "train.log_every=20",
    "task.valid_samples=8",
    "objective.mi-kl.samples=4",
    "optim.lr=0.005",
    "data.batch_size=32",
]
LOSS_AND_MI = [{"key": "loss", "direction": "minimize"}, {"key": "mi", "direction": "maximize"}]


def write_sweep(tmp_path: Path, **spec) -> Path:
    spec = {"base": str(ROOT / "configs" / "synthetic" / "cpu-gaussian.yaml"), "dir": str(tmp_path / "sweep"),
            "overrides": TOY, **spec}  # fmt: skip
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def read_rows(tmp_path: Path) -> list[dict[str, str]]:
    with (tmp_path / "sweep" / "results.csv").open() as f:
        return list(csv.DictReader(f))


def valid_records(run_dir: str) -> list[dict]:
    return [r for r in read_metrics(Path(run_dir) / "metrics.jsonl") if r.get("split") == "valid"]


@pytest.fixture(scope="module")
def two_objective_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[dict[str, str]]]:
    tmp_path = tmp_path_factory.mktemp("two-objective")
    lam = {"objective.mi-kl.lam": {"type": "uniform", "low": 0.9, "high": 0.9999}}
    summary = run_sweep(write_sweep(tmp_path, trials=5, objectives=LOSS_AND_MI, params=lam))
    assert (tmp_path / "sweep" / "front.png").stat().st_size > 1000
    return summary, read_rows(tmp_path)


def test_a_loss_and_mi_sweep_spreads_its_trials_along_a_front(two_objective_sweep) -> None:
    """Minimising NLL alone would pick the trial of least MI; the two-objective study keeps a front of
    several trials spread in MI, and a trial is on it exactly when no other trial dominates it."""
    summary, rows = two_objective_sweep
    assert summary["finished"] == 5 and summary["complete"] == 5
    mi = [float(r["mi"]) for r in rows]
    assert max(mi) - min(mi) > 0.5  # nats (a collapsed posterior: about 0.03 here)
    points = [(float(r["loss"]), float(r["mi"])) for r in rows]
    assert [r["on_front"] == "1" for r in rows] == nondominated(points, ["minimize", "maximize"])
    assert len(summary["front"]) == sum(r["on_front"] == "1" for r in rows) > 1
    best_loss = min(range(len(rows)), key=lambda i: points[i][0])
    assert rows[best_loss]["on_front"] == "1" and mi[best_loss] < max(mi)  # the NLL optimum is one end only


def test_the_values_are_the_selected_checkpoints_record(two_objective_sweep) -> None:
    """Each trial scores its validation record at its best step (checkpoints/best), not the last one."""
    _, rows = two_objective_sweep
    later_worse = 0
    for row in rows:
        records = valid_records(row["run_dir"])
        best = min(records, key=lambda r: r["loss"])
        assert (float(row["loss"]), float(row["mi"])) == (best["loss"], best["mi"])
        meta = json.loads((Path(row["run_dir"]) / "checkpoints" / "best" / "meta.json").read_text())
        assert meta["step"] == best["step"]
        later_worse += records[-1]["loss"] > best["loss"]
    assert later_worse  # some trial's last evaluation differs from its selected one


def test_at_last_reads_the_last_evaluation(two_objective_sweep, tmp_path: Path) -> None:
    """A frontier run's lowest-NLL checkpoint can be an early one with its latents unused: ``at: last``
    reads the end of the schedule instead; any other value is refused with one line."""
    from infolm.sweep.study import selected_values

    _, rows = two_objective_sweep
    for row in rows:
        last = valid_records(row["run_dir"])[-1]
        step, values = selected_values(Path(row["run_dir"]), ["loss", "mi"], "last")
        assert (step, values) == (last["step"], {"loss": last["loss"], "mi": last["mi"]})
    with pytest.raises(InfolmError, match="sweep at must be selected or last"):
        load_sweep(write_sweep(tmp_path, trials=1, objectives=LOSS_AND_MI, at="best",
                               params={"optim.lr": {"type": "log_uniform", "low": 1e-3, "high": 1e-2}}))  # fmt: skip


def test_a_multi_objective_sweep_resumes_with_its_count(tmp_path: Path) -> None:
    """Resumed, the study keeps its finished trials; a trial cut off is retried in its run directory."""
    import optuna

    lam = {"objective.mi-kl.lam": {"type": "uniform", "low": 0.0, "high": 0.99}}
    path = write_sweep(tmp_path, trials=1, objectives=LOSS_AND_MI, params=lam)
    (tmp_path / "sweep").mkdir()
    study = optuna.create_study(study_name="sweep", storage=f"sqlite:///{tmp_path / 'sweep' / 'study.db'}",
                                directions=["minimize", "maximize"])  # fmt: skip
    cut_off = study.ask()  # left RUNNING, as after a kill
    lam_cut = cut_off.suggest_float("objective.mi-kl.lam", 0.0, 0.99)
    assert run_sweep(path)["finished"] == 1
    assert run_sweep(path, trials=2)["finished"] == 2
    again = run_sweep(path)  # the file's budget (1) is reached: nothing runs, nothing is lost
    assert again["finished"] == 2 and again["complete"] == 2
    rows = [r for r in read_rows(tmp_path) if r["state"] == "complete"]
    assert len(rows) == 2 and float(rows[0]["objective.mi-kl.lam"]) == pytest.approx(lam_cut)
    assert Path(rows[0]["run_dir"]).name == "trial-0000"
    with pytest.raises(InfolmError, match=r"directions \['minimize', 'maximize'\].*declares \['minimize'\]"):
        run_sweep(write_sweep(tmp_path, trials=3, params=lam))  # the same study.db, one objective


def test_a_grid_tunes_lr_at_every_lambda(tmp_path: Path) -> None:
    """Each λ of the grid gets its own trials_per_point trials over lr; the front is the best trial of each
    λ by the first objective; a resume with --trials 3 adds one trial per point."""
    lr = {"optim.lr": {"type": "log_uniform", "low": 0.002, "high": 0.008}}
    grid = {"objective.mi-kl.lam": [0.0, 0.99]}
    path = write_sweep(tmp_path, grid=grid, trials_per_point=2, objectives=LOSS_AND_MI, params=lr)
    summary = run_sweep(path)
    assert summary["finished"] == 4 and len(summary["front"]) == 2
    rows = read_rows(tmp_path)
    for point, lam in enumerate(grid["objective.mi-kl.lam"]):
        mine = [r for r in rows if r["point"] == str(point)]
        assert len(mine) == 2 and all(float(r["objective.mi-kl.lam"]) == lam for r in mine)
        assert len({r["optim.lr"] for r in mine}) == 2  # lr tuned, not repeated
        for row in mine:
            config = yaml.safe_load((Path(row["run_dir"]) / "config.yaml").read_text())
            assert config["objective"]["mi-kl"]["lam"] == lam and config["optim"]["lr"] == float(row["optim.lr"])
        best = min(mine, key=lambda r: float(r["loss"]))
        assert [r["on_front"] for r in mine] == ["1" if r is best else "0" for r in mine]
    front_mi = sorted(entry["values"]["mi"] for entry in summary["front"])
    assert front_mi[1] > front_mi[0] + 0.3  # λ = 0.99 uses the latent, λ = 0 hardly
    assert run_sweep(path, trials=3)["finished"] == 6
    assert sorted(r["point"] for r in read_rows(tmp_path)) == ["0", "0", "0", "1", "1", "1"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"objectives": [{"key": "loss", "direction": "lower"}]}, "direction must be minimize or maximize"),
        ({"objectives": [{"key": "mi"}, {"key": "mi", "direction": "maximize"}]}, "'mi' is declared twice"),
        ({"objectives": []}, "objectives is empty"),
        ({"objectives": [{"key": "mi", "sense": "up"}]}, r"unknown config key sweep\.objectives\[0\]\.sense"),
        ({"grid": {"objective.mi-kl.lam": [0.0, 0.5]}, "trials": 3}, "budget is trials_per_point"),
        ({"trials_per_point": 2}, "trials_per_point needs a grid"),
        ({"grid": {"objective.mi-kl.lam": []}, "trials_per_point": 2}, "non-empty list"),
        ({"grid": {"optim.lr": [0.001]}, "trials_per_point": 2}, "both in grid and in params"),
        ({"grid": {"objective.mi-kl.lam": [0.5, 0.5]}, "trials_per_point": 2}, "lists a value twice"),
    ],
)
def test_bad_declarations_fail_with_one_line(tmp_path: Path, extra: dict, message: str) -> None:
    path = write_sweep(tmp_path, params={"optim.lr": {"type": "uniform", "low": 0.001, "high": 0.01}}, **extra)
    with pytest.raises(InfolmError, match=message) as caught:
        load_sweep(path)
    assert "\n" not in str(caught.value)


def test_an_objective_the_record_lacks_stops_the_sweep_with_one_line(tmp_path: Path) -> None:
    lam = {"objective.mi-kl.lam": {"type": "uniform", "low": 0.0, "high": 0.5}}
    objectives = [{"key": "loss"}, {"key": "mutual_info", "direction": "maximize"}]
    path = write_sweep(tmp_path, trials=3, objectives=objectives, params=lam)
    with pytest.raises(InfolmError, match="'mutual_info' is not in the run's validation record") as caught:
        run_sweep(path)
    assert "\n" not in str(caught.value) and "mi" in str(caught.value)
    assert len(read_rows(tmp_path)) == 1  # stopped at the first trial, not three failures
