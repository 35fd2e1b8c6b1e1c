"""How long to pretrain the CoLA encoders: BERT-NCE (or any encoder arm of ``encoders_cola.py``) pretrained at
several budgets, each with its own warmup and linear decay to zero at its last update, archived with its
validation curve, so that the budget of the CoLA comparisons is the one past which masked-subword accuracy
stops improving, read from records.

Every budget is a whole number of epochs of the same pretraining text (PTB train plus ``--extra-train``) with
the same seed, so a longer run starts on the batches and masks of a shorter one; the schedule's length is the
budget (``optim.schedule: warmup-linear`` decays to zero at the run's last update), as the CoLA runs'. The
validation metrics (full-softmax masked-subword NLL and the accuracy of the most likely subword, on PTB's
validation text) are logged every ``train.eval_every`` updates; the record's last evaluation is the run's
end. The run's selected weights (lowest validation NLL) are then scored on the whole validation split
(``eval-valid.json``: the plain full-softmax reading and the prior-corrected one, ``*_prior``, which a
contrastive encoder's scores call for; ``tasks/masked_lm.py``). Each (arm, budget, seed) becomes
``RECORDS/<arm>-e<epochs>-s<seed>/`` (no weights) with the jobs' command, commit, machine and wall time;
recorded runs are skipped and a stopped run resumes when the command is run again. The table is
``python -m experiments.report infoword``.

    INFOLM_DATA_MIRROR=... OMP_NUM_THREADS=1 python experiments/encoders_budget.py --epochs 6 12 24 --seeds 0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the drivers' shared code lives in the experiments package
    sys.path.insert(0, str(ROOT))

from experiments.encoders_cola import recipe  # noqa: E402
from experiments.reproduce.jobs import JobLog  # noqa: E402
from infolm.training.records import archive_run, is_record  # noqa: E402

RECORDS = "encoders-budget"  # the protocol's record folder for these runs


def run_name(arm: str, epochs: int, seed: int) -> str:
    return f"{arm}-e{epochs}-s{seed}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/encoders-budget", help="run directories")
    parser.add_argument("--records", default=f"experiments/records/{RECORDS}", help="where the records go")
    parser.add_argument("--arms", nargs="+", default=["bert-nce"], help="encoder arms of encoders_cola.py")
    parser.add_argument("--epochs", type=int, nargs="+", default=[6, 12, 24], help="the budgets, in epochs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="pretraining seeds")
    parser.add_argument(
        "--extra-train",
        nargs="*",
        default=["tinyshakespeare"],
        help="registered text datasets added to PTB's pretraining text (as encoders_cola.py)",
    )
    parser.add_argument("--pretrain-set", nargs="*", default=[], metavar="KEY=VALUE", help="more overrides")
    parser.add_argument("--dry-run", action="store_true", help="print the commands; run and archive nothing")
    args = parser.parse_args(argv)
    if any(epochs < 1 for epochs in args.epochs):
        raise SystemExit("encoders_budget.py: --epochs takes positive numbers of epochs")

    out, records = ROOT / args.out, ROOT / args.records
    jobs = JobLog(out, args.dry_run)
    for seed in args.seeds:
        for name in args.arms:
            arm = recipe(name)
            if arm.finetune != "base":
                raise SystemExit(f"encoders_budget.py: {name} names a fine-tuning variant; give its encoder arm")
            for epochs in sorted(args.epochs):
                run = out / run_name(name, epochs, seed)
                if is_record(records / run.name):
                    print(f"{run.name}: recorded in {records}")
                    continue
                if not (run / "train-summary.json").is_file():
                    command = [
                        sys.executable,
                        "-m",
                        "infolm",
                        "train",
                        arm.config,
                        f"run.dir={run}",
                        f"run.seed={seed}",
                    ]
                    # the epochs are the budget: no update cap below them
                    command += [f"train.epochs={epochs}", "train.max_steps=null", *arm.overrides]
                    if args.extra_train:
                        command.append(f"task.extra_train=[{','.join(args.extra_train)}]")
                    printed = jobs.run(run, [*command, *args.pretrain_set, "--json"], "encoders_budget.py")
                    if not printed:
                        continue
                    (run / "train-summary.json").write_text(printed.strip().splitlines()[-1] + "\n")
                scored = run / "eval-valid.json"
                if not scored.is_file():
                    evaluate = [sys.executable, "-m", "infolm", "evaluate", str(run), "--split", "valid", "--json"]
                    printed = jobs.run(run, evaluate, "encoders_budget.py")
                    if not printed:
                        continue
                    scored.write_text(printed.strip().splitlines()[-1] + "\n")
                meta = {"arm": f"{name}-e{epochs}", "seed": seed, "epochs": epochs, "jobs": jobs.of(run)}
                print(f"archived {archive_run(run, records, meta=meta)}")


if __name__ == "__main__":
    main()
