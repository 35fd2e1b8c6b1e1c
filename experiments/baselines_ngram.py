"""Kneser-Ney n-gram baselines on PTB: the KN bigram of the IMM paper's Table 1 and the KN 5-gram.

Each arm builds an interpolated modified Kneser-Ney model on PTB's training split with
``infolm ngram build`` and scores train, valid and test with ``infolm ngram eval`` (every token
counted, ``<eos>`` included; the first token of a split predicted from ``<eos>``). The models are
deterministic, so an arm has one run, seed 0. The ARPA files are models and stay out of the
repository: they are written to ``--work`` (default ``runs/baselines-ngram``) and deleted unless
``--keep-arpa``. What is kept is a record per run in ``experiments/records/baselines-ngram/<arm>-s0/``:

* ``build.json``: the build's summary (n-gram counts, discounts, build seconds);
* ``eval-train.json``, ``eval-valid.json``, ``eval-test.json``: perplexity, NLL and token count;
* ``record.json``: the commands, their wall time, the commit and the machine.

The arms and seeds are read from ``experiments/protocols/baselines.yaml`` (its ``records:
baselines-ngram`` comparison); each arm's order and smoothing are below. A recorded arm is not
built again unless ``--force``::

    OMP_NUM_THREADS=1 python experiments/baselines_ngram.py            # every arm of the protocol
    OMP_NUM_THREADS=1 python experiments/baselines_ngram.py --arms kn5 --force
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the protocols' package
from experiments.reproduce.jobs import run_command, shown  # noqa: E402
from experiments.reproduce.protocol import load_protocol, runs_of  # noqa: E402
from experiments.reproduce.provenance import git_commit, machine_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FOLDER = "baselines-ngram"  # the protocol's ``records`` and the folder under experiments/records
RECORDS = ROOT / "experiments" / "records" / FOLDER
SPLITS = ("train", "valid", "test")
# arm -> (order, smoothing of ``infolm ngram build --method``)
MODELS = {"kn2": (2, "modified-kn"), "kn5": (5, "modified-kn")}


def protocol_runs() -> list[tuple[str, int]]:
    """The (arm, seed) pairs that the baselines protocol reads from this driver's records."""
    return runs_of(load_protocol("baselines"), records=FOLDER)


def run_json(command: list[str]) -> tuple[dict[str, Any], float]:
    """Run an ``infolm`` command with ``--json``; its last output line and the wall seconds."""
    done = run_command(command)
    if done.rc != 0:
        sys.exit(done.failure())
    return done.result(), done.wall_s


def build_and_score(arm: str, seed: int, work: Path, records: Path, keep_arpa: bool) -> dict[str, Any]:
    """Build ``arm``'s model, score every split, and write its record ``records/<arm>-s<seed>``."""
    order, method = MODELS[arm]
    name = f"{arm}-s{seed}"
    work.mkdir(parents=True, exist_ok=True)
    arpa = work / f"{arm}.arpa"
    if arpa.resolve().is_relative_to(ROOT):  # the commands run in ROOT: the record shows no machine's path
        arpa = arpa.resolve().relative_to(ROOT)
    infolm = [sys.executable, "-m", "infolm", "ngram"]
    build = [*infolm, "build", "--data", "ptb", "--order", str(order), "--method", method, "--out", str(arpa), "--json"]
    jobs: list[dict[str, Any]] = []
    results: dict[str, Any] = {}
    summary, wall = run_json(build)
    summary.pop("arpa", None)  # a path on the machine that built it
    jobs.append({"run": name, "arm": arm, "seed": seed, "command": shown(build), "rc": 0, "wall_s": round(wall, 2)})
    for split in SPLITS:
        command = [*infolm, "eval", str(arpa), "--data", "ptb", "--split", split, "--json"]
        results[split], wall = run_json(command)
        jobs.append(
            {"run": name, "arm": arm, "seed": seed, "command": shown(command), "rc": 0, "wall_s": round(wall, 2)}
        )
    if not keep_arpa:
        (ROOT / arpa).unlink(missing_ok=True)
    target = records / name
    staging = records / f".{name}.new"
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "build.json").write_text(json.dumps(summary, indent=1) + "\n")
    for split, result in results.items():
        (staging / f"eval-{split}.json").write_text(json.dumps(result, indent=1) + "\n")

    record = {
        "driver": "baselines_ngram.py",
        "arm": arm,
        "seed": seed,
        "order": order,
        "method": method,
        "commit": git_commit(),
        "machine": machine_line(),
        "wall_s": round(sum(job["wall_s"] for job in jobs), 2),
        "jobs": jobs,
    }
    (staging / "record.json").write_text(json.dumps(record, indent=1) + "\n")
    if target.exists():
        for path in target.iterdir():
            path.unlink()
        target.rmdir()
    staging.rename(target)
    return {split: result["ppl"] for split, result in results.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="+", default=None, choices=sorted(MODELS), help="default: the protocol's")
    parser.add_argument("--records", type=Path, default=RECORDS, help="default: experiments/records/baselines-ngram")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / FOLDER, help="where the ARPA files are written")
    parser.add_argument("--keep-arpa", action="store_true", help="keep the ARPA files in --work")
    parser.add_argument("--force", action="store_true", help="build and score recorded arms again")
    args = parser.parse_args(argv)
    runs = protocol_runs()
    if args.arms is not None:
        runs = [(arm, seed) for arm, seed in runs if arm in args.arms]
    for arm, seed in runs:
        if arm not in MODELS:
            sys.exit(f"error: the protocol's arm {arm!r} is none of this driver's ({', '.join(MODELS)})")
        if (args.records / f"{arm}-s{seed}" / "record.json").is_file() and not args.force:
            print(f"{arm}-s{seed}: recorded, skipped (--force builds it again)", flush=True)
            continue
        ppl = build_and_score(arm, seed, args.work, args.records, args.keep_arpa)
        print(f"{arm}-s{seed}: " + ", ".join(f"{split} {value:.2f}" for split, value in ppl.items()), flush=True)


if __name__ == "__main__":
    main()
