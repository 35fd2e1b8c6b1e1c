"""Table 5.1 of Melis's thesis at a CPU scale: sentence-level latent LMs on PTB, best test results.

Arms (the table's columns; λ and α as the command line gives them):

* ``dreg-1``          40 Gaussian latents, DReG with one draw (the KL and the Rényi objective coincide, Props. 11-12);
* ``dreg-16-kl``      DReG with 16 draws, the KL objective (Eq. 5.12);
* ``dreg-16-renyi``   DReG with 16 draws, the Rényi objective (Eq. 5.16);
* ``vimco-1``         8 x 10 categorical latents, REINFORCE with one draw (the thesis's "VIMCO 1": no draw is
  left to form a leave-one-out baseline);
* ``vimco-16-kl``, ``vimco-16-renyi``  VIMCO with 16 draws.

Every run is ``infolm train configs/ptb/thesis-table5-1-cpu.yaml`` with the arm's objective (the config
states the scale and the untuned choices), named ``OUT/<arm>-lam<λ>-s<seed>`` (Rényi arms:
``OUT/<arm>-lam<λ>-a<α>-s<seed>``). As the thesis reports each
column's best result after tuning on validation, ``table`` scores every candidate run's best checkpoint
on validation with IWAE-``--valid-samples`` (thesis: 100), picks per arm and seed the λ with the best
of these, scores that run on test (IWAE-``--test-samples``, thesis: 500), and lists each chosen run's perplexity,
NLL and KL per token; the comparison tables, with the thesis's numbers, are the generated page's
(``python -m experiments.report thesis-ch5``, from ``experiments/protocols/thesis-ch5.yaml`` and the records).
``train`` without ``--arms``, ``--lams``, ``--alpha`` or ``--seeds`` trains the runs that protocol reads.
The KL is the thesis's estimate of the true KL, Û − Ŝ (``infolm evaluate``'s ``mi``); the rate KL(q||p)
is printed beside it. A Rényi arm at λ = 0 is the KL arm at λ = 0 (every MI term has weight 0): it is
trained once, as the KL run, and counted for both.
The arm ``lm`` is the page's control: the sentence LSTM LM of
``configs/ptb/sentence-lstm.yaml`` (the latent model's decoder without z) trained with this config's
batch, optimizer, schedule, stopping, dropouts and init (``lm_overrides``), once per seed as
``OUT/lm-s<seed>``; ``--lm-run`` adds other LM runs as rows::

    OMP_NUM_THREADS=1 python experiments/thesis_table5_1.py train --out runs/thesis-table5-1 \
        --arms lm dreg-1 vimco-1 --lams 0.3 --seeds 0 --jobs 2
    python experiments/thesis_table5_1.py table --out runs/thesis-table5-1 --png docs/img/thesis_table5_1_valid.png

``train --score`` scores each run that ends by itself the moment it ends (valid IWAE-100 and test
IWAE-500, the LM exactly; every λ's run, not only the one ``table`` will choose) and archives it before
the next run starts, so a machine lost in the middle of a queue keeps every run it finished; runs with
``--set`` overrides are not the protocol's and are never archived.
Rerunning ``train`` resumes cut runs (``infolm train`` resumes its run directory) and skips finished
ones; ``--deadline-s`` stops what still trains (a cut run is marked so in the table). Scores are
cached as ``<run>/eval-test-iwae500.json`` and ``eval-valid-iwae100.json``; ``table --jobs N`` runs N
evaluations at a time. ``archive`` copies every ended run's config, log, summary and cached scores
(no checkpoint) into ``experiments/records/thesis-table5-1/``, kept in the repository; ``table`` reads
those records beside ``--out``'s runs (a run directory stands for a record of the same name), so the
table outlives the machine that trained the runs::

    python experiments/thesis_table5_1.py table --out runs/thesis-table5-1 --jobs 2
    python experiments/thesis_table5_1.py archive --out runs/thesis-table5-1
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from infolm.config import load_config
from infolm.errors import InfolmError
from infolm.latent.sentence_lstm import SentenceLSTMConfig
from infolm.tasks.sentence_latent import SentenceLatentConfig
from infolm.training.records import archive_run, is_record, runs_and_records
from infolm.training.run_lock import run_dir_in_use

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/ptb/thesis-table5-1-cpu.yaml"
LM_CONFIG = "configs/ptb/sentence-lstm.yaml"
LM = "lm"  # the baseline arm: no latents, no λ
RECORDS = ROOT / "experiments" / "records" / "thesis-table5-1"  # the finished runs' records, kept in the repository


def objective(arm: str, lam: float, alpha: float) -> tuple[str, dict[str, Any]]:
    """The latents and the objective section of an arm."""
    estimator, samples, *kind = arm.split("-")
    latent = "gaussian" if estimator == "dreg" else "categorical"
    draws = int(samples)
    if estimator == "vimco" and draws == 1:
        estimator = "reinforce"  # VIMCO's baseline needs a second draw
    # per scored token of each batch, as every recorded run of this table was trained (Eq. 5.5's mean over
    # sentences, objective.*.normalize=sentences, is the objectives' default)
    term: dict[str, Any] = {"estimator": estimator, "samples": draws, "lam": lam, "normalize": "tokens"}
    if kind == ["renyi"]:
        return latent, {"mi-renyi": {**term, "alpha": alpha}}
    return latent, {"mi-kl": term}


ARMS = ["dreg-1", "dreg-16-kl", "dreg-16-renyi", "vimco-1", "vimco-16-kl", "vimco-16-renyi"]


NUMBER = r"-?[0-9.]+(?:e[+-]?[0-9]+)?"  # as f"{value:g}" writes it: -0.05, 0.3, 1e-05
RUN_NAME = re.compile(rf"^(?P<arm>.+)-lam(?P<lam>{NUMBER})(?:-a(?P<alpha>{NUMBER}))?-s(?P<seed>\d+)$")
LM_RUN_NAME = re.compile(rf"^{LM}-s(?P<seed>\d+)$")


def protocol_grid() -> tuple[list[str], list[float], float, list[int]]:
    """The arms, λ, α and seeds of the runs that ``experiments/protocols/thesis-ch5.yaml`` reads from this
    driver's records (``train``'s defaults)."""
    if str(ROOT) not in sys.path:  # run as a script: the repository's ``experiments`` package
        sys.path.insert(0, str(ROOT))
    from experiments.reproduce.protocol import load_protocol, runs_of

    arms: list[str] = []
    lams: list[float] = []
    alphas: list[float] = []
    seeds: list[int] = []
    for arm, seed in runs_of(load_protocol("thesis-ch5"), records=RECORDS.name):
        match = RUN_NAME.match(f"{arm}-s{seed}")
        kind = LM if arm == LM else match["arm"] if match else None
        if kind not in (LM, *ARMS):
            raise SystemExit(f"protocol thesis-ch5: arm {arm!r} is no run name of this driver")
        if match and kind != LM:
            lams += [float(match["lam"])] if float(match["lam"]) not in lams else []
            alphas += [float(match["alpha"])] if match["alpha"] and float(match["alpha"]) not in alphas else []
        arms += [kind] if kind not in arms else []
        seeds += [seed] if seed not in seeds else []
    if len(alphas) > 1:
        raise SystemExit(f"protocol thesis-ch5: one α for the Rényi arms, not {alphas}")
    return arms, lams, (alphas or [2.0])[0], sorted(seeds)


def run_name(arm: str, lam: float, alpha: float, seed: int) -> str:
    if arm == LM:
        return f"{LM}-s{seed}"
    return f"{arm}-lam{lam:g}" + (f"-a{alpha:g}" if arm.endswith("renyi") else "") + f"-s{seed}"


# what the LM takes as it is from the latent config: every data field but the evaluation batch (which
# changes no score), every optimizer and schedule field, every training field but the logging ones
DATA_NOT_SHARED = {"eval_batch_size"}
TRAIN_NOT_SHARED = {"log_every", "progress", "tensorboard"}


def lm_overrides(extra: list[str]) -> list[str]:
    """The sentence LM's settings taken from this driver's config (with ``extra``), so that the baseline
    differs from the latent arms only by having no latents: the data and batches (sentence cut and
    length buckets), every optimizer, schedule and training field, and the decoder's sizes, dropouts,
    init and weight tying. ``extra``'s ``run.*`` settings (a device) apply as they are. A decoder
    setting the LM has no counterpart for (recurrent-state dropout) is refused."""
    table = load_config(ROOT / CONFIG, list(extra))
    model = SentenceLSTMConfig(**{k: v for k, v in table.model.items() if k != "name"})  # with its defaults
    task = SentenceLatentConfig(**{k: v for k, v in table.task.items() if k != "name"})
    if model.dropout_state > 0.0:
        raise SystemExit(
            f"arm {LM}: the sentence LM has no recurrent-state dropout (model.dropout_state={model.dropout_state})"
        )
    found = {  # the LM's names differ for two of the decoder's fields
        **{f"data.{k}": v for k, v in dataclasses.asdict(table.data).items() if k not in DATA_NOT_SHARED},
        "task.max_len": task.max_len,
        "task.truncate": list(task.truncate),
        "task.bucket_batches": task.bucket_batches,
        "model.emb": model.embedding,
        "model.hidden": model.hidden,
        "model.dropout_input": model.dropout_input,
        "model.dropout": model.dropout_output,
        "model.init_range": model.init_range,
        "model.tie_weights": model.tie_weights,
        **{f"optim.{key}": value for key, value in dataclasses.asdict(table.optim).items()},
        **{f"train.{k}": v for k, v in dataclasses.asdict(table.train).items() if k not in TRAIN_NOT_SHARED},
    }
    return [f"{key}={json.dumps(value)}" for key, value in found.items()] + [
        item for item in extra if item.startswith("run.")
    ]


def train_command(out: Path, arm: str, lam: float, alpha: float, seed: int, extra: list[str]) -> list[str]:
    run = f"run.dir={out / run_name(arm, lam, alpha, seed)}"
    if arm == LM:
        return [
            sys.executable,
            "-m",
            "infolm",
            "train",
            LM_CONFIG,
            run,
            f"run.seed={seed}",
            *lm_overrides(extra),
            "--json",
        ]
    latent, section = objective(arm, lam, alpha)
    return [
        sys.executable,
        "-m",
        "infolm",
        "train",
        CONFIG,
        run,
        f"run.seed={seed}",
        f"model.latent={latent}",
        "~objective.mi-kl",  # an override merges into the config's objective section: replace it
        f"objective={json.dumps(section)}",
        *extra,
        "--json",
    ]


def epoch_cap(extra: list[str]) -> int:
    """The epoch limit of a run of this driver: the config's, or the one ``--set`` gives."""
    return int(load_config(ROOT / CONFIG, list(extra)).train.epochs)


def finished(run: Path, cap: int) -> bool:
    """Ended by itself (the driver saved its summary) by early stopping, or at an epoch limit of at least
    ``cap``. A run that stopped at a lower limit than ``cap`` is not: ``train`` extends it (``infolm
    train`` resumes the run directory up to the new limit), and neither is one that a step limit ended.

    Early stopping is the trainer's own word (``early_stopped`` in its summary). Summaries written before
    the trainer reported it are read against the epoch limit the driver recorded (``epochs_limit``), never
    against the run's ``config.yaml``: an extension rewrites that file with the new limit as soon as it
    starts, so a cut extension would look early-stopped. Such a summary cannot tell a step limit
    (``train.max_steps``, which the driver never sets) from early stopping. A summary with neither is not
    trusted: rerunning a run that did stop early costs only its start (the trainer resumes, finds patience
    spent, and ends, leaving its log and the scores cached from it as they were)."""
    summary_path = run / "train-summary.json"
    if not summary_path.is_file():
        return False
    summary = json.loads(summary_path.read_text())
    if "early_stopped" in summary:
        return bool(summary["early_stopped"]) or int(summary["epoch"]) >= cap
    ended = int(summary["epoch"])
    if ended >= cap:
        return True
    return "epochs_limit" in summary and ended < int(summary["epochs_limit"])


def pending(
    out: Path,
    arms: list[str],
    lams: list[float],
    alpha: float,
    seeds: list[int],
    extra: list[str],
    records: Path = RECORDS,
) -> dict[Path, list[str]]:
    """The runs still to train (or to extend), each with its command; the LM has no λ: one run per seed.
    A run whose record (in ``records``) ended by itself is done: it is not trained again."""
    cap = epoch_cap(extra)
    todo: dict[Path, list[str]] = {}
    for seed in seeds:
        for lam in lams:
            for arm in arms:
                if arm.endswith("-renyi") and lam == 0:  # every MI term has weight 0: the KL arm's run,
                    arm = arm.removesuffix("-renyi") + "-kl"  # trained once; `table` counts it for both
                run = out / run_name(arm, lam, alpha, seed)
                if run not in todo and not finished(run, cap) and not finished(records / run.name, cap):
                    todo[run] = train_command(out, arm, lam, alpha, seed, extra)
    return todo


def run_one(command: list[str], run: Path, timeout: float, cap: int) -> dict[str, Any]:
    start = time.time()
    record: dict[str, Any] = {"run": run.name, "command": " ".join(command)}
    try:
        with (run.parent / f"{run.name}.train.err").open("wb") as err:
            result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, timeout=timeout)
    except subprocess.TimeoutExpired:
        record.update(rc="cut at the deadline", wall_s=round(time.time() - start, 1))
        return record
    record.update(rc=result.returncode, wall_s=round(time.time() - start, 1))
    lines = result.stdout.decode().strip().splitlines()
    if result.returncode == 0 and lines:
        tmp = run / "train-summary.tmp"
        summary = dict(json.loads(lines[-1]), epochs_limit=cap)
        tmp.write_text(json.dumps(summary) + "\n")
        tmp.replace(run / "train-summary.json")
    return record


def cmd_train(args: argparse.Namespace) -> None:
    if None in (args.arms, args.lams, args.alpha, args.seeds):  # what is not given, the protocol says
        arms, lams, alpha, seeds = protocol_grid()
        args.arms = args.arms or arms
        args.lams = args.lams if args.lams is not None else lams
        args.alpha = args.alpha if args.alpha is not None else alpha
        args.seeds = args.seeds if args.seeds is not None else seeds
    if args.jobs < 1:
        raise SystemExit(f"--jobs must be at least 1, got {args.jobs}")
    if any(not math.isfinite(lam) or lam >= 1.0 for lam in args.lams):
        raise SystemExit(f"every λ of --lams must be below 1 (Table 5.2: -0.05..0.9999), got {args.lams}")
    if not math.isfinite(args.alpha) or args.alpha <= 0.0 or args.alpha == 1.0:
        raise SystemExit(f"--alpha must be positive and not 1, got {args.alpha}")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + args.deadline_s if args.deadline_s else math.inf
    cap = epoch_cap(args.set)
    todo = pending(out, args.arms, args.lams, args.alpha, args.seeds, args.set, Path(args.records))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    call = {"argv": sys.argv, "commit": commit.stdout.strip(), "machine": machine()}
    with (out / "calls.jsonl").open("a") as handle:
        handle.write(json.dumps(call) + "\n")

    def job(item: tuple[list[str], Path]) -> dict[str, Any]:
        command, run = item
        left = deadline - time.time()
        if left <= 0:
            return {"run": run.name, "rc": "not started: past the deadline"}
        record = run_one(command, run, left if math.isfinite(left) else None, cap)  # type: ignore[arg-type]
        record.update(commit=call["commit"], machine=call["machine"])  # what a record of the run keeps
        with (out / "jobs.jsonl").open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        print(f"{run.name}: {record['rc']} ({record.get('wall_s', 0):.0f} s)", file=sys.stderr, flush=True)
        if args.score and record["rc"] == 0 and finished(run, cap) and not args.set:
            score_and_archive(run, out, Path(args.records), args.valid_samples, args.test_samples)
        return record

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(job, [(command, run) for run, command in todo.items()]))


def score_and_archive(run: Path, out: Path, records: Path, valid_samples: int, test_samples: int) -> Path:
    """``train --score``: the scores ``table`` reads for a run that ended by itself (a latent arm's
    IWAE-``valid_samples`` on valid and IWAE-``test_samples`` on test, whichever λ ``table`` will choose;
    the LM's exact valid and test), then its record, before the queue's next run starts."""
    calls: list[tuple[Path, str, int | None, Path]]
    if LM_RUN_NAME.match(run.name):
        calls = [(run, split, None, run / f"eval-{split}.json") for split in ("valid", "test")]
    else:
        calls = [
            (run, "valid", valid_samples, run / f"eval-valid-iwae{valid_samples}.json"),
            (run, "test", test_samples, run / f"eval-test-iwae{test_samples}.json"),
        ]
    started = time.time()
    for call in calls:
        score(*call)
    jobs = [job for job in read_jsonl(out / "jobs.jsonl") if job.get("run") == run.name]
    meta: dict[str, Any] = {"jobs": jobs, "ended_by_itself": True, "score_s": round(time.time() - started, 1)}
    try:
        target = archive_run(run, records, meta)
    except InfolmError as failure:
        raise SystemExit(str(failure)) from None
    print(f"{run.name}: scored and archived in {target}", file=sys.stderr, flush=True)
    return target


def machine() -> dict[str, Any]:
    found: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    found["cpus"] = os.cpu_count()
    try:
        import torch

        found["torch"] = torch.__version__
        found["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        pass
    return found


# ----------------------------------------------------------------------------------------------
# The table, from the run directories alone


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def best_valid(run: Path) -> float | None:
    """The run's best validation bound per token (IWAE-``task.valid_samples``) from its log."""
    losses = [r["loss"] for r in read_jsonl(run / "metrics.jsonl") if r.get("split") == "valid"]
    finite = [loss for loss in losses if loss is not None and math.isfinite(loss)]  # null: not finite
    return min(finite) if finite else None


def valid_curve(run: Path) -> list[tuple[int, float, float | None]]:
    """(epoch, validation perplexity, KL per sentence or None) of each validation record in the run's log:
    the latent arms' IWAE-``task.valid_samples`` bound and their Û − Ŝ estimate of the true KL (``mi``, as
    Table 5.1's KL), the LM's exact perplexity."""
    return [  # a value that was not finite is logged as null
        (int(r["epoch"]) + 1, float(r["ppl"]), float(r["mi"]) if r.get("mi") is not None else None)
        for r in read_jsonl(run / "metrics.jsonl")
        if r.get("split") == "valid" and r.get("ppl") is not None
    ]


def plot_curves(curves: dict[str, list[tuple[int, float, float | None]]], path: Path) -> None:
    """Validation perplexity and KL per sentence against the epoch, a line per run (colour: arm; style: seed)."""
    from infolm.evaluation.plots import new_figure, save_figure

    fig, (ppl_axis, kl_axis) = new_figure(ncols=2)
    palette = ["black", "tab:blue", "tab:cyan", "tab:purple", "tab:red", "tab:orange", "tab:brown"]
    colors = dict(zip([LM, *ARMS], palette))
    styles = ["-", "--", ":", "-."]
    for name, curve in sorted(curves.items()):
        match = RUN_NAME.match(name) or LM_RUN_NAME.match(name)
        arm = match.groupdict().get("arm", LM) if match else ""
        seed = int(match["seed"]) if match else 0
        style: dict[str, Any] = {
            "color": colors.get(arm, "grey"),
            "linestyle": styles[seed % len(styles)],
            "linewidth": 1,
        }
        epochs = [epoch for epoch, _, _ in curve]
        ppl_axis.plot(epochs, [ppl for _, ppl, _ in curve], label=name, **style)
        kls = [(epoch, kl) for epoch, _, kl in curve if kl is not None]
        if kls:
            kl_axis.plot([e for e, _ in kls], [kl for _, kl in kls], label=name, **style)
    ppl_axis.set_xlabel("epoch")
    ppl_axis.set_ylabel("valid perplexity per token (latent: IWAE bound)")
    ppl_axis.set_yscale("log")
    ppl_axis.legend(fontsize=6)
    ppl_axis.set_title("Table 5.1 runs, PTB sentences, hidden 128")
    kl_axis.set_xlabel("epoch")
    kl_axis.set_ylabel("KL(p(z|x) || p(z)) per sentence, Û − Ŝ (nats)")
    kl_axis.legend(fontsize=6)
    save_figure(fig, path)


def score(run: Path, split: str, samples: int | None, path: Path) -> dict[str, Any]:
    """``infolm evaluate`` of the run's best checkpoint, cached in ``path``. A record's cached scores are
    final (it has no checkpoint; a checkout's file times say nothing of which file came first)."""
    log = run / "metrics.jsonl"
    if is_record(run):
        if path.is_file():
            return dict(json.loads(path.read_text()))
        raise SystemExit(f"{run} is a record without {path.name}: it has no checkpoint to score")
    if path.is_file() and (not log.is_file() or path.stat().st_mtime >= log.stat().st_mtime):
        return dict(json.loads(path.read_text()))
    command = [sys.executable, "-m", "infolm", "evaluate", str(run), "--split", split, "--full-splits", "--json"]
    if samples is not None:
        command += ["--samples", str(samples)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"scoring {run} on {split} failed: {result.stderr.strip()}")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(result.stdout)
    tmp.replace(path)
    return dict(json.loads(result.stdout))


def valid_score(run: Path, samples: int) -> dict[str, Any]:
    """The IWAE-``samples`` validation score of the run's best checkpoint (cached)."""
    return score(run, "valid", samples, run / f"eval-valid-iwae{samples}.json")


def per_token(found: dict[str, Any], key: str) -> float:
    """A per-sentence mean of ``infolm evaluate`` (``kl``, ``mi``) summed over sentences, per scored token."""
    return float(found[key]) * float(found["sentences"]) / float(found["tokens"])


def per_token_kl(found: dict[str, Any]) -> float:
    """Table 5.1's KL: the thesis's estimate of the true KL(p(z|x) || p(z)), Û^K − Ŝ^K (Eqs. 5.4, 5.12;
    ``mi``, its mean per sentence), per token. Not the representational KL(q(z|x) || p(z)) (``kl``, the
    rate), which the thesis calls a highly biased estimate under Monte Carlo objectives (Sec. 5.1)."""
    return per_token(found, "mi")


def prefetch(calls: list[tuple[Path, str, int | None, Path]], jobs: int) -> None:
    """Fill the score caches of ``calls`` (``score``'s arguments), ``jobs`` evaluations at a time; a
    failure is left for the table's own pass, which reports it where it reads the score."""

    def one(call: tuple[Path, str, int | None, Path]) -> None:
        with contextlib.suppress(SystemExit):
            score(*call)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, calls))


def choose(
    found: list[Path], valid_samples: int, jobs: int
) -> tuple[dict[Path, float | None], list[tuple[float, Path]], dict[Path, str]]:
    """One arm's candidate runs of one seed: each one's best logged bound, the (IWAE-``valid_samples``
    validation NLL, run) of those scored, and a note on each run that is no candidate."""
    logged = {run: best_valid(run) for run in found}  # each run's log read once
    # λ is chosen on the validation bound of the thesis's K (IWAE-100), every candidate's best
    # checkpoint scored: the IWAE-10 of training is looser the more a run uses its latents
    notes = {run: ", training now: not a candidate" for run in found if run_dir_in_use(run)}
    open_runs = [run for run, loss in logged.items() if loss is not None and run not in notes]
    if jobs > 1:
        prefetch(
            [(run, "valid", valid_samples, run / f"eval-valid-iwae{valid_samples}.json") for run in open_runs], jobs
        )
    scored: list[tuple[float, Path]] = []
    for run in open_runs:  # a run still training is no candidate yet (its score would go stale)
        try:
            scored.append((valid_score(run, valid_samples)["nll"], run))
        except SystemExit as failure:
            notes[run] = f", not a candidate: {failure}"
    return logged, scored, notes


def cmd_table(args: argparse.Namespace) -> None:
    out = Path(args.out)
    records = [Path(folder) for folder in args.records]
    if not out.is_dir() and not any(folder.is_dir() for folder in records):
        raise SystemExit(f"{out} is not a directory of Table 5.1 runs, and no folder of records was found")
    if args.jobs < 1:
        raise SystemExit(f"--jobs must be at least 1, got {args.jobs}")
    cap = epoch_cap([])
    runs: dict[str, dict[int, list[Path]]] = {arm: {} for arm in ARMS}
    lm_runs: list[Path] = []
    for run in runs_and_records([out, *records], lambda path: (path / "metrics.jsonl").is_file()):
        match = RUN_NAME.match(run.name)
        if match and match["arm"] in runs:
            runs[match["arm"]].setdefault(int(match["seed"]), []).append(run)
            renyi = match["arm"].removesuffix("-kl") + "-renyi"
            if match["arm"].endswith("-kl") and float(match["lam"]) == 0:  # the Rényi arm's λ = 0 run too
                runs[renyi].setdefault(int(match["seed"]), []).append(run)
        elif LM_RUN_NAME.match(run.name):
            lm_runs.append(run)
    training = [run for run in lm_runs if run_dir_in_use(run)]  # scored once it ends (its score would go stale)
    lm_runs = [run for run in lm_runs if run not in training]
    candidates: list[str] = []
    per_seed = [f"{run.name}: training now, not in the table" for run in training]  # each chosen run's scores,
    # and each LM run's
    choices: dict[str, list[tuple[int, Path]]] = {}
    for arm in ARMS:
        chosen: list[tuple[int, Path]] = []
        for seed, found in sorted(runs[arm].items()):
            logged, scored, notes = choose(found, args.valid_samples, args.jobs)
            candidates += [
                f"{run.name}: {'–' if loss is None else f'{loss:.4f}'}{'' if finished(run, cap) else ' (cut)'}"
                + "".join(f", IWAE-{args.valid_samples} {nll:.4f}" for nll, scored_run in scored if scored_run == run)
                + notes.get(run, "")
                for run, loss in logged.items()
            ]
            if scored:
                chosen.append((seed, min(scored)[1]))
        choices[arm] = chosen
    test_path = f"eval-test-iwae{args.test_samples}.json"
    if args.jobs > 1:  # the chosen runs' test scores, and the LM runs' below, at once
        wanted = {(run, "test", args.test_samples, run / test_path) for c in choices.values() for _, run in c}
        lm_paths = [(run, split, None, run / f"eval-{split}.json") for run in lm_runs for split in ("valid", "test")]
        prefetch(sorted(wanted) + lm_paths, args.jobs)
    for arm in ARMS:
        chosen = choices[arm]
        if not chosen:
            per_seed += [f"{arm}: no validation yet"] if runs[arm] else []
            continue
        valid = [valid_score(run, args.valid_samples) for _, run in chosen]
        test = [score(run, "test", args.test_samples, run / test_path) for _, run in chosen]
        per_seed += [
            f"{run.name}: valid NLL {v['nll']:.4f}, test ppl {t['ppl']:.2f}, NLL {t['nll']:.4f}, "
            f"KL per token (Û − Ŝ) {per_token_kl(t):.4f}, rate per token {per_token(t, 'kl'):.4f}"
            for (_, run), v, t in zip(chosen, valid, test)
        ]
    for lm in args.lm_run:
        if not (Path(lm) / "config.yaml").is_file():
            raise SystemExit(f"--lm-run {lm} is not a run directory")
    # the driver's own LM runs say whether they ended by themselves; other runs (--lm-run) cannot
    for found in [lm_runs, *([Path(lm)] for lm in args.lm_run)]:
        lm_valid = [score(run, "valid", None, run / "eval-valid.json") for run in found]
        lm_test = [score(run, "test", None, run / "eval-test.json") for run in found]
        per_seed += [
            f"{run.name}: valid NLL {v['nll']:.4f}, test ppl {t['ppl']:.2f}, NLL {t['nll']:.4f}"
            for run, v, t in zip(found, lm_valid, lm_test)
        ]
    print("the comparison tables: python -m experiments.report thesis-ch5 (from the records)")
    print("\neach chosen run (and each LM run), as scored:")
    print("\n".join(f"  {line}" for line in per_seed))
    print(
        "\nevery candidate's best validation bound per token, as logged in training (task.valid_samples draws), "
        f"and its best checkpoint's IWAE-{args.valid_samples}, on which λ is chosen:"
    )
    print("\n".join(f"  {line}" for line in candidates))
    curves = {run.name: valid_curve(run) for found in runs.values() for seeds in found.values() for run in seeds}
    curves.update({run.name: valid_curve(run) for run in lm_runs})
    print("\nvalidation perplexity per epoch (latent arms: the IWAE bound of task.valid_samples draws; LM: exact),")
    print("and for the latent arms the KL per sentence (Û − Ŝ, the thesis's estimate of the true KL):")
    for name, curve in sorted(curves.items()):
        print(f"  {name}: " + ", ".join(f"{ppl:.1f}" for _, ppl, _ in curve))
        if any(kl is not None for _, _, kl in curve):
            print(f"  {name} KL: " + ", ".join("–" if kl is None else f"{kl:.3f}" for _, _, kl in curve))
    if args.png:
        plot_curves(curves, Path(args.png))


def cmd_archive(args: argparse.Namespace) -> None:
    """Archive each run of ``--out`` that ended (it has its summary; a run still training, or cut and
    not yet resumed, is left out) with the driver's job records of it. Run after ``table``, so that the
    record holds the scores the table read. With ``--cut``, a run cut at a deadline that will not be
    resumed (its trainer state did not outlive the machine) is archived too, if it has its test score,
    marked ``cut``; the table counts it as cut, and ``train`` trains it again rather than skip it."""
    out, records = Path(args.out), Path(args.records)
    if not out.is_dir():
        raise SystemExit(f"{out} is not a directory of Table 5.1 runs")
    jobs = read_jsonl(out / "jobs.jsonl")
    cap = epoch_cap([])
    for run in sorted(path for path in out.iterdir() if (path / "metrics.jsonl").is_file()):
        if not (RUN_NAME.match(run.name) or LM_RUN_NAME.match(run.name)):
            continue
        ended = (run / "train-summary.json").is_file()
        cut = not ended and args.cut and any(run.glob("eval-test*.json"))
        if run_dir_in_use(run) or not (ended or cut):
            print(f"{run.name}: not ended, left out", file=sys.stderr)
            continue
        meta = {"jobs": [job for job in jobs if job.get("run") == run.name], "ended_by_itself": finished(run, cap)}
        if cut:
            meta["cut"] = True
        try:
            target = archive_run(run, records, meta)
        except InfolmError as failure:
            raise SystemExit(str(failure)) from None
        print(f"{run.name}: archived in {target}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train the arms")
    p.add_argument("--out", default="runs/thesis-table5-1")
    p.add_argument(
        "--arms", nargs="+", choices=[LM, *ARMS], help=f"{LM}: the sentence LM baseline (default: the protocol's)"
    )
    p.add_argument("--lams", type=float, nargs="+", help="λ grid (Table 5.2: -0.05..0.9999; default: the protocol's)")
    p.add_argument("--alpha", type=float, help="α of the Rényi arms (Table 5.2: 0.86..16; default: the protocol's)")
    p.add_argument("--seeds", type=int, nargs="+", help="default: the protocol's")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time")
    p.add_argument("--deadline-s", type=float, default=0, help="stop what trains after this many s (0: never)")
    p.add_argument("--set", nargs="*", default=[], help="overrides for every run (e.g. run.device=cuda)")
    p.add_argument("--records", default=str(RECORDS), help="runs archived here that ended are not trained again")
    p.add_argument(
        "--score",
        action="store_true",
        help="score each run that ends by itself as `table` does and archive it at once (not with --set)",
    )
    p.add_argument("--valid-samples", type=int, default=100, help="with --score: IWAE-K on valid (thesis: 100)")
    p.add_argument("--test-samples", type=int, default=500, help="with --score: IWAE-K on test (thesis: 500)")
    p.set_defaults(func=cmd_train)
    p = sub.add_parser("table", help="pick λ on validation, score the chosen runs on test and list them")
    p.add_argument("--out", default="runs/thesis-table5-1")
    p.add_argument("--valid-samples", type=int, default=100, help="IWAE-K of the reported valid NLL (thesis: 100)")
    p.add_argument("--test-samples", type=int, default=500, help="IWAE-K on test (thesis: 500)")
    p.add_argument("--lm-run", nargs="*", default=[], help="other sentence LM runs, a row each")
    p.add_argument("--png", default="", help="write every run's validation curves here")
    p.add_argument(
        "--records", nargs="*", default=[str(RECORDS)], help="folders of archived runs read beside --out's runs"
    )
    p.add_argument("--jobs", type=int, default=1, help="evaluations at a time")
    p.set_defaults(func=cmd_table)
    p = sub.add_parser("archive", help="copy every ended run's config, log and scores into the records")
    p.add_argument("--out", default="runs/thesis-table5-1")
    p.add_argument("--records", default=str(RECORDS), help="the folder of records to write")
    p.add_argument(
        "--cut", action="store_true", help="also archive runs cut at a deadline that has a test score (marked cut)"
    )
    p.set_defaults(func=cmd_archive)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
