"""The VQ-VAE curve of Melis's thesis Fig. 5.15 (App. 5.A) on the synthetic task at a CPU scale.

A VQ-VAE's KL cost is D ln K, fixed by its D latents of K codes, so its NLL-vs-MI curve is a set of
(D, K) points (the thesis tunes D in 1-8 and K in 2-20, Table 5.2, with β and the EMA decay; here β
and the decay stay at ``configs/synthetic/vq-vae.yaml``'s). Each point is ``infolm train`` on that
config (1,000 symbols, 1,000 steps, lr 3e-3: the scale of ``configs/synthetic/cpu-*.yaml``, so the
points sit beside ``experiments/thesis_fig5_synthetic.py``'s) with D and K set; its final IWAE-100 NLL
and MI (exactly D ln K) over all 1,000 symbols are the point. ``infolm pareto`` then keeps the frontier
and writes ``OUT/pareto/pareto.{csv,png}``. A finished run is not trained again.

    OMP_NUM_THREADS=1 python experiments/thesis_vq_synthetic.py --out runs/thesis-vq-synthetic

``--schedule converged`` trains each point on the converged schedule of ``thesis_fig5_synthetic.py``
(30,000 steps, the lr x0.8 per epoch after epoch 64, an evaluation every 1,000 steps), so that its points
sit on the Fig. 5.3 frontiers' plot; ``--seeds`` repeats each point; ``--archive DIR`` copies every
finished run's small files (no weights) into ``DIR/vq-dD-kK-sS/`` with the command and wall time.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

from infolm.training.metrics import read_metrics
from infolm.training.records import archive_run, is_record

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/synthetic/vq-vae.yaml"
# (D, K): D ln K = 1.10, 2.08, 3.00, 4.16, 5.42, 6.91 nats, spanning the MI range of Figs. 5.3 and 5.6 at 1,000 symbols
POINTS = ["1:3", "1:8", "1:20", "2:8", "2:15", "3:10"]
# name -> (steps, the epoch after which the lr decays x0.8 per epoch; 0: constant lr), as thesis_fig5_synthetic.py
SCHEDULES: dict[str, tuple[int, int]] = {"short": (1000, 0), "converged": (30000, 64)}


def parse_point(text: str) -> tuple[int, int]:
    latents, _, categories = text.partition(":")
    if not (latents.isdigit() and categories.isdigit()):
        raise SystemExit(f"a point is D:K (latents:categories), got {text!r}")
    return int(latents), int(categories)


def final_evaluation(run: Path, steps: int) -> dict | None:
    """The run's evaluation record at ``steps`` (None: not trained that far)."""
    if not (run / "metrics.jsonl").is_file():
        return None
    records = [r for r in read_metrics(run / "metrics.jsonl") if "mi" in r and r.get("step") == steps]
    return records[-1] if records else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/thesis-vq-synthetic", help="run directories and the frontier")
    parser.add_argument("--points", nargs="+", default=POINTS, help="D:K pairs (latents:categories)")
    parser.add_argument("--schedule", default="short", choices=list(SCHEDULES), help="steps and lr annealing")
    parser.add_argument("--steps", type=int, default=0, help="override the schedule's steps")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--archive", default="", help="copy every finished run's record into this folder")
    args = parser.parse_args()
    steps, anneal_epoch = SCHEDULES[args.schedule]
    steps = args.steps or steps
    out = Path(args.out)
    summary = []
    for seed in args.seeds:
        for latents, categories in map(parse_point, args.points):
            name = f"vq-d{latents}-k{categories}-s{seed}"
            run, record_dir = out / name, Path(args.archive) / name if args.archive else None
            if record_dir is not None and is_record(record_dir) and not run.is_dir():
                run = record_dir  # archived earlier: read, not trained again
            meta: dict = {}
            if final_evaluation(run, steps) is None:
                overrides = [
                    f"run.dir={run}",
                    f"run.seed={seed}",
                    f"model.vq_latents={latents}",
                    f"model.vq_categories={categories}",
                    f"train.max_steps={steps}",
                    f"train.epochs={steps}",  # the step limit ends the run
                    f"train.eval_every={steps if not anneal_epoch else 1000}",
                ]
                if anneal_epoch:  # constant lr, then x0.8 at the end of every epoch after anneal_epoch
                    overrides += ["optim.schedule=step", "optim.decay=0.8", f"optim.decay_start_epoch={anneal_epoch}"]
                    # as thesis_fig5_synthetic.py's long runs: a blow-up at lr 3e-3 (D:K 2:15 at step 3,515)
                    # restarts from the best checkpoint with the lr x0.9, where the thesis tunes the lr
                    overrides += ["train.divergence.enabled=true"]
                command = [sys.executable, "-m", "infolm", "train", CONFIG, *overrides]
                start = time.time()
                done = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"{run}: training failed: {done.stderr.strip().splitlines()[-1:]}")
                meta = {"command": " ".join(command), "wall_s": round(time.time() - start, 1)}
            record = final_evaluation(run, steps)
            assert record is not None, run
            if record_dir is not None and not is_record(run):
                archive_run(run, args.archive, {"driver": "thesis_vq_synthetic.py", **meta})
            point = {"latents": latents, "categories": categories, "seed": seed, "rate": latents * math.log(categories)}
            summary.append({**point, "nll": record["loss"], "mi": record["mi"], "run": str(run)})
            print(json.dumps(summary[-1]), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    runs = [entry["run"] for entry in summary]
    pareto = [sys.executable, "-m", "infolm", "pareto", *runs, "--out", str(out / "pareto"), "--at", "last"]
    subprocess.run([*pareto, "--optimum", str(math.log(1000))], cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
