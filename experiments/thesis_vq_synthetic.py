"""The VQ-VAE curve of Melis's thesis Fig. 5.15 (App. 5.A) on the synthetic task at a CPU scale.

A VQ-VAE's KL cost is D ln K, fixed by its D latents of K codes, so its NLL-vs-MI curve is a set of
(D, K) points (the thesis tunes D in 1-8 and K in 2-20, Table 5.2, with β and the EMA decay; here β
and the decay stay at ``configs/synthetic/vq-vae.yaml``'s). Each point is ``infolm train`` on that
config (1,000 symbols, 1,000 steps, lr 3e-3: the scale of ``configs/synthetic/cpu-*.yaml``, so the
points sit beside ``experiments/thesis_fig5_synthetic.py``'s) with D and K set; its final IWAE-100 NLL
and MI (exactly D ln K) over all 1,000 symbols are the point. ``infolm pareto`` then keeps the frontier
and writes ``OUT/pareto/pareto.{csv,png}``. A finished run is not trained again.

    OMP_NUM_THREADS=1 python experiments/thesis_vq_synthetic.py --out runs/thesis-vq-synthetic
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

from infolm.training.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/synthetic/vq-vae.yaml"
# (D, K): D ln K = 1.10, 2.08, 3.00, 4.16, 5.42, 6.91 nats, spanning the MI range of Figs. 5.3 and 5.6 at 1,000 symbols
POINTS = ["1:3", "1:8", "1:20", "2:8", "2:15", "3:10"]


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
    parser.add_argument("--steps", type=int, default=1000, help="training steps of every point")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = Path(args.out)
    summary = []
    for latents, categories in map(parse_point, args.points):
        run = out / f"vq-d{latents}-k{categories}-s{args.seed}"
        if final_evaluation(run, args.steps) is None:
            overrides = [
                f"run.dir={run}",
                f"run.seed={args.seed}",
                f"model.vq_latents={latents}",
                f"model.vq_categories={categories}",
                f"train.max_steps={args.steps}",
                f"train.epochs={args.steps}",  # the step limit ends the run
                f"train.eval_every={args.steps}",
            ]
            command = [sys.executable, "-m", "infolm", "train", CONFIG, *overrides]
            done = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{run}: training failed: {done.stderr.strip().splitlines()[-1:]}")
        record = final_evaluation(run, args.steps)
        assert record is not None, run
        point = {"latents": latents, "categories": categories, "rate": latents * math.log(categories)}
        summary.append({**point, "nll": record["loss"], "mi": record["mi"], "run": str(run)})
        print(json.dumps(summary[-1]))
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    runs = [entry["run"] for entry in summary]
    pareto = [sys.executable, "-m", "infolm", "pareto", *runs, "--out", str(out / "pareto"), "--optimum"]
    subprocess.run([*pareto, str(math.log(1000))], cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
