"""Melis thesis, word-level PTB on a tiny CPU budget: cells, multi-sample objective, dynamic eval / MC
dropout, weight averaging.

    OMP_NUM_THREADS=1 python experiments/melis_ptb_word.py train     # training runs, one at a time (resumable)
    OMP_NUM_THREADS=1 python experiments/melis_ptb_word.py budget    # the arms at an equal CPU budget (3 seeds)
    OMP_NUM_THREADS=1 python experiments/melis_ptb_word.py evaluate  # test ppl; dynamic eval, MC dropout,
                                                                     # temperature (lstm-s0, equal-budget LSTMs)
    OMP_NUM_THREADS=1 python experiments/melis_ptb_word.py converged [--arms ...] [--seeds ...]
                                     # LSTM vs Mogrifier (2TA) and LSTM with tail averaging, each to early
                                     # stopping; test ppl; dynamic eval / MC dropout / temperature on them
    python experiments/melis_ptb_word.py report  # the short runs' tables: runs/melis-ptb-word/tables.md,
                                                 # docs/img/averaging.png
    python -m experiments.report melis           # the converged comparisons: docs/reproductions/melis.md

Every run is an ``infolm train`` / ``infolm evaluate`` subprocess; the command line, wall time and JSON
summary of each are kept in ``runs/melis-ptb-word/log.jsonl``, and a finished step is skipped when rerun.

    python experiments/melis_ptb_word.py archive  # the converged runs whose every step ended, as records

``converged`` copies each run whose training, test and extras all ended (its config, log and summary,
no checkpoint) with its steps' records into ``experiments/records/melis-ptb-word-converged/``, kept in
the repository, as soon as its last step ends (``archive`` does it for every such run found);
``converged`` reads those records beside the local runs (a local run stands for a record of the same
name) and does not run a recorded run's steps again. Its arms, configs and seeds are the ones
``experiments/protocols/melis.yaml`` compares; the page is generated from the records by
``python -m experiments.report melis``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from infolm.errors import InfolmError
from infolm.report import format_mean_std
from infolm.training.records import RECORD, archive_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the protocols' package
from experiments.reproduce.jobs import run_command  # noqa: E402
from experiments.reproduce.protocol import arms_of, load_protocol, runs_of  # noqa: E402

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
PROTOCOL = load_protocol("melis")  # the converged arms, their configs and seeds: experiments/protocols/melis.yaml
CONVERGED = {name: arm.config or "" for name, arm in arms_of(PROTOCOL, RECORDS.name).items()}
CONVERGED_SEEDS = sorted({seed for _, seed in runs_of(PROTOCOL, RECORDS.name)})
CONVERGED_EXTRAS = tuple(  # the arms whose compared metrics read dynamic evaluation / MC dropout
    sorted(
        {
            arm.arm
            for comparison in PROTOCOL.comparisons
            if any(metric.path.startswith("log.extras.") for metric in comparison.metrics)
            for arm in ([comparison.control] if comparison.control else []) + comparison.arms
        }
    )
)
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
    job = run_command(command)
    result: Any = None
    if job.rc == 0:
        result = job.result()
    else:
        sys.stderr.write(job.stderr[-2000:])
    record = {"key": key, "command": " ".join(command), "wall_s": job.wall_s, "rc": job.rc, "result": result}
    OUT.mkdir(parents=True, exist_ok=True)
    with LOG.open("a") as f:
        f.write(json.dumps(record) + "\n")
    print(f"       rc={job.rc} {job.wall_s:.0f}s", flush=True)


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
            train = [
                CONVERGED[arm],
                *arms_of(PROTOCOL)[arm].overrides,
                f"run.dir={directory}",
                f"run.seed={seed}",
                "--json",
            ]
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
            f"## dynamic evaluation, MC dropout, temperature ({EXTRAS_RUN})\n\n" + extras_table(done),
            f"total wall time of all steps: {total:.0f} s",
        ]
    )
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "tables.md").write_text(text + "\n")
    if _evals("avg-2ta"):  # the averaging runs are not records: on a machine without them, keep the PNG
        averaging_plot(ROOT / "docs" / "img" / "averaging.png")
    print(text)
    print("\nthe converged comparisons: python -m experiments.report melis (docs/reproductions/melis.md)")


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
    p.add_argument("--seeds", type=int, nargs="+", default=CONVERGED_SEEDS)
    p.set_defaults(func=cmd_converged)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
