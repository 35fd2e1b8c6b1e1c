"""Melis thesis, word-level PTB on a tiny CPU budget: cells, multi-sample objective, dynamic eval / MC
dropout, weight averaging.

    OMP_NUM_THREADS=1 python experiments/melis_ptb_word.py train     # training runs, one at a time (resumable)
    OMP_NUM_THREADS=1 python experiments/melis_ptb_word.py budget    # the arms at an equal CPU budget (3 seeds)
    OMP_NUM_THREADS=1 python experiments/melis_ptb_word.py evaluate  # test ppl; dynamic eval, MC dropout,
                                                                     # temperature (lstm-s0, equal-budget LSTMs)
    OMP_NUM_THREADS=1 python experiments/melis_ptb_word.py converged [--arms ...] [--seeds ...]
                                     # LSTM vs Mogrifier (2TA) and LSTM with tail averaging, each to early
                                     # stopping; test ppl; dynamic eval / MC dropout / temperature on them
    python experiments/melis_ptb_word.py report  # runs/melis-ptb-word/tables.md and docs/img/averaging.png,
                                                 # docs/img/melis_converged.png

Every run is an ``infolm train`` / ``infolm evaluate`` subprocess; the command line, wall time and JSON
summary of each are kept in ``runs/melis-ptb-word/log.jsonl``, and a finished step is skipped when rerun.

    python experiments/melis_ptb_word.py archive  # the converged runs whose every step ended, as records

``converged`` copies each run whose training, test and extras all ended (its config, log and summary,
no checkpoint) with its steps' records into ``experiments/records/melis-ptb-word-converged/``, kept in
the repository, as soon as its last step ends (``archive`` does it for every such run found);
``report`` and ``converged`` read those records beside the local runs (a local run stands for a record
of the same name), and ``converged`` does not run a recorded run's steps again.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from infolm.errors import InfolmError
from infolm.report import format_mean_std
from infolm.training.records import RECORD, archive_run

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "runs" / "melis-ptb-word"
LOG = OUT / "log.jsonl"
RECORDS = ROOT / "experiments" / "records" / "melis-ptb-word-converged"  # converged runs, kept in the repository
SEEDS = (0, 1, 2)
CELLS = {  # arm -> config (equal parameter counts, equal 200-step budget)
    "lstm": "configs/ptb/melis-small-lstm.yaml",
    "mogrifier": "configs/ptb/melis-small-mogrifier.yaml",
    "rlstm": "configs/ptb/melis-small-rlstm.yaml",
    "lstm-ms": "configs/ptb/melis-small-lstm-multisample.yaml",
}
AVERAGING = {  # averager -> config (same seed, so the raw trajectory is the same)
    "2ta": "configs/ptb/melis-small-lstm-2ta.yaml",
    "tail": "configs/ptb/melis-small-lstm-tail.yaml",
    "ema": "configs/ptb/melis-small-lstm-ema.yaml",
}
CONVERGED = {  # arm -> config: trained to early stopping (configs/ptb/melis-converged-*.yaml state the scale)
    "lstm": "configs/ptb/melis-converged-lstm.yaml",
    "mogrifier": "configs/ptb/melis-converged-mogrifier.yaml",
    "lstm-tail": "configs/ptb/melis-converged-lstm-tail.yaml",
}
CONVERGED_EXTRAS = ("lstm", "mogrifier")  # the converged models dynamic evaluation and MC dropout are applied to
CONVERGED_EXTRAS_ARGS = [
    "--dynamic",
    "--dynamic-ms-tokens",
    "0",  # MS over all of train (Krause et al.): 1,024 rows of ~900 tokens, 45 windows of 20
    "--dynamic-tune-tokens",
    "20000",
    "--mc-dropout",
    "32",  # the thesis: 200 masks; 32 on one CPU core (fewer masks bias the average towards a worse NLL)
    "--mc-tune-tokens",
    "20000",
    "--tune-temperature",
]
BUDGET_S = 100.0  # training seconds per run of the equal-budget comparison (one core)
CALIBRATION_STEPS = 40  # steps timed per arm to turn the budget into a step count
EXTRAS_RUN = "lstm-s0"  # the trained model that dynamic evaluation, MC dropout and temperature are applied to
EXTRAS_ARGS = [
    "--dynamic",
    "--dynamic-ms-tokens",
    "0",  # all of train: 20,000 tokens at the thesis's 1,024 rows would be one window (the earlier runs: 64 rows)
    "--dynamic-tune-tokens",
    "3000",
    "--mc-dropout",
    "8",
    "--tune-temperature",
]


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def _recorded() -> dict[str, dict[str, Any]]:
    """The steps that the converged runs' records kept (``archive``), by key."""
    found: dict[str, dict[str, Any]] = {}
    for record in sorted(RECORDS.glob(f"*/{RECORD}")) if RECORDS.is_dir() else []:
        found.update({r["key"]: r for r in json.loads(record.read_text()).get("log", [])})
    return found


def _done() -> dict[str, dict[str, Any]]:
    """Every step that succeeded: the records' first, then this machine's log (which wins)."""
    done = _recorded()
    if LOG.exists():
        done.update({r["key"]: r for r in map(json.loads, LOG.read_text().splitlines()) if r.get("rc") == 0})
    return done


def _run(key: str, command: list[str]) -> None:
    """Run ``command`` (JSON on stdout) unless ``key`` already succeeded; log command, wall time, result.
    An evaluation (``extras/``) whose arguments changed since runs again: its record names its command."""
    done = _done().get(key)
    if done is not None and (not key.startswith("extras/") or done["command"] == " ".join(command)):
        print(f"[skip] {key}")
        return
    print(f"[run ] {key}: {' '.join(command)}", flush=True)
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True)
    wall = time.perf_counter() - start
    result: Any = None
    if proc.returncode == 0:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    else:
        sys.stderr.write(proc.stderr[-2000:])
    record = {"key": key, "command": " ".join(command), "wall_s": wall, "rc": proc.returncode, "result": result}
    OUT.mkdir(parents=True, exist_ok=True)
    with LOG.open("a") as f:
        f.write(json.dumps(record) + "\n")
    print(f"       rc={proc.returncode} {wall:.0f}s", flush=True)


def train_jobs() -> list[tuple[str, list[str]]]:
    jobs = []
    for seed in SEEDS:
        for arm, config in CELLS.items():
            run = f"{arm}-s{seed}"
            jobs.append((f"train/{run}", [config, f"run.dir=runs/melis-ptb-word/{run}", f"run.seed={seed}"]))
        for name, config in AVERAGING.items():  # seed 0 right after the first seed of each arm
            run = f"avg-{name}" if seed == 0 else f"avg-{name}-s{seed}"
            jobs.append((f"train/{run}", [config, f"run.dir=runs/melis-ptb-word/{run}", f"run.seed={seed}"]))
    return [(key, ["infolm", "train", *args, "--json"]) for key, args in jobs]


def cmd_train(_: argparse.Namespace) -> None:
    for key, command in train_jobs():
        _run(key, command)


def cmd_evaluate(_: argparse.Namespace) -> None:
    runs = [key.split("/", 1)[1] for key, _ in train_jobs()]
    for run in runs:
        if (OUT / run / "config.yaml").exists():
            _run(f"test/{run}", ["infolm", "evaluate", f"runs/melis-ptb-word/{run}", "--split", "test", "--json"])
    for seed in SEEDS:  # dynamic evaluation, MC dropout and temperature on each equal-budget LSTM seed
        run = f"budget/lstm-s{seed}"
        if (OUT / run / "config.yaml").exists():
            _run(f"extras/{run}", ["infolm", "evaluate", f"runs/melis-ptb-word/{run}", *EXTRAS_ARGS, "--json"])
    _run(f"extras/{EXTRAS_RUN}", ["infolm", "evaluate", f"runs/melis-ptb-word/{EXTRAS_RUN}", *EXTRAS_ARGS, "--json"])


# ------------------------------------------------------------------------------------------------
# at convergence: each arm until validation stops improving (early stopping), then test and the extras


def converged_jobs(arms: list[str], seeds: list[int]) -> list[tuple[str, list[str]]]:
    jobs = []
    for seed in seeds:
        for arm in arms:
            run = f"converged/{arm}-s{seed}"
            directory = f"runs/melis-ptb-word/{run}"
            train = [CONVERGED[arm], f"run.dir={directory}", f"run.seed={seed}", "--json"]
            jobs.append((f"train/{run}", ["infolm", "train", *train]))
            jobs.append((f"test/{run}", ["infolm", "evaluate", directory, "--split", "test", "--json"]))
            if arm in CONVERGED_EXTRAS:
                jobs.append((f"extras/{run}", ["infolm", "evaluate", directory, *CONVERGED_EXTRAS_ARGS, "--json"]))
    return jobs


def cmd_converged(args: argparse.Namespace) -> None:
    """Each run's training, test and extras in turn; a run whose last step ended is archived at once, so
    that its record is in the working tree before the next run starts (a lost machine keeps it)."""
    jobs = converged_jobs(args.arms, args.seeds)
    for index, (key, command) in enumerate(jobs):
        run = key.split("/", 1)[1]
        if not (OUT / run).is_dir() and (RECORDS / run.split("/", 1)[1] / RECORD).is_file():
            print(f"[skip] {key}: recorded (no weights here to evaluate again)", flush=True)
            continue
        if not key.startswith("train/") and f"train/{run}" not in _done():
            print(f"[skip] {key}: its training did not finish (a rerun resumes it)", flush=True)
            continue
        _run(key, command)
        last_of_run = index + 1 == len(jobs) or jobs[index + 1][0].split("/", 1)[1] != run
        if last_of_run and key in _done():
            archive_converged(OUT / run)


# ------------------------------------------------------------------------------------------------
# equal CPU budget: each arm gets the number of steps its measured step time fits into BUDGET_S


def calibrate() -> dict[str, float]:
    """Seconds per training step of each arm, from the logged tokens/s of a short run (steps 20-40)."""
    path = OUT / "budget-calibration.json"
    if path.exists():
        return json.loads(path.read_text())
    step_s = {}
    for arm, config in CELLS.items():
        run_dir = OUT / f"calibrate-{arm}"
        args = [f"run.dir={run_dir}", f"train.max_steps={CALIBRATION_STEPS}", "train.log_every=10"]
        args += ["train.eval_every=0", "train.checkpoint_every=0", "data.max_eval_tokens=1000"]
        _run(f"calibrate/{arm}", ["infolm", "train", config, *args, "--json"])
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r and r["step"] > 10]
        tokens_per_step = 20 * 35
        step_s[arm] = tokens_per_step / statistics.mean(rates)
    path.write_text(json.dumps(step_s, indent=1))
    return step_s


def budget_steps(step_s: dict[str, float]) -> dict[str, int]:
    return {arm: max(40, int(round(BUDGET_S / seconds / 20.0)) * 20) for arm, seconds in step_s.items()}


def cmd_budget(_: argparse.Namespace) -> None:
    steps = budget_steps(calibrate())
    print(f"steps for {BUDGET_S:.0f} s: {steps}", flush=True)
    for seed in SEEDS:
        for arm, config in CELLS.items():
            run = f"budget/{arm}-s{seed}"
            n = steps[arm]
            args = [f"run.dir=runs/melis-ptb-word/{run}", f"run.seed={seed}", f"train.max_steps={n}"]
            args += [f"train.eval_every={n // 4}", "train.log_every=20"]
            _run(f"train/{run}", ["infolm", "train", config, *args, "--json"])
            _run(f"test/{run}", ["infolm", "evaluate", f"runs/melis-ptb-word/{run}", "--split", "test", "--json"])


def budget_table(done: dict[str, dict[str, Any]]) -> str:
    path = OUT / "budget-calibration.json"
    if not path.exists():
        return "(not run)"
    step_s = json.loads(path.read_text())
    steps = budget_steps(step_s)
    rows = [
        "| arm | s / step (calibrated) | steps | seeds | valid ppl (best) | test ppl | per-seed valid | per-seed test |"
        " train wall s (mean) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |",
    ]
    for arm in CELLS:
        valid, test, walls = [], [], []
        for seed in SEEDS:
            train = done.get(f"train/budget/{arm}-s{seed}")
            tested = done.get(f"test/budget/{arm}-s{seed}")
            if train is None or tested is None:
                continue
            valid.append(math.exp(train["result"]["best_valid_loss"]))
            test.append(tested["result"]["ppl"])
            walls.append(train["wall_s"])
        rows.append(
            f"| {arm} | {step_s[arm]:.3f} | {steps[arm]} | {len(valid)} | {_mean_std(valid)} | {_mean_std(test)} | "
            f"{', '.join(f'{v:.1f}' for v in valid)} | {', '.join(f'{v:.1f}' for v in test)} | "
            f"{statistics.mean(walls) if walls else math.nan:.0f} |"
        )
    return "\n".join(rows)


# ------------------------------------------------------------------------------------------------
# report


def _mean_std(values: list[float]) -> str:
    return format_mean_std(values, digits=1, empty="—")


def _evals(run: str) -> list[dict[str, Any]]:
    path = OUT / run / "metrics.jsonl"
    if not path.exists() and run.startswith("converged/"):  # a converged run kept only as a record
        path = RECORDS / run.split("/", 1)[1] / "metrics.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [r for r in records if r.get("split") == "valid"]


def cell_table(done: dict[str, dict[str, Any]]) -> str:
    rows = [
        "| arm | params | seeds | valid ppl (best) | test ppl | per-seed valid | train wall s (mean) |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for arm in CELLS:
        valid, test, walls, params = [], [], [], None
        for seed in SEEDS:
            run = f"{arm}-s{seed}"
            train = done.get(f"train/{run}")
            if train is None:
                continue
            valid.append(math.exp(train["result"]["best_valid_loss"]))
            walls.append(train["wall_s"])
            params = train["result"]["parameters"]
            tested = done.get(f"test/{run}")
            if tested is not None:
                test.append(tested["result"]["ppl"])
        per_seed = ", ".join(f"{v:.1f}" for v in valid)
        wall = f"{statistics.mean(walls):.0f}" if walls else "—"
        rows.append(
            f"| {arm} | {params or '—'} | {len(valid)} | {_mean_std(valid)} | {_mean_std(test)} | {per_seed} | {wall} |"
        )
    return "\n".join(rows)


def _avg_run(name: str, seed: int) -> str:
    return f"avg-{name}" if seed == 0 else f"avg-{name}-s{seed}"


def averaging_table(done: dict[str, dict[str, Any]]) -> str:
    """Final and best validation perplexity of each averager (raw weights: the 2TA run's ``loss_raw``),
    mean ± sd over the seeds that finished, and the test perplexity of the best checkpoint."""
    rows = [
        "| weights | seeds | final valid ppl | best valid ppl | test ppl (best checkpoint) | per-seed final valid |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    raw_final, raw_best = [], []
    for seed in SEEDS:
        raw = [r["loss_raw"] for r in _evals(_avg_run("2ta", seed)) if "loss_raw" in r]
        if raw and done.get(f"train/{_avg_run('2ta', seed)}"):
            raw_final.append(math.exp(raw[-1]))
            raw_best.append(math.exp(min(raw)))
    per_seed = ", ".join(f"{v:.1f}" for v in raw_final)
    rows.append(f"| raw | {len(raw_final)} | {_mean_std(raw_final)} | {_mean_std(raw_best)} | — | {per_seed} |")
    for name in AVERAGING:
        final, best, test = [], [], []
        for seed in SEEDS:
            run = _avg_run(name, seed)
            losses = [r["loss"] for r in _evals(run)]
            if not losses or not done.get(f"train/{run}"):
                continue
            final.append(math.exp(losses[-1]))
            best.append(math.exp(min(losses)))
            tested = done.get(f"test/{run}")
            if tested is not None:
                test.append(tested["result"]["ppl"])
        per_seed = ", ".join(f"{v:.1f}" for v in final)
        rows.append(
            f"| {name} | {len(final)} | {_mean_std(final)} | {_mean_std(best)} | {_mean_std(test)} | {per_seed} |"
        )
    return "\n".join(rows)


def _extras_cells(result: dict[str, Any]) -> tuple[float, list[str], dict[str, float]]:
    """Static test NLL, the table cells of temperature / MC dropout / dynamic evaluation (test ppl, the
    change against static, the tuned settings) and the changes in percent, from one ``extras`` record."""
    static = float(result["temperature"]["test_nll_t1"])
    names = ("temperature", "mc_dropout", "dynamic")
    nll = {name: result[name]["test_nll"] for name in names}  # None where the JSON held NaN (a diverged update)
    change = {
        name: 100.0 * (math.exp(value - static) - 1.0) if value is not None and math.isfinite(value) else math.nan
        for name, value in nll.items()
    }
    cells = [
        "— (not finite)" if math.isnan(change[name]) else f"{math.exp(nll[name]):.1f} ({change[name]:+.1f}%)"
        for name in names
    ]
    temperature, dynamic = result["temperature"], result["dynamic"]
    cells[0] += f", T = {temperature['temperature']:.3f}"
    cells[2] += f", {dynamic['lr']:g}, {dynamic['decay']:g}, {dynamic['epsilon']:g}"
    return static, cells, change


def budget_extras_table(done: dict[str, dict[str, Any]]) -> str:
    """Test perplexity of each equal-budget LSTM seed under static evaluation, the tuned softmax
    temperature, MC dropout and dynamic evaluation, and the change against static (mean ± sd)."""
    rows = [
        "| seed | static | temperature (T) | MC dropout | dynamic evaluation (lr, decay, eps) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    changes: dict[str, list[float]] = {"temperature": [], "mc_dropout": [], "dynamic": []}
    for seed in SEEDS:
        record = done.get(f"extras/budget/lstm-s{seed}")
        if record is None:
            continue
        static, cells, change = _extras_cells(record["result"])
        for name in changes:
            if not math.isnan(change[name]):
                changes[name].append(change[name])
        rows.append(f"| {seed} | {math.exp(static):.1f} | " + " | ".join(cells) + " |")
    if changes["dynamic"]:
        mean = " | ".join(f"{_mean_std(v)}%" for v in changes.values())
        rows.append(f"| change, mean ± sd | — | {mean} |")
    return "\n".join(rows)


def extras_table(done: dict[str, dict[str, Any]]) -> str:
    record = done.get(f"extras/{EXTRAS_RUN}")
    if record is None:
        return "(not run)"
    return "```json\n" + json.dumps(record["result"], indent=1) + "\n```"


def converged_seeds() -> list[int]:
    """Seeds of the converged runs present (``converged --seeds`` may have trained others than SEEDS)."""
    folders = [*(OUT / "converged").glob("*-s*"), *RECORDS.glob("*-s*")]
    found = {int(path.name.rsplit("-s", 1)[1]) for path in folders if path.is_dir() and not path.name.startswith(".")}
    return sorted(found)


def archive_converged(run: Path) -> None:
    """Archive the local converged run ``run`` if its steps all ended (training, test, and the extras
    where the arm has them), with the log's records of those steps; else leave it out, saying why."""
    done = _done()
    arm, seed = run.name.rsplit("-s", 1)
    keys = [key for key, _ in converged_jobs([arm], [int(seed)])] if arm in CONVERGED else []
    missing = [key for key in keys if key not in done]
    if not keys or missing:
        print(f"{run.name}: not archived, steps missing: {missing or 'not an arm'}", file=sys.stderr)
        return
    try:
        target = archive_run(run, RECORDS, {"log": [done[key] for key in keys]})
    except InfolmError as failure:
        raise SystemExit(str(failure)) from None
    print(f"{run.name}: archived in {target}", file=sys.stderr)


def cmd_archive(_: argparse.Namespace) -> None:
    """Archive each local converged run whose steps all ended (``converged`` archives each run as its last
    step ends; this catches up)."""
    for run in sorted(path for path in (OUT / "converged").glob("*-s*") if path.is_dir()):
        archive_converged(run)


def converged_table(done: dict[str, dict[str, Any]]) -> str:
    """Each arm at early stopping (mean ± sd over seeds): epochs, validation and test perplexity of the
    evaluated weights, the raw weights' best validation perplexity (2TA runs log it as ``loss_raw``), the
    wall time per epoch; then the extras on the converged LSTM and Mogrifier."""
    rows = [
        "| arm | params | seeds (ended by early stopping) | epochs | best epoch | valid ppl (best) | test ppl | "
        "raw weights, best valid ppl (valid only) | per-seed test | train wall s per epoch |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for arm in CONVERGED:
        valid, test, raw, epochs, best_epoch, per_epoch, params = [], [], [], [], [], [], None
        stopped = 0
        for seed in converged_seeds():
            run = f"converged/{arm}-s{seed}"
            train = done.get(f"train/{run}")
            if train is None:
                continue
            evals = _evals(run)
            valid.append(math.exp(train["result"]["best_valid_loss"]))
            params = train["result"]["parameters"]
            stopped += bool(train["result"].get("early_stopped"))
            epochs.append(float(len(evals)))
            losses = [r["loss"] for r in evals if r.get("loss") is not None]  # not finite: logged as null
            if losses:
                best_epoch.append(float(losses.index(min(losses)) + 1))
            per_epoch.append(train["result"]["elapsed"] / max(len(evals), 1))
            raws = [r["loss_raw"] for r in evals if "loss_raw" in r]
            if raws:
                raw.append(math.exp(min(raws)))
            tested = done.get(f"test/{run}")
            if tested is not None:
                test.append(tested["result"]["ppl"])
        rows.append(
            f"| {arm} | {params or '—'} | {len(valid)} ({stopped}) | {_mean_std(epochs)} | {_mean_std(best_epoch)} | "
            f"{_mean_std(valid)} | {_mean_std(test)} | {_mean_std(raw)} | {', '.join(f'{v:.1f}' for v in test)} | "
            f"{_mean_std(per_epoch)} |"
        )
    rows += [
        "",
        "| converged model | seed | static test ppl | temperature (T) | MC dropout | "
        "dynamic evaluation (lr, decay, eps) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for arm in CONVERGED_EXTRAS:
        changes: dict[str, list[float]] = {"temperature": [], "mc_dropout": [], "dynamic": []}
        for seed in converged_seeds():
            record = done.get(f"extras/converged/{arm}-s{seed}")
            if record is None:
                continue
            static, cells, change = _extras_cells(record["result"])
            for name, value in change.items():
                if not math.isnan(value):
                    changes[name].append(value)
            rows.append(f"| {arm} | {seed} | {math.exp(static):.1f} | " + " | ".join(cells) + " |")
        if any(changes.values()):
            mean = " | ".join(f"{_mean_std(v)}%" for v in changes.values())
            rows.append(f"| {arm}: change, mean ± sd | — | — | {mean} |")
    return "\n".join(rows)


def tail_curves(done: dict[str, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Seed -> the validation losses by evaluation of the raw weights (the 2TA run's ``loss_raw``), 2TA and
    the tail-averaging run, for each seed where both LSTM runs ended; ``None`` where their evaluations do
    not pair. Also each run's key, and the tail run's ``started_at`` (the step; -1 before it starts)."""
    pairs: dict[int, dict[str, Any]] = {}
    for seed in converged_seeds():
        runs = {"2ta": f"converged/lstm-s{seed}", "tail": f"converged/lstm-tail-s{seed}"}
        if any(f"train/{run}" not in done for run in runs.values()):
            continue
        two, tail = _evals(runs["2ta"]), _evals(runs["tail"])
        if not two or len(two) != len(tail) or any("loss_raw" not in r for r in two):
            pairs[seed] = {"runs": runs, "curves": None}
            continue
        curves = {
            "raw": [r["loss_raw"] for r in two],
            "2ta": [r["loss"] for r in two],
            "tail": [r["loss"] for r in tail],
        }
        started = [r["started_at"] for r in tail if r.get("started_at", -1) >= 0]
        pairs[seed] = {"runs": runs, "curves": curves, "started": started[0] if started else None}
    return pairs


def tail_table(done: dict[str, dict[str, Any]]) -> str:
    """Two-Tailed Averaging against the raw weights and tail averaging (thesis Fig. 3.3, Sec. 3.6), seed by seed
    where both LSTM runs of a seed ended (``tail_curves``): validation perplexity at epochs 10 / 20 / 30 and at
    the last, test perplexity, nats below the raw weights at the last epoch, and at how many evaluations 2TA is
    below the tail run."""
    rows = [
        "| seed | valid ppl at epoch 10 / 20 / 30: raw / 2TA / tail | last epoch | "
        "valid ppl at the last: raw / 2TA / tail | test ppl: 2TA / tail | nats below raw at the last: 2TA / tail | "
        "evaluations with 2TA below tail | tail started at step |",
        "| ---: | --- | ---: | --- | --- | --- | --- | ---: |",
    ]
    gains: dict[str, list[float]] = {"2ta": [], "tail": []}
    finals: dict[str, list[float]] = {"raw": [], "2ta": [], "tail": []}
    tests: dict[str, list[float]] = {"2ta": [], "tail": []}
    for seed, pair in tail_curves(done).items():
        runs, curves = pair["runs"], pair["curves"]
        if curves is None:
            rows.append(f"| {seed} | (the two runs' evaluations do not pair) | | | | | | |")
            continue
        count = len(curves["2ta"])
        at = " ; ".join(
            " / ".join(f"{math.exp(curves[name][epoch - 1]):.2f}" for name in ("raw", "2ta", "tail"))
            for epoch in (10, 20, 30)
            if epoch <= count
        )
        for name in finals:
            finals[name].append(math.exp(curves[name][-1]))
        for name in gains:
            gains[name].append(curves["raw"][-1] - curves[name][-1])
        tested = {name: done.get(f"test/{run}") for name, run in runs.items()}
        for name, record in tested.items():
            if record is not None:
                tests[name].append(record["result"]["ppl"])
        test_cells = " / ".join(f"{r['result']['ppl']:.2f}" if r else "—" for r in tested.values())
        below = sum(a < b for a, b in zip(curves["2ta"], curves["tail"], strict=True))
        rows.append(
            f"| {seed} | {at} | {count} | "
            + " / ".join(f"{math.exp(curves[name][-1]):.2f}" for name in ("raw", "2ta", "tail"))
            + f" | {test_cells} | {gains['2ta'][-1]:.4f} / {gains['tail'][-1]:.4f} | {below} of {count} | "
            + (f"{pair['started']:.0f}" if pair["started"] is not None else "never")
            + " |"
        )
    if len(gains["2ta"]) > 1:
        rows.append(
            "| mean ± sd | — | — | "
            + " / ".join(format_mean_std(finals[name], digits=2, empty="—") for name in ("raw", "2ta", "tail"))
            + " | "
            + " / ".join(format_mean_std(tests[name], digits=2, empty="—") for name in ("2ta", "tail"))
            + " | "
            + " / ".join(format_mean_std(gains[name], digits=4, empty="—") for name in ("2ta", "tail"))
            + " | — | — |"
        )
    return "\n".join(rows)


def converged_plot(path: Path, done: dict[str, dict[str, Any]]) -> None:
    """Validation perplexity by epoch of every converged run whose training ended (``done`` holds its
    step; a run still training is left out of the figure as of the table); 2TA runs: the raw weights dotted."""
    from infolm.evaluation.plots import new_figure, save_figure

    fig, (axis,) = new_figure()
    colors = {"lstm": "tab:blue", "mogrifier": "tab:red", "lstm-tail": "tab:orange"}
    labels = {"lstm": "LSTM, 2TA", "mogrifier": "Mogrifier, 2TA", "lstm-tail": "LSTM, tail averaging"}
    for arm, color in colors.items():
        label = labels[arm]
        ended = [seed for seed in converged_seeds() if f"train/converged/{arm}-s{seed}" in done]
        runs = [evals for evals in (_evals(f"converged/{arm}-s{seed}") for seed in ended) if evals]
        for index, evals in enumerate(runs):
            epochs = range(1, len(evals) + 1)
            curve = [math.exp(r["loss"]) if r.get("loss") is not None else math.nan for r in evals]
            axis.plot(epochs, curve, color=color, label=label if index == 0 else None)
            if any("loss_raw" in r for r in evals):
                raw = [math.exp(r.get("loss_raw", math.nan)) for r in evals]
                axis.plot(
                    epochs, raw, color=color, linestyle=":", label=f"{label.split(',')[0]}, raw" if index == 0 else None
                )
    axis.set_xlabel("epoch")
    axis.set_ylabel("validation perplexity")
    axis.set_yscale("log")
    axis.legend()
    axis.set_title("PTB, Melis models of ~1.59M parameters,\nto early stopping or 40 epochs")
    save_figure(fig, path)


def tail_plot(path: Path, done: dict[str, dict[str, Any]]) -> None:
    """Thesis Fig. 3.3 at this scale: by epoch, how far 2TA and the tail average are below the raw weights
    (validation nats, raw minus averaged), one line per seed where both LSTM runs ended."""
    from infolm.evaluation.plots import new_figure, save_figure

    fig, (axis,) = new_figure()
    pairs = [pair for pair in tail_curves(done).values() if pair["curves"] is not None]
    for index, pair in enumerate(pairs):
        curves = pair["curves"]
        epochs = range(1, len(curves["raw"]) + 1)
        for name, color, label in (("2ta", "tab:blue", "2TA"), ("tail", "tab:orange", "tail averaging")):
            gain = [raw - loss for raw, loss in zip(curves["raw"], curves[name], strict=True)]
            axis.plot(epochs, gain, color=color, label=label if index == 0 else None)
    axis.axhline(0.0, color="grey", linewidth=0.8)
    axis.set_xlabel("epoch")
    axis.set_ylabel("validation loss below the raw weights (nats)")
    axis.legend()
    axis.set_title(f"PTB, LSTM of ~1.59M parameters, {len(pairs)} seeds:\nthe averages against the raw weights")
    save_figure(fig, path)


def averaging_plot(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    evals = _evals("avg-2ta")
    if evals:
        steps = [r["step"] for r in evals]
        ax.plot(steps, [r.get("loss_raw", math.nan) for r in evals], color="grey", marker=".", label="raw weights")
        ax.plot(steps, [r["loss"] for r in evals], color="tab:green", marker="o", label="2TA")
    others = (("tail", "tail averaging (from step 100)", "tab:orange"), ("ema", "EMA (0.98)", "tab:blue"))
    for name, label, color in others:
        evals = _evals(f"avg-{name}")
        if evals:
            ax.plot([r["step"] for r in evals], [r["loss"] for r in evals], color=color, marker="s", label=label)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("validation loss (nats / token)")
    ax.set_title("PTB, 2x134 LSTM (Melis), Adam β1=0, one seed")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def cmd_report(_: argparse.Namespace) -> None:
    done = _done()
    total = sum(r["wall_s"] for r in done.values())
    text = "\n\n".join(
        [
            "## cells and objective\n\n" + cell_table(done),
            f"## equal CPU budget ({BUDGET_S:.0f} s of training per run)\n\n" + budget_table(done),
            "## equal-budget LSTM: temperature, MC dropout, dynamic evaluation (test)\n\n" + budget_extras_table(done),
            "## averaging\n\n" + averaging_table(done),
            "## at convergence (early stopping)\n\n" + converged_table(done),
            "## averaging at convergence: raw weights, 2TA and tail averaging (LSTM)\n\n" + tail_table(done),
            f"## dynamic evaluation, MC dropout, temperature ({EXTRAS_RUN})\n\n" + extras_table(done),
            f"total wall time of all steps: {total:.0f} s",
        ]
    )
    (OUT / "tables.md").write_text(text + "\n")
    if _evals("avg-2ta"):  # the averaging runs are not records: on a machine without them, keep the PNG
        averaging_plot(ROOT / "docs" / "img" / "averaging.png")
    if any(key.startswith("train/converged/") for key in done):
        converged_plot(ROOT / "docs" / "img" / "melis_converged.png", done)
    if any(pair["curves"] is not None for pair in tail_curves(done).values()):
        tail_plot(ROOT / "docs" / "img" / "melis_converged_averaging.png", done)
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    commands = (
        ("train", cmd_train),
        ("evaluate", cmd_evaluate),
        ("budget", cmd_budget),
        ("report", cmd_report),
        ("archive", cmd_archive),
    )
    for name, func in commands:
        sub.add_parser(name).set_defaults(func=func)
    p = sub.add_parser("converged", help="train to early stopping, then test and the extras")
    p.add_argument("--arms", nargs="+", default=list(CONVERGED), choices=list(CONVERGED))
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.set_defaults(func=cmd_converged)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
