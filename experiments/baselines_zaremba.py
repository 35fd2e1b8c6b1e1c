"""Zaremba et al. (2014), the small LSTM on PTB: trained, scored and kept as records.

Each run trains ``configs/ptb/lstm-small.yaml`` (2x200 LSTM, no dropout, 13 epochs, the paper's recipe
in per-token-mean units) with its seed, then scores the final weights on the full valid and test splits
(``infolm evaluate``, every token counted, ``<eos>`` included). Its record, in
``experiments/records/baselines-zaremba/<arm>-s<seed>/``, keeps the config, the training log, the
summary, ``eval-valid.json`` and ``eval-test.json``, and ``record.json`` with each command, its wall
time, the commit and the machine; no weights. The arms and seeds are those that
``experiments/protocols/baselines.yaml`` reads from that folder. A recorded run is not trained again; a
cut run resumes from its run directory (``--out``, default ``runs/baselines-zaremba``). Runs with
``--set`` overrides are not the protocol's and are archived only into an explicit ``--records``::

    OMP_NUM_THREADS=1 python experiments/baselines_zaremba.py --seeds 0     # about 1-2 hours on one core
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the protocols' package
from experiments.reproduce.jobs import run_command  # noqa: E402
from experiments.reproduce.protocol import load_protocol, runs_of  # noqa: E402
from experiments.reproduce.provenance import git_commit, machine_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FOLDER = "baselines-zaremba"
RECORDS = ROOT / "experiments" / "records" / FOLDER
CONFIGS = {"lstm-small": "configs/ptb/lstm-small.yaml"}  # arm -> config


def protocol_runs() -> list[tuple[str, int]]:
    """The (arm, seed) pairs that the baselines protocol reads from this driver's records."""
    return runs_of(load_protocol("baselines"), records=FOLDER)


def run_job(run: str, arm: str, seed: int, command: list[str], out: Path | None = None) -> dict[str, Any]:
    """Run an ``infolm ... --json`` command (its last output line to ``out`` if given); the job's record."""
    done = run_command(command)
    if done.rc != 0:
        sys.exit(done.failure())
    if out is not None:
        out.write_text(json.dumps(done.result(), indent=1) + "\n")
    return done.entry(run=run, arm=arm, seed=seed)


def train_and_score(arm: str, seed: int, out: Path, records: Path | None, overrides: list[str]) -> None:
    from infolm.training.records import archive_run

    name = f"{arm}-s{seed}"
    run = out / name
    if run.resolve().is_relative_to(ROOT):  # the commands run in ROOT: the record shows no machine's path
        run = run.resolve().relative_to(ROOT)
    infolm = [sys.executable, "-m", "infolm"]
    train = [*infolm, "train", CONFIGS[arm], f"run.dir={run}", f"run.seed={seed}", "train.progress=false", *overrides]
    jobs = [run_job(name, arm, seed, [*train, "--json"])]
    for split in ("valid", "test"):
        command = [*infolm, "evaluate", str(run), "--split", split, "--json"]
        jobs.append(run_job(name, arm, seed, command, ROOT / run / f"eval-{split}.json"))
    scores = {split: json.loads((ROOT / run / f"eval-{split}.json").read_text())["ppl"] for split in ("valid", "test")}
    print(f"{name}: valid {scores['valid']:.2f} test {scores['test']:.2f}", flush=True)
    if records is None:
        print(f"{name}: run with --set overrides, not archived (give --records to keep it)", flush=True)
        return

    machine = machine_line()
    meta = {"driver": "baselines_zaremba.py", "commit": git_commit(), "machine": machine, "jobs": jobs}
    print(f"{name}: archived in {archive_run(ROOT / run, records, meta)}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="+", default=None, choices=sorted(CONFIGS), help="default: the protocol's")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: the protocol's")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / FOLDER, help="run directories")
    parser.add_argument("--records", type=Path, default=None, help="default: experiments/records/baselines-zaremba")
    parser.add_argument("--set", nargs="*", default=[], help="KEY=VALUE overrides of every run (not archived)")
    args = parser.parse_args(argv)
    records = args.records if args.records is not None else (None if args.set else RECORDS)
    for arm, seed in protocol_runs():
        if (args.arms and arm not in args.arms) or (args.seeds is not None and seed not in args.seeds):
            continue
        if arm not in CONFIGS:
            sys.exit(f"error: the protocol's arm {arm!r} is none of this driver's ({', '.join(CONFIGS)})")
        if records is not None and (records / f"{arm}-s{seed}" / "record.json").is_file():
            print(f"{arm}-s{seed}: recorded, skipped", flush=True)
            continue
        train_and_score(arm, seed, args.out, records, args.set)


if __name__ == "__main__":
    main()
