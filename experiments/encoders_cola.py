"""The CoLA runs of Kong et al. Table 2 (BERT-NCE against InfoWord over App. B's λ_DIM grid) and of the IMM
paper's Table 3 (fine-tuning alone, +MLM, +MLM+IMM from one encoder), at the scale of a 2-core CPU, archived
as the records that ``experiments/protocols/infoword.yaml`` and ``imm-bert.yaml`` compare.

The arms are the protocols' (every arm of a comparison whose records are ``encoders-cola``); each names a
pretraining recipe and a fine-tuning variant:

* ``bert-nce``: ``configs/ptb/bert-nce.yaml`` (MLM with in-batch negatives, span masking), fine-tuned with
  ``configs/cola/finetune-base.yaml``;
* ``infoword-L``: ``configs/ptb/infoword.yaml`` with λ_DIM = L (``objective.dim.weight``), fine-tuned as above;
* ``bert-mlm-V`` (V = base, mlm, imm): ``configs/ptb/bert-mlm.yaml`` (full-softmax MLM, token masking), one
  pretraining per seed, fine-tuned with ``configs/cola/finetune-V.yaml``.

Seeds cover the whole pipeline: pretraining seed ``s`` (``--seeds``, default the protocols' seeds) is the
``run.seed`` of ``infolm train`` (initialisation, batches, masks; every encoder of one seed sees the same
text), and every encoder is fine-tuned with each of ``--finetune-seeds`` (``infolm finetune``: selection on
the held-out tenth of CoLA's train, scores on CoLA's public in-domain dev set as ``test``). The pretraining
budget is the same for every encoder (``--epochs`` of PTB's training text plus ``--extra-train``, at most
``--steps`` updates).

Each (arm, pretraining seed) becomes the record ``RECORDS/<arm>-s<seed>/``: the pretraining run's
``config.yaml``, ``overrides.json``, ``metrics.jsonl``, ``train-summary.json`` and ``tokenizer.json`` (no
weights), the fine-tuning's ``finetune-summary.json`` (per fine-tuning seed and mean ± sd, both splits),
``finetune-config.yaml`` and each fine-tuning seed's log (``finetune-seed-N.jsonl``), and ``record.json`` with
the jobs (command, commit, machine, wall time). The three ``bert-mlm-V`` records of a seed share one
pretraining run. Runs that finished are reused and recorded arms are skipped, so rerunning the command
continues where it stopped; the tables are ``python -m experiments.report infoword imm``.

    INFOLM_DATA_MIRROR=... OMP_NUM_THREADS=1 python experiments/encoders_cola.py            # every arm, seed
    OMP_NUM_THREADS=1 python experiments/encoders_cola.py --arms bert-nce infoword-1.0 --seeds 0 --dry-run
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the protocols' reader lives in the experiments package
    sys.path.insert(0, str(ROOT))

from experiments.reproduce.jobs import JobLog  # noqa: E402
from experiments.reproduce.protocol import load_pages, runs_of  # noqa: E402
from infolm.training.records import archive_run, is_record  # noqa: E402

DRIVER = "encoders_cola.py"
RECORDS = "encoders-cola"  # the protocols' record folder for these runs
PAPERS = ("infoword", "imm")  # the pages whose comparisons read it
FINETUNE_VARIANTS = ("base", "mlm", "imm")


@dataclass
class Arm:
    """One arm of the protocols: the encoder it fine-tunes (pretraining recipe) and the fine-tuning variant."""

    name: str
    encoder: str  # pretraining run name stem; arms that share it share the pretraining run
    config: str
    overrides: list[str] = field(default_factory=list)
    finetune: str = "base"


def recipe(name: str) -> Arm:
    """The pretraining and fine-tuning an arm name stands for (the module docstring lists the names)."""
    if name == "bert-nce":
        return Arm(name, "bert-nce", "configs/ptb/bert-nce.yaml")
    match = re.fullmatch(r"infoword-(\d+(?:\.\d+)?)", name)
    if match:
        return Arm(name, name, "configs/ptb/infoword.yaml", [f"objective.dim.weight={float(match.group(1))}"])
    match = re.fullmatch(rf"bert-mlm-({'|'.join(FINETUNE_VARIANTS)})", name)
    if match:
        return Arm(name, "bert-mlm", "configs/ptb/bert-mlm.yaml", finetune=match.group(1))
    raise SystemExit(f"encoders_cola.py: no recipe for the arm {name!r} (bert-nce, infoword-L, bert-mlm-base|mlm|imm)")


def protocol_runs() -> tuple[list[str], list[int]]:
    """Every arm (controls included; an arm that selects stands for the arms it chooses among) and seed of
    the comparisons that read ``encoders-cola``, in protocol order."""
    arms: list[str] = []
    seeds: list[int] = []
    pages = load_pages()
    for paper in PAPERS:
        for arm, seed in runs_of(pages[paper], RECORDS) if paper in pages else []:
            arms += [arm] if arm not in arms else []
            seeds += [seed] if seed not in seeds else []
    return arms, seeds


def pretrain(arm: Arm, seed: int, out: Path, budget: list[str], jobs: JobLog) -> Path:
    """The encoder of ``arm`` at ``seed``, trained unless a finished run is there (its ``train-summary.json``)."""
    run_dir = out / "pretrain" / f"{arm.encoder}-s{seed}"
    if (run_dir / "train-summary.json").is_file():
        return run_dir
    command = [sys.executable, "-m", "infolm", "train", arm.config, f"run.dir={run_dir}", f"run.seed={seed}"]
    printed = jobs.run(run_dir, [*command, *budget, *arm.overrides, "--json"], DRIVER)
    if printed:
        (run_dir / "train-summary.json").write_text(printed.strip().splitlines()[-1] + "\n")
    return run_dir


def finetune(arm: Arm, seed: int, encoder: Path, out: Path, seeds: list[int], extra: list[str], jobs: JobLog) -> Path:
    """``arm``'s fine-tuning of ``encoder`` over ``seeds``, unless its summary over those seeds is there."""
    run_dir = out / "finetune" / f"{arm.name}-s{seed}"
    summary = run_dir / "summary.json"
    if summary.is_file() and json.loads(summary.read_text()).get("seeds") == seeds:
        return run_dir
    command = [sys.executable, "-m", "infolm", "finetune", "--seeds", ",".join(map(str, seeds))]
    command += [f"configs/cola/finetune-{arm.finetune}.yaml", f"run.init_from={encoder}", f"run.dir={run_dir}"]
    jobs.run(run_dir, [*command, *extra], DRIVER)
    return run_dir


def archive(arm: Arm, seed: int, encoder: Path, tuned: Path, records: Path, jobs: JobLog) -> Path:
    """``records/<arm>-s<seed>``: the encoder's small files and the fine-tuning's summary, configuration and
    logs, with both runs' jobs. The record is named after the arm, not the pretraining run that arms of one
    encoder share: ``archive_run`` names a record after the folder it is given, so it is given a link of
    the arm's name to the pretraining run."""
    name = f"{arm.name}-s{seed}"
    staging = tuned / ".record"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    extra = {"finetune-summary.json": tuned / "summary.json"}
    ft_seeds = json.loads((tuned / "summary.json").read_text())["seeds"]
    first = tuned / f"seed-{ft_seeds[0]}" / "config.yaml"
    if first.is_file():
        extra["finetune-config.yaml"] = first
    for ft_seed in ft_seeds:
        log = tuned / f"seed-{ft_seed}" / "metrics.jsonl"
        if log.is_file():
            extra[f"finetune-seed-{ft_seed}.jsonl"] = log
    link = staging / name
    link.symlink_to(encoder.resolve(), target_is_directory=True)
    meta = {
        "arm": arm.name,
        "seed": seed,
        "finetune_seeds": ft_seeds,
        "finetune_source": str(tuned.resolve()),
        # the fine-tuning first: its command names the arm's variant and its encoder (pages show the first job)
        "jobs": [{"key": "finetune", **job} for job in jobs.of(tuned)]
        + [{"key": "pretrain", **job} for job in jobs.of(encoder)],
    }
    try:
        return archive_run(link, records, meta=meta, extra=extra)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/encoders-cola", help="run directories (pretrain/, finetune/)")
    parser.add_argument("--records", default=f"experiments/records/{RECORDS}", help="where the records go")
    parser.add_argument("--arms", nargs="+", default=None, help="default: every arm of the protocols")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="pretraining seeds (default: protocols')")
    parser.add_argument("--finetune-seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    # 12 epochs: the budget the pretraining-budget pilot picks (encoders_budget.py; the InfoWord page's rule)
    parser.add_argument("--epochs", type=int, default=12, help="pretraining epochs of the text, every encoder")
    parser.add_argument("--steps", type=int, default=None, help="at most this many updates (default: no cap)")
    parser.add_argument(
        "--extra-train",
        nargs="*",
        default=["tinyshakespeare"],
        help="registered text datasets added to PTB's pretraining text (task.extra_train); none: PTB alone",
    )
    parser.add_argument(
        "--finetune-lr",
        type=float,
        default=3e-4,
        help="fine-tuning peak learning rate (App. B's grid, 5e-6..5e-5, leaves this encoder at the majority class)",
    )
    parser.add_argument("--pretrain-set", nargs="*", default=[], metavar="KEY=VALUE", help="more pretraining overrides")
    parser.add_argument("--finetune-set", nargs="*", default=[], metavar="KEY=VALUE", help="more fine-tuning overrides")
    parser.add_argument("--dry-run", action="store_true", help="print the commands; run and archive nothing")
    args = parser.parse_args(argv)

    protocol_arms, protocol_seeds = protocol_runs()
    arms = [recipe(name) for name in (args.arms or protocol_arms)]
    seeds = args.seeds if args.seeds is not None else protocol_seeds
    out, records = ROOT / args.out, ROOT / args.records
    jobs = JobLog(out, args.dry_run)
    budget = [f"train.epochs={args.epochs}", f"train.max_steps={'null' if args.steps is None else args.steps}"]
    if args.extra_train:
        budget.append(f"task.extra_train=[{','.join(args.extra_train)}]")
    budget += args.pretrain_set
    tuning = [f"optim.lr={args.finetune_lr}", *args.finetune_set]

    for seed in seeds:  # one seed at a time, so that a stopped invocation leaves whole seeds
        for arm in arms:
            if is_record(records / f"{arm.name}-s{seed}"):
                print(f"{arm.name}-s{seed}: recorded in {records}")
                continue
            encoder = pretrain(arm, seed, out, budget, jobs)
            tuned = finetune(arm, seed, encoder, out, args.finetune_seeds, tuning, jobs)
            if not args.dry_run:
                print(f"archived {archive(arm, seed, encoder, tuned, records, jobs)}")


if __name__ == "__main__":
    main()
