"""Kong et al. Table 2 (CoLA column: BERT-NCE vs InfoWord) and the IMM paper's Table 3 (CoLA: fine-tuning
alone, +MLM, +MLM+IMM) at the scale of a 2-core CPU.

Pretraining (``infolm train``), same budget for every encoder (``--epochs`` of PTB's training text plus
any ``--extra-train`` datasets, at most ``--steps`` optimizer steps of the config's batch):

* ``bert-nce``: ``configs/ptb/bert-nce.yaml`` (MLM with in-batch negatives, span masking);
* ``infoword-L``: ``configs/ptb/infoword.yaml`` with λ_DIM = L for each ``--lambdas`` value;
* ``bert-mlm``: ``configs/ptb/bert-mlm.yaml`` (full-softmax MLM, token masking), for Table 3.

Fine-tuning (``infolm finetune``, ``--seeds``, selection on the held-out part of CoLA's train,
reported on CoLA's public in-domain dev set):

* Table 2: ``configs/cola/finetune-base.yaml`` from ``bert-nce`` and from each ``infoword-L``;
* Table 3: ``configs/cola/finetune-{base,mlm,imm}.yaml`` from ``--table3-encoder`` (default bert-mlm).

    OMP_NUM_THREADS=1 python experiments/encoders_cola.py --out runs/encoders-cola
    OMP_NUM_THREADS=1 python experiments/encoders_cola.py --out runs/encoders-cola-e6 --epochs 6 --steps 1500 \
        --finetune-lr 3e-4 --tables 3 2     # the budget of the tables in docs/results.md
    OMP_NUM_THREADS=1 python experiments/encoders_cola.py --out runs/encoders-cola-ts --epochs 6 --steps 3000 \
        --finetune-lr 3e-4 --extra-train tinyshakespeare --tables 2   # PTB plus Tiny Shakespeare

Table 2 takes one encoder at a time (pretraining, then its fine-tuning seeds). Writes
``OUT/results.json`` (commands, wall times, every summary; an earlier invocation's entries are kept)
after every fine-tuning and prints both tables (markdown; ``--print-only`` prints them from
``OUT/results.json`` alone). Finished runs are reused: rerunning the command continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAPER_TABLE2 = {"BERT-NCE": 50.8, "InfoWord": 53.3}  # Kong et al. Table 2, BASE, CoLA (test, MCC x 100)
PAPER_TABLE3 = {"base": "52.1 ± 4.0", "mlm": "55.0 ± 3.0", "imm": "60.0 ± 1.0"}  # IMM Table 3, CoLA, BERT-base


def run(command: list[str], log: list[dict[str, Any]]) -> None:
    print("$", shlex.join(command), flush=True)
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True)
    log.append({"command": shlex.join(command), "wall_s": round(time.perf_counter() - start, 1)})


def pretrain(name: str, config: str, out: Path, budget: list[str], extra: list[str], log: list[dict[str, Any]]) -> Path:
    run_dir = out / "pretrain" / name
    command = [sys.executable, "-m", "infolm", "train", config, f"run.dir={run_dir}", *budget]
    run([*command, *extra], log)
    return run_dir


def finetune(
    name: str, variant: str, encoder: Path, seeds: list[int], out: Path, extra: list[str], log: list[dict[str, Any]]
) -> dict[str, Any]:
    run_dir = out / "finetune" / f"{name}-{variant}"
    seed_args = ["--seeds", ",".join(map(str, seeds))]
    command = [sys.executable, "-m", "infolm", "finetune", *seed_args, f"configs/cola/finetune-{variant}.yaml"]
    run([*command, f"run.init_from={encoder}", f"run.dir={run_dir}", *extra], log)
    return json.loads((run_dir / "summary.json").read_text())


def cell(summary: dict[str, Any], split: str, metric: str = "mcc", scale: float = 100.0, digits: int = 1) -> str:
    stats = summary["summary"][split][metric]
    return f"{scale * stats['mean']:.{digits}f} ± {scale * stats['std']:.{digits}f}"


def fine_tuning_cells(summary: dict[str, Any]) -> str:
    """Seeds, held-out and public-dev MCC x 100 (mean ± std), public-dev MCC per seed, public-dev accuracy."""
    seeds = ",".join(map(str, summary["seeds"]))
    per_seed = ", ".join(f"{100 * summary['per_seed'][str(seed)]['test']['mcc']:.2f}" for seed in summary["seeds"])
    accuracy = cell(summary, "test", "accuracy", 1.0, 3)
    return f"{seeds} | {cell(summary, 'valid')} | {cell(summary, 'test')} | {per_seed} | {accuracy}"


def pretraining_cell(run_dir: Path) -> str:
    """The validation of the weights fine-tuning starts from (best/: the lowest full-softmax MLM loss):
    nats per masked subword / masked accuracy."""
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        return "–"
    lines = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    valid = [line for line in lines if line.get("split") == "valid"]
    if not valid:
        return "–"
    best = min(valid, key=lambda line: line["loss"])
    return f"{best['loss']:.3f} / {100 * best['accuracy']:.1f}%"


def print_tables(results: dict[str, Any], out: Path, table3_encoder: str) -> None:
    """Both tables as markdown, from OUT/results.json and the pretraining runs' metrics."""
    columns = "seeds | valid (held out) | test (public dev) | per seed, test | test accuracy"
    if results.get("table2"):
        print(f"\n| encoder | pretraining valid: MLM nats / masked accuracy | {columns} | paper (GLUE test, BASE) |")
        print("| --- " * 8 + "|")
        for name, summary in results["table2"].items():
            paper = PAPER_TABLE2["BERT-NCE" if name == "bert-nce" else "InfoWord"]
            pretrained = pretraining_cell(out / "pretrain" / name)
            print(f"| {name} | {pretrained} | {fine_tuning_cells(summary)} | {paper} |")
    if results.get("table3"):
        print(f"\nencoder {table3_encoder}, pretraining valid: {pretraining_cell(out / 'pretrain' / table3_encoder)}")
        print(f"| fine-tuning | {columns} | paper (BERT-base, CoLA) |")
        print("| --- " * 7 + "|")
        for variant, summary in results["table3"].items():
            print(f"| {variant} | {fine_tuning_cells(summary)} | {PAPER_TABLE3[variant]} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/encoders-cola")
    parser.add_argument("--epochs", type=int, default=1, help="pretraining epochs of PTB for every encoder")
    parser.add_argument("--steps", type=int, default=600, help="at most this many pretraining optimizer steps")
    parser.add_argument(
        "--extra-train",
        nargs="+",
        default=[],
        help="registered text datasets added to PTB's pretraining text (task.extra_train), e.g. tinyshakespeare",
    )
    parser.add_argument(
        "--finetune-lr",
        type=float,
        default=None,
        help="fine-tuning peak learning rate (default: the configs' 5e-5, the top of App. B's grid)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument(
        "--lambdas",
        type=float,
        nargs="+",
        default=[1.0, 0.8, 0.6, 0.4],
        help="λ_DIM values, run in this order (App. B's grid)",
    )
    parser.add_argument("--table3-encoder", default="bert-mlm", help="bert-mlm, or bert-nce to reuse it")
    parser.add_argument("--tables", nargs="+", default=["2", "3"], choices=["2", "3"], help="run in this order")
    parser.add_argument("--print-only", action="store_true", help="print the tables of OUT/results.json; run nothing")
    args = parser.parse_args()
    out = ROOT / args.out
    if args.print_only:
        if not (out / "results.json").is_file():
            sys.exit(f"encoders_cola.py: no results in {out} (run without --print-only first)")
        print_tables(json.loads((out / "results.json").read_text()), out, args.table3_encoder)
        return
    log: list[dict[str, Any]] = []
    results: dict[str, Any] = {"machine": f"{platform.machine()}, {platform.processor() or 'cpu'}", "runs": log}
    if (out / "results.json").is_file():  # an earlier invocation's tables and commands are kept
        earlier = json.loads((out / "results.json").read_text())
        log[:0] = earlier.get("runs", [])
        results.update({key: earlier[key] for key in ("table2", "table3") if key in earlier})
    encoders: dict[str, Path] = {}
    budget = [f"train.epochs={args.epochs}", f"train.max_steps={args.steps}"]
    if args.extra_train:
        budget.append(f"task.extra_train=[{','.join(args.extra_train)}]")
    tuning = [] if args.finetune_lr is None else [f"optim.lr={args.finetune_lr}"]
    results["settings"] = {
        "epochs": args.epochs,
        "steps": args.steps,
        "finetune_lr": args.finetune_lr,
        "extra_train": args.extra_train,
    }

    def save() -> None:
        (out / "results.json").write_text(json.dumps(results, indent=1))

    def table2() -> None:
        # One encoder at a time, pretrained then fine-tuned, so that a stopped run leaves whole rows.
        rows: dict[str, Any] = results.setdefault("table2", {})
        plan: list[tuple[str, str, list[str]]] = [("bert-nce", "configs/ptb/bert-nce.yaml", [])]
        plan += [(f"infoword-{v:g}", "configs/ptb/infoword.yaml", [f"objective.dim.weight={v}"]) for v in args.lambdas]
        for name, config, extra in plan:
            encoders[name] = pretrain(name, config, out, budget, extra, log)
            rows[name] = finetune(name, "base", encoders[name], args.seeds, out, tuning, log)
            save()

    def table3() -> None:
        name = args.table3_encoder
        if name not in encoders:
            config = "configs/ptb/bert-mlm.yaml" if name == "bert-mlm" else "configs/ptb/bert-nce.yaml"
            encoders[name] = pretrain(name, config, out, budget, [], log)
        variants: dict[str, Any] = results.setdefault("table3", {})
        for variant in ("base", "mlm", "imm"):
            variants[variant] = finetune(name, variant, encoders[name], args.seeds, out, tuning, log)
            save()

    for table in args.tables:  # in the order given
        {"2": table2, "3": table3}[table]()
    save()
    print_tables(results, out, args.table3_encoder)


if __name__ == "__main__":
    main()
