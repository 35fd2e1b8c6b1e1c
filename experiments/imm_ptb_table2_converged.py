"""IMM Table 2 (Muneeb & Ohannessian) at convergence, CPU scale: baseline, then MLE / noising / IMM.

The paper's protocol: a baseline LSTM trained to convergence, then continued from that checkpoint
with each objective of Table 2, each again to convergence; valid and test perplexity, and the test
perplexity of each model's induced bigram (Table 1). Which arms, seeds and matched controls make the
comparisons, and each arm's config and overrides, is declared once, in ``experiments/protocols/imm.yaml``:
``train`` trains those by default (an arm named with ``--arms`` also brings its matched control), and
the page ``docs/reproductions/imm.md`` is generated from the records by ``python -m experiments.report
imm``. Per seed, the arms this driver can train (the protocol's, then the exploratory ones kept here):

* ``baseline``         ``configs/ptb/imm-table2-cpu.yaml`` to early stopping;
* ``none``             ``configs/ptb/imm-table2-cpu-continue.yaml`` from the baseline's best weights (MLE);
* ``noising``          the same with Xie et al.'s KN-bigram noising in place of MLE;
* ``imm``              the same with MLE + IMM, the faithful default (fresh samples at every position);
* ``imm-positions-8``  IMM on 8 positions drawn per batch (the opt-in approximation; same expected gradient
  before the clip, about a third of the default's mean step after it);
* ``imm-positions-8-unclipped``  the same with ∇IMM unclipped (the default's mean step again, noisier);
* ``imm-in-batch``     IMM at every position with the batch's own positions as the samples (opt-in);
* ``none-lr5``, ``imm-positions-8-lr5``  ``none`` and ``imm-positions-8`` continued at the baseline's last
  learning rate (5) instead of the reset to half the initial one (not the paper's; a second rate);
* ``none-halve-reload``, ``imm-positions-8-halve-reload``  with the schedule of the authors' released code
  (x0.5 whenever validation does not improve, reloading the best weights);
* ``imm-released-positions-8``  the latter with the released code's 1-sample steps (``one_sample=released``).
* ``imm-released-soft-target``  its soft-target steps alone (k = 1 on every step), the released schedule;
* ``imm-j1-positions-8``, ``imm-j1-positions-32``, ``imm-j1-in-batch``  Eq. 15 on every step (j = 1: k samples,
  no 1-sample Eq. 18 step) on 8 or 32 drawn positions, or in-batch at every position.

``train`` runs the arms ``--jobs`` at a time (a seed's continuations start when its baseline ends),
stops whatever still trains at ``--deadline-s`` minus ``--eval-reserve-s`` (such a run is reported as
cut, never as converged) and scores every run as soon as it ends (valid and test on the full splits,
the induced bigram, the model mixed with the KN bigram at the α tuned on valid; the scoring takes a slot)::

    OMP_NUM_THREADS=1 python experiments/imm_ptb_table2_converged.py train --out runs/imm-ptb-table2-converged \
        --seeds 0 1 2 --jobs 2
    python experiments/imm_ptb_table2_converged.py archive --out runs/imm-ptb-table2-converged
    python -m experiments.report imm          # the page, its tables and curves, from the records

Rerunning ``train`` resumes the runs that were cut (``infolm train`` resumes a run directory) and
skips the runs and scores that are complete. ``--from-cut-baselines`` starts the continuations from
baselines that were cut before early stopping, from their best weights.

``archive`` copies every ended and scored run's config, log, summary and scores into
``experiments/records/imm-ptb-table2-converged/``, kept in the repository; no weights (a baseline's
record keeps the sha256 of its best weights, ``best_weights_sha256``). ``train`` does not train a
recorded run again. A continuation needs its seed's baseline weights in ``--out``: where the baseline is
only a record, ``train --retrain-baselines`` trains it again (the same seed and config; the same run bit
for bit only on the same kind of CPU) and continues from it; with its record replaced, the continuations
recorded from other weights are trained again (below).

A run takes longer than a machine lives (a working tree is laid anew on each, and ``runs/`` with it;
a baseline takes 2-4 hours on one core): stop the driver and ``park`` keeps every run that has not
ended (its latest step checkpoint, its best weights once and small files, 10.8 MB a run) in
``experiments/parked/imm-ptb-table2-converged/`` (git-ignored, as it holds weights: copy the folder to the
next machine by hand); the next ``train`` lays each parked run of its queue
out again in ``--out`` and resumes it bit for bit; a parked copy is dropped once its run is a record::

    python experiments/imm_ptb_table2_converged.py park --out runs/imm-ptb-table2-converged

"From the same checkpoint" is checked, not assumed: a continuation's job record keeps the sha256 of the
weights its ``run.init_from`` held when it started, and its record the same at archiving
(``continued_from``). A baseline trained again is another run (on another CPU kind it diverges within
the first epoch), so ``train`` trains again every continuation recorded from other weights than its
seed's baseline holds now (its record replaced).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infolm.errors import InfolmError
from infolm.training.records import RECORD, archive_run, park_run, sha256_file, unpark_run
from infolm.training.run_lock import run_dir_in_use

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: the protocols' package
from experiments.reproduce.jobs import run_command  # noqa: E402
from experiments.reproduce.protocol import Arm, arms_of, load_protocol  # noqa: E402
from experiments.reproduce.provenance import git_commit, machine_line  # noqa: E402

RECORDS = ROOT / "experiments" / "records" / "imm-ptb-table2-converged"  # ended runs, kept in the repository
PARKED = ROOT / "experiments" / "parked" / "imm-ptb-table2-converged"  # runs between machines, not yet ended
PAPER = "imm"  # experiments/protocols/imm.yaml: the comparisons this driver's records make, and their arms
# The arms of the protocol: each one's config and overrides, declared with the comparisons it is in
DECLARED: dict[str, Arm] = arms_of(load_protocol(PAPER), RECORDS.name)
BASELINE = DECLARED["baseline"].config or "configs/ptb/imm-table2-cpu.yaml"
CONTINUE = DECLARED["none"].config or "configs/ptb/imm-table2-cpu-continue.yaml"
IMM = "objective.imm={weight: 0.2, k: 10, j: 5, restricted_order: 2, sample_chunk: 10}"
# x0.5 and reload the best weights at every evaluation without improvement, no early stopping: the run
# ends at the config's 20 epochs (the released code: at its 20th decay or 400 epochs)
RELEASED_SCHEDULE = ["optim.decay=0.5", "optim.plateau_restore_best=true", "train.early_stopping=0"]
# Arms beyond the protocol's, kept for the readings of docs/notebook/imm.md (not on the page)
EXPLORATORY: dict[str, list[str]] = {
    "imm": [IMM],  # the faithful default: fresh samples at every position (GPU only: ~17 MLE steps a step on a CPU)
    # Not the paper's clip: 8 drawn positions with ∇IMM unclipped. The paper's clip (0.25) acts on every
    # 1-sample step of 8 positions (‖∇IMM‖ ~0.8) and shrinks their mean step to about a third of the
    # every-position default's, which it barely clips (experiments/imm_positions_clip_bias.py); unclipped,
    # the drawn positions' mean step is the default's before its clip again, at the price of noisier steps.
    "imm-positions-8-unclipped": [IMM, "objective.imm.positions_per_batch=8", "objective.imm.clip=0"],
    "imm-in-batch": [IMM, "objective.imm.realization=in-batch"],
    # Not the paper's: the continuation at the baseline's last learning rate (5, after two plateau decays
    # from 20) instead of the reset to 10, which lifted IMM's validation perplexity from 99 to 113.
    "none-lr5": ["optim.lr=5.0"],
    "imm-positions-8-lr5": [IMM, "objective.imm.positions_per_batch=8", "optim.lr=5.0"],
    # The authors' released code's schedule with the 8-position IMM of the paper's Eq. 15
    "imm-positions-8-halve-reload": [IMM, "objective.imm.positions_per_batch=8", *RELEASED_SCHEDULE],
}
# every continuation this driver trains: the protocol's, then the exploratory ones
ARMS: dict[str, list[str]] = {
    **{name: list(arm.overrides) for name, arm in DECLARED.items() if name != "baseline"},
    **EXPLORATORY,
}


def declared() -> tuple[list[int], list[str], dict[str, str]]:
    """What ``experiments/protocols/imm.yaml`` declares for this driver's records: the seeds, the arms
    other than ``baseline`` (each comparison's control first) and each arm's matched control."""
    from experiments.reproduce.protocol import runs_of

    page = load_protocol(PAPER)
    runs = runs_of(page, RECORDS.name)
    seeds = sorted({seed for _, seed in runs})
    arms = list(dict.fromkeys(arm for arm, _ in runs if arm != "baseline"))
    unset = [name for name, arm in DECLARED.items() if not arm.config]
    if unset:
        raise SystemExit(f"experiments/protocols/{PAPER}.yaml: no config for the arms {', '.join(unset)}")
    control: dict[str, str] = {}
    for comparison in page.comparisons:  # a control read on its own path of the same run (paths) trains nothing
        if comparison.records == RECORDS.name and comparison.control is not None and not comparison.control.paths:
            for arm in comparison.arms:
                control.setdefault(arm.arm, comparison.control.arm)
    return seeds, arms, control


def with_controls(arms: list[str], control: dict[str, str]) -> list[str]:
    """``arms`` and, before the first arm that needs it, each one's matched control (a paired difference
    needs both on the same seeds); ``baseline`` is implicit (every continuation starts from it)."""
    ordered: list[str] = []
    for arm in arms:
        if arm in control and control[arm] not in ordered and control[arm] != "baseline":
            ordered.append(control[arm])
        if arm not in ordered and arm != "baseline":
            ordered.append(arm)
    return ordered


@dataclass
class Job:
    name: str  # arm-sSEED
    arm: str
    seed: int
    command: list[str]
    after: str | None = None  # the job whose run must have ended by itself first
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    record: dict[str, Any] = field(default_factory=dict)


def train_command(out: Path, arm: str, seed: int, extra: list[str], baseline: Path | None = None) -> list[str]:
    """The ``infolm train`` command of ``arm``; a continuation starts from ``baseline`` (a run directory
    with best weights; by default the seed's baseline under ``out``)."""
    run = out / f"{arm}-s{seed}"
    declared_config = DECLARED[arm].config if arm in DECLARED else None
    if arm == "baseline":
        config, overrides = BASELINE, []
    else:
        start = f"run.init_from={baseline or out / f'baseline-s{seed}'}"
        config, overrides = declared_config or CONTINUE, [start, *ARMS[arm]]
    return [
        sys.executable,
        "-m",
        "infolm",
        "train",
        config,
        f"run.dir={run}",
        f"run.seed={seed}",
        *overrides,
        *extra,
        "--json",
    ]


def finished(run: Path) -> bool:
    """A run that ended by itself (early stopping or its epoch budget): its summary was written."""
    return (run / "train-summary.json").is_file()


def ended(run: Path) -> str:
    """How a run ended: ``early-stopped``, ``capped`` (at its epoch limit: it may still have been improving)
    or ``cut`` (no summary: stopped from outside). Summaries older than the ``early_stopped`` flag are read
    against the run's epoch limit."""
    if not finished(run):
        return "cut"
    summary = json.loads((run / "train-summary.json").read_text())
    stopped = summary.get("early_stopped")
    if stopped is None:
        from infolm.config import load_config

        stopped = int(summary.get("epoch", 0)) < load_config(run / "config.yaml").train.epochs
    return "early-stopped" if stopped else "capped"


def has_best(run: Path) -> bool:
    return (run / "checkpoints" / "best" / "model.safetensors").is_file()


def weights_sha256(run: Path) -> str | None:
    """The sha256 of the best weights of ``run``: of the file in a run directory, else the one its record
    keeps (``best_weights_sha256``; a record of the time records kept weights names it under ``weights``);
    None where neither is known."""
    path = run / "checkpoints" / "best" / "model.safetensors"
    if path.is_file():
        return sha256_file(path)
    try:
        known = json.loads((run / RECORD).read_text())
    except (OSError, ValueError):
        return None
    legacy = (known.get("weights") or {}).get("sha256") or {}
    return known.get("best_weights_sha256") or legacy.get("checkpoints/best/model.safetensors")


def init_from(command: list[str] | str) -> Path | None:
    """The ``run.init_from`` of a train command (a list, or the string a job record keeps)."""
    words = command.split() if isinstance(command, str) else command
    found = [word.split("=", 1)[1] for word in words if word.startswith("run.init_from=")]
    return Path(found[-1]) if found else None


def started_from(record: Path) -> set[str]:
    """The sha256s of the weights that the run ``record`` (a record, or a run directory of the driver's) was
    continued from: its job records' (taken at each start) and its ``continued_from`` (taken at
    archiving); empty for a baseline or a run older than them."""
    if (record / "record.json").is_file():
        known = json.loads((record / "record.json").read_text())
    else:  # a run directory: the job records of the driver's calls beside it
        known = {"jobs": [job for job in read_jsonl(record.parent / "jobs.jsonl") if job.get("run") == record.name]}
    shas = {job["init_sha256"] for job in known.get("jobs", []) if job.get("init_sha256")}
    if known.get("continued_from", {}).get("model_sha256"):
        shas.add(known["continued_from"]["model_sha256"])
    return shas


def stale(record: Path, baseline_sha: str | None) -> bool:
    """The recorded continuation started from other weights than ``baseline_sha`` (its seed's baseline
    now); False when either side is unknown."""
    return baseline_sha is not None and bool(started_from(record) - {baseline_sha})


Scoring = list[tuple[Path, subprocess.Popen[bytes]]]


def collect_scores(scoring: Scoring) -> list[Path]:
    """Keep the output of every scoring process that has ended (renamed into place: atomic); drop it
    from ``scoring``; return the scores kept. Its stdout and stderr go to files, so a long evaluation
    never fills a pipe."""
    kept = []
    for path, process in list(scoring):
        if process.poll() is None:
            continue
        scoring.remove((path, process))
        if process.returncode == 0:
            path.with_suffix(".out.tmp").replace(path)
            kept.append(path)
        else:
            error = path.with_suffix(".err")
            print(f"scoring {path} failed: {error.read_text()[-2000:] if error.is_file() else ''}", file=sys.stderr)
    return kept


def start_score(path: Path, command: list[str]) -> tuple[Path, subprocess.Popen[bytes]]:
    with path.with_suffix(".out.tmp").open("wb") as out, path.with_suffix(".err").open("wb") as err:
        return path, subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=err)


def run_jobs(
    jobs: list[Job],
    slots: int,
    deadline: float,
    out: Path,
    log: Path,
    from_cut: bool = False,
    induced_tokens: int | None = None,
    records: Path | None = None,
    keep: bool = False,
    retrain: bool = False,
) -> None:
    """Run ``jobs`` ``slots`` at a time in dependency order; terminate what runs at ``deadline``.
    ``from_cut``: a job also starts after a run that was cut but has best weights. Unless
    ``induced_tokens`` is None, a run that ends by itself is scored at once, its scoring taking a slot
    before the next training job does (a queue that outlives its machine still leaves the numbers of what ended).
    A job whose run ended as a record in ``records`` is done; one that needs the weights of a baseline
    that is only a record (records keep no weights) is skipped with a line saying so. With ``keep``, a run
    that ended by itself is archived in ``records`` as soon as both its scores are kept (a machine lost
    mid-queue keeps its numbers). With ``retrain``, a recorded baseline is trained again (the same seed and
    config: on the same machine kind, the same run) for its continuations and, with ``keep``, its record
    replaced."""
    recorded = {job.name for job in jobs if records is not None and finished(records / job.name)}
    if retrain:
        recorded -= {job.name for job in jobs if job.arm == "baseline"}
    baseline_shas: dict[Path, str | None] = {}  # each baseline hashed once
    for job in jobs:  # a continuation recorded from other weights than its baseline's now: not the protocol's
        source = init_from(job.command)
        if records is None or job.name not in recorded or source is None:
            continue
        if source not in baseline_shas:
            baseline_shas[source] = weights_sha256(source)
        if stale(records / job.name, baseline_shas[source]):
            print(f"{job.name}: its record continued other weights than {source}'s; training it again", file=sys.stderr)
            recorded.discard(job.name)
    pending = [job for job in jobs if not finished(out / job.name) and job.name not in recorded]

    def elsewhere(name: str | None) -> bool:  # trained now by another call (the other lane)
        return name is not None and (out / name / "metrics.jsonl").is_file() and run_dir_in_use(out / name)

    for job in list(pending):
        if elsewhere(job.name):
            print(f"skipping {job.name}: another call is training it", file=sys.stderr)
            pending.remove(job)
        elif job.after in recorded and not finished(out / job.after) and not elsewhere(job.after):
            print(
                f"skipping {job.name}: {job.after} is only a record (no weights to continue from; "
                "--retrain-baselines trains it again)",
                file=sys.stderr,
            )
            pending.remove(job)

    def done(name: str) -> bool:
        return finished(out / name) or (from_cut and has_best(out / name))

    commit, machine = git_commit(), machine_line()  # what each job's record names
    running: list[Job] = []
    finished_before = [job.name for job in jobs if finished(out / job.name)]  # by an earlier call
    # scores waiting for a slot: first those of runs that ended in an earlier call
    scores = [] if induced_tokens is None else missing_scores(out, finished_before, induced_tokens)
    scoring: Scoring = []
    while pending or running or scores or scoring:
        for path in collect_scores(scoring):
            if keep and records is not None and scored(path.parent):
                archive_ended(path.parent, records, read_jsonl(log))
        for job in list(running):
            assert job.process is not None
            if job.process.poll() is None:
                continue
            running.remove(job)
            job.record.update(rc=job.process.returncode, wall_s=round(time.time() - job.started, 1))
            printed = (out / f"{job.name}.train.out").read_text().strip().splitlines()
            if job.process.returncode == 0 and printed:
                (out / job.name / "train-summary.json").write_text(printed[-1] + "\n")
                if induced_tokens is not None:
                    scores += score_commands(out, job.name, induced_tokens)
            with log.open("a") as handle:
                handle.write(json.dumps(job.record) + "\n")
        if time.time() >= deadline:
            for _, process in scoring:
                process.kill()
            for job in running:
                assert job.process is not None
                job.process.terminate()
            for job in running:
                assert job.process is not None
                try:
                    job.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    job.process.kill()
                    job.process.wait()
                job.record.update(rc="cut at the deadline", wall_s=round(time.time() - job.started, 1))
                with log.open("a") as handle:
                    handle.write(json.dumps(job.record) + "\n")
            return
        active = {job.name for job in running} | {job.name for job in pending}
        for job in [job for job in pending if job.after is not None and not done(job.after)]:
            if job.after not in active and not elsewhere(job.after):  # failed or cut: nothing to continue from
                print(f"skipping {job.name}: {job.after} did not end by itself", file=sys.stderr)
                pending.remove(job)
        while scores and len(running) + len(scoring) < slots:
            scoring.append(start_score(*scores.pop(0)))
        ready = [job for job in pending if job.after is None or done(job.after)]
        while ready and len(running) + len(scoring) < slots:
            job = ready.pop(0)
            pending.remove(job)
            job.started = time.time()
            job.record = {"run": job.name, "arm": job.arm, "seed": job.seed, "command": " ".join(job.command),
                          "commit": commit, "machine": machine}  # fmt: skip
            source = init_from(job.command)
            sha = weights_sha256(source) if source is not None else None
            if sha:  # what "from the same checkpoint" is checked by
                job.record["init_sha256"] = sha
            with (
                (out / f"{job.name}.train.out").open("wb") as stdout,
                (out / f"{job.name}.train.err").open("wb") as err,
            ):
                job.process = subprocess.Popen(job.command, cwd=ROOT, stdout=stdout, stderr=err)
            running.append(job)
        time.sleep(1.0)


RESTRICTED_ARPA = "kn-bigram.arpa"  # in --out: the restricted model as an ARPA file, for the test-time mixture


def restricted_arpa(out: Path) -> Path:
    """``out``'s modified Kneser-Ney bigram of PTB train (IMM's restricted model, Table 1), written once (a few
    seconds): the n-gram that the test scoring mixes into each model, ``(1 - α) p_model + α p_KN`` with α tuned
    on valid, the cheap baseline with no training that every arm is shown beside."""
    path = out / RESTRICTED_ARPA
    if not path.is_file():
        out.mkdir(parents=True, exist_ok=True)
        build = [sys.executable, "-m", "infolm", "ngram", "build", "--data", "ptb", "--order", "2",
                 "--method", "modified-kn", "--out", str(path.with_suffix(".tmp")), "--json"]  # fmt: skip
        done = run_command(build)
        if done.rc != 0:
            raise SystemExit(done.failure())
        path.with_suffix(".tmp").replace(path)
    return path


def score_commands(out: Path, name: str, induced_tokens: int) -> list[tuple[Path, list[str]]]:
    """Valid and test on the full splits; the test scoring adds the induced bigram (Table 1) and the model
    mixed with the KN bigram (``interpolate``: α tuned on valid, the mixture's valid and test perplexity)."""
    run = out / name
    base = [sys.executable, "-m", "infolm", "evaluate", str(run), "--full-splits", "--json"]
    induced = ["--induced-ngram", "2"] + (["--induced-max-train-tokens", str(induced_tokens)] if induced_tokens else [])
    mixture = ["--interpolate", str(restricted_arpa(out))]
    return [
        (run / "eval-valid.json", [*base, "--split", "valid"]),
        (run / "eval-test.json", [*base, "--split", "test", *induced, *mixture]),
    ]


def trained_since(run: Path, score: Path) -> bool:
    """The run's summary (or, for a run cut before it ended, its log) is newer than the score."""
    marker = run / "train-summary.json" if finished(run) else run / "metrics.jsonl"
    return marker.is_file() and marker.stat().st_mtime > score.stat().st_mtime


def missing_scores(out: Path, names: list[str], induced_tokens: int) -> list[tuple[Path, list[str]]]:
    """The scoring commands of the runs among ``names`` whose scores are missing or older than the run."""
    return [
        (path, command)
        for name in names
        if (out / name / "checkpoints").is_dir()
        for path, command in score_commands(out, name, induced_tokens)
        if not path.is_file() or trained_since(out / name, path)
    ]


def score_runs(out: Path, names: list[str], slots: int, deadline: float, induced_tokens: int) -> None:
    queue = missing_scores(out, names, induced_tokens)
    running: Scoring = []
    while queue or running:
        collect_scores(running)
        if time.time() >= deadline:
            for _, process in running:
                process.kill()
            return
        while queue and len(running) < slots:
            running.append(start_score(*queue.pop(0)))
        time.sleep(0.5)


def continued_from(out: Path, seed: int) -> Path:
    """What the seed's continuations start from: its baseline under ``out`` (trained there, resumed, laid
    out from its parked copy or, with ``--from-cut-baselines``, taken as cut); records keep no weights."""
    return out / f"baseline-s{seed}"


def same_run(parked: Path, record: Path) -> bool:
    """The record is the parked run, ended since: their logs begin with the same line (a resumed run keeps
    its log up to its checkpoint; a run trained again logs other wall times from its first line)."""

    def first(path: Path) -> str | None:
        lines = path.read_text().splitlines() if path.is_file() else []
        return lines[0] if lines else None

    line = first(parked / "metrics.jsonl")
    return line is not None and line == first(record / "metrics.jsonl")


def drop_parked(parked: Path, records: Path) -> None:
    """Remove the parked copy of every run that has since ended as a record; a parked baseline that is
    being trained again beside an older record (another run: another log) is kept."""
    for path in sorted(parked.iterdir()) if parked.is_dir() else []:
        if path.is_dir() and not path.name.startswith(".") and finished(records / path.name):
            if not same_run(path, records / path.name):
                continue
            shutil.rmtree(path)
            print(f"{path.name}: ended as a record, its parked copy dropped", file=sys.stderr)


def unpark(parked: Path, out: Path, names: list[str]) -> None:
    """Lay out in ``out`` each parked run among ``names`` that ``out`` does not hold (a new machine)."""
    for name in names:
        if (parked / name).is_dir():
            try:
                restored = unpark_run(parked / name, out)
            except InfolmError as failure:
                raise SystemExit(str(failure)) from None
            if restored is not None:
                print(f"{name}: laid out from its parked copy, to resume", file=sys.stderr)


def cmd_park(args: argparse.Namespace) -> None:
    """For the next machine (the driver stopped first): archive every run of ``--out`` that ended and was
    scored, and park every other (not ended, or ended without its scores, which the next ``train`` then
    computes). A run that cannot be parked (training now, no checkpoint yet) is named and left; the
    command then exits non-zero after parking the rest."""
    out, parked, records = Path(args.out), Path(args.parked), Path(args.records)
    if not out.is_dir():
        raise SystemExit(f"{out} is not a directory of runs")
    jobs, left = read_jsonl(out / "jobs.jsonl"), []
    for run in sorted(path for path in out.iterdir() if (path / "metrics.jsonl").is_file()):
        if finished(run) and scored(run):
            archive_ended(run, records, jobs)
            continue
        try:
            target = park_run(run, parked)
        except InfolmError as failure:
            print(f"{run.name}: not parked: {failure}", file=sys.stderr)
            left.append(run.name)
            continue
        size = sum(path.stat().st_size for path in target.rglob("*") if path.is_file())
        print(f"{run.name}: parked in {target} ({size / 1e6:.1f} MB)", file=sys.stderr)
    drop_parked(parked, records)
    if left:
        raise SystemExit(f"not parked: {', '.join(left)}")


def cmd_train(args: argparse.Namespace) -> None:
    out = Path(args.out).resolve()
    parked = Path(args.parked)
    seeds, arms, control = declared()
    if args.seeds is None:
        args.seeds = seeds
    if args.arms is None:
        args.arms = arms
    else:
        arms = with_controls(args.arms, control)
        for arm in [arm for arm in arms if arm not in args.arms]:
            print(f"{arm}: the matched control of an arm asked for, trained too", file=sys.stderr)
        args.arms = arms
    jobs: list[Job] = []
    for seed in args.seeds:
        if not args.from_cut_baselines:
            jobs.append(Job(f"baseline-s{seed}", "baseline", seed, train_command(out, "baseline", seed, args.set)))
    for seed in args.seeds:
        baseline = continued_from(out, seed)
        for arm in args.arms:
            command = train_command(out, arm, seed, args.set, baseline)
            jobs.append(Job(f"{arm}-s{seed}", arm, seed, command, after=f"baseline-s{seed}"))
    if args.dry_run:  # nothing written, nothing laid out or dropped
        for job in jobs:
            done = "recorded" if finished(Path(args.records) / job.name) else "to train"
            print(f"{job.name} ({done}): {' '.join(job.command)}")
        return
    out.mkdir(parents=True, exist_ok=True)
    drop_parked(parked, Path(args.records))
    names = [f"{arm}-s{seed}" for seed in args.seeds for arm in ["baseline", *args.arms]]
    unpark(parked, out, names)
    start = time.time()
    deadline = start + args.deadline_s if args.deadline_s else math.inf
    machine = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        import torch

        machine["torch"] = torch.__version__
        machine["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        pass
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    with (out / "calls.jsonl").open("a") as handle:
        handle.write(json.dumps({"argv": sys.argv, "commit": commit.stdout.strip(), "machine": machine}) + "\n")
    reserve = deadline - args.eval_reserve_s
    run_jobs(
        jobs,
        args.jobs,
        reserve,
        out,
        out / "jobs.jsonl",
        args.from_cut_baselines,
        args.induced_max_train_tokens,
        Path(args.records),
        keep=not args.set,  # runs with extra overrides are not the protocol's: kept only by `archive`
        retrain=args.retrain_baselines,
    )
    score_runs(out, [job.name for job in jobs], args.jobs, deadline, args.induced_max_train_tokens)
    print(f"done in {time.time() - start:.0f} s", file=sys.stderr)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def cmd_archive(args: argparse.Namespace) -> None:
    """Archive each run of ``--out`` that ended by itself and was scored (valid and test), with the
    driver's job records of it; a run still training, cut, or not yet scored is left out."""
    out, records = Path(args.out), Path(args.records)
    if not out.is_dir():
        raise SystemExit(f"{out} is not a directory of runs")
    jobs = read_jsonl(out / "jobs.jsonl")
    for run in sorted(path for path in out.iterdir() if (path / "metrics.jsonl").is_file()):
        archive_ended(run, records, jobs)
    drop_parked(Path(args.parked), records)


def scored(run: Path) -> bool:
    """The run has both its scores (valid, and test with the induced bigram)."""
    return (run / "eval-valid.json").is_file() and (run / "eval-test.json").is_file()


def archive_ended(run: Path, records: Path, jobs: list[dict[str, Any]]) -> None:
    """Archive ``run`` with the driver's job records of it if it ended by itself and was scored, without
    weights (of a baseline, the sha256 of its best weights, which its continuations are checked against);
    else leave it out, saying so."""
    if not finished(run) or not scored(run):
        print(f"{run.name}: not ended and scored, left out", file=sys.stderr)
        return
    jobs = [job for job in jobs if job.get("run") == run.name]
    meta: dict[str, Any] = {"jobs": jobs}
    if run.name.startswith("baseline-") and has_best(run):
        meta["best_weights_sha256"] = weights_sha256(run)
    source = init_from(jobs[-1]["command"]) if jobs else None
    sha = weights_sha256(source) if source is not None else None
    if sha:
        meta["continued_from"] = {"init_from": str(source), "model_sha256": sha}
    try:
        target = archive_run(run, records, meta)
    except InfolmError as failure:
        raise SystemExit(str(failure)) from None
    print(f"{run.name}: archived in {target}", file=sys.stderr)


def cmd_table(args: argparse.Namespace) -> None:
    """Print the page the generator makes from the records (``python -m experiments.report imm`` writes it
    with its curves); a run not yet archived is not on it."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from experiments.report import build

    page = ROOT / "docs" / "reproductions" / f"{PAPER}.md"
    print(build()[page], end="")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train and score every arm")
    p.add_argument("--out", default="runs/imm-ptb-table2-converged")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="default: the protocol's")
    p.add_argument(
        "--arms",
        nargs="+",
        default=None,
        choices=list(ARMS),
        help="default: the protocol's (experiments/protocols/imm.yaml); each arm's matched control is added",
    )
    p.add_argument("--jobs", type=int, default=2, help="runs at a time")
    p.add_argument("--deadline-s", type=float, default=0, help="stop everything after this many seconds (0: never)")
    p.add_argument("--eval-reserve-s", type=float, default=0, help="seconds before the deadline kept for scoring")
    p.add_argument(
        "--induced-max-train-tokens", type=int, default=0, help="induced bigram from this many train tokens (0: all)"
    )
    p.add_argument("--set", nargs="*", default=[], help="overrides for every run (e.g. a smoke budget)")
    p.add_argument(
        "--from-cut-baselines",
        action="store_true",
        help="continue from baselines that were cut before early stopping (their best weights; not retrained)",
    )
    p.add_argument("--records", default=str(RECORDS), help="runs archived here that ended are not trained again")
    p.add_argument(
        "--retrain-baselines",
        action="store_true",
        help="train again a recorded baseline (records keep no weights; its continuations need them)",
    )
    p.add_argument("--parked", default=str(PARKED), help="runs parked here are laid out in --out and resumed")
    p.add_argument("--dry-run", action="store_true", help="print the runs and their commands; train nothing")
    p.set_defaults(func=cmd_train)
    p = sub.add_parser(
        "table", help="print the page generated from the records (python -m experiments.report imm writes it)"
    )
    p.set_defaults(func=cmd_table)
    p = sub.add_parser("archive", help="copy every ended, scored run's config, log and scores into the records")
    p.add_argument("--out", default="runs/imm-ptb-table2-converged")
    p.add_argument("--records", default=str(RECORDS), help="the folder of records to write")
    p.add_argument("--parked", default=str(PARKED), help="parked copies of runs archived now are dropped here")
    p.set_defaults(func=cmd_archive)
    p = sub.add_parser("park", help="keep every run that has not ended in the repository, to resume elsewhere")
    p.add_argument("--out", default="runs/imm-ptb-table2-converged")
    p.add_argument("--parked", default=str(PARKED), help="the folder of parked runs to write")
    p.add_argument("--records", default=str(RECORDS), help="parked copies of runs recorded here are dropped")
    p.set_defaults(func=cmd_park)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
