"""Figs. 5.3 and 5.6 of Melis's thesis at a CPU scale: NLL-vs-MI frontiers on the synthetic task.

Continuous latents (Fig. 5.3): ELBO (β-VAE with analytic KL, Prop. 13), DReG 1 (KL and Rényi are the
same objective with one draw, Props. 11-12), DReG 16 with the KL objective and with the Rényi
objective. Fig. 5.4 (``--figures fig5_4_asymmetric``): 16 draws for ln p(x) and one for the MI term,
and the reverse. Discrete latents (Fig. 5.6): REINFORCE 1 (VIMCO 1), VIMCO 16 KL and VIMCO 16 Rényi;
Fig. 5.7 (``--figures fig5_7_asymmetric_discrete``): VIMCO 16/1 and 1/16, KL and Rényi. The power
objective (App. 5.B.3, Figs. 5.26 and 5.27: ``--figures fig5_26_power_continuous fig5_27_power_discrete``)
against the KL and Rényi objectives, with DReG 16 and with VIMCO 16; its one knob α is set from each λ
of ``--lams`` by the power objective's tie λ = (α - 1)/α (Definition 6), so the three curves sweep the
same MI weights. Each
curve is one run per λ of ``--lams``; every run is ``infolm train`` on ``configs/synthetic/cpu-*.yaml``
(1,000 symbols, 1,000 steps, lr 3e-3: the scale is stated there) with the objective replaced, and its
final IWAE-100 NLL and MI over all 1,000 symbols are its point. ``infolm pareto`` then keeps each
curve's frontier and writes ``OUT/<figure>/pareto.{csv,png}``; the PNGs are copied to ``docs/img/``.

    OMP_NUM_THREADS=1 python experiments/thesis_fig5_synthetic.py --out runs/thesis-fig5-synthetic

Reruns skip finished runs (the trainer resumes cut-off ones). ``OUT/summary.json`` (with
``--figures``: ``OUT/summary-<figures>.json``) has every point,
the command of every run and its wall time. No point's NLL may lie below ln 1,000 = 6.9078 (beyond
Monte Carlo error): the split holds every symbol once, so its mean NLL is an expectation that
Gibbs' inequality bounds by the entropy.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from infolm.latent.pareto import frontier as pareto_frontier
from infolm.training.checkpoint import write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
OPTIMUM = math.log(1000)


def asymmetric_vimco(
    objective: str, draws: tuple[int, int], extra: dict[str, Any]
) -> Callable[[float], dict[str, Any]]:
    """VIMCO with draws[0] draws for ln p(x) and draws[1] for the MI term (Fig. 5.7)."""
    likelihood, mi = draws
    return lambda lam: {objective: {"estimator": "vimco", "samples": likelihood, "mi_samples": mi, "lam": lam, **extra}}


# figure -> (base config, [(curve label, objective section)])
Curve = tuple[str, Callable[[float], dict[str, Any]]]
FIGURES: dict[str, tuple[str, list[Curve]]] = {
    "fig5_3_continuous": (
        "configs/synthetic/cpu-gaussian.yaml",
        [
            ("ELBO", lambda lam: {"mi-kl": {"estimator": "elbo", "samples": 1, "lam": lam}}),
            ("DReG 1", lambda lam: {"mi-kl": {"estimator": "dreg", "samples": 1, "lam": lam}}),
            ("DReG 16 KL", lambda lam: {"mi-kl": {"estimator": "dreg", "samples": 16, "lam": lam}}),
            ("DReG 16 Rényi", lambda lam: {"mi-renyi": {"estimator": "dreg", "samples": 16, "lam": lam, "alpha": 2.0}}),
        ],
    ),
    "fig5_4_asymmetric": (
        "configs/synthetic/cpu-gaussian.yaml",
        [
            ("DReG 16/1 KL", lambda lam: {"mi-kl": {"estimator": "dreg", "samples": 16, "mi_samples": 1, "lam": lam}}),
            ("DReG 1/16 KL", lambda lam: {"mi-kl": {"estimator": "dreg", "samples": 1, "mi_samples": 16, "lam": lam}}),
        ],
    ),
    "fig5_7_asymmetric_discrete": (
        "configs/synthetic/cpu-categorical.yaml",
        [
            (f"VIMCO {counts} {name}", asymmetric_vimco(objective, draws, extra))
            for name, objective, extra in (("KL", "mi-kl", {}), ("Rényi", "mi-renyi", {"alpha": 2.0}))
            for counts, draws in (("16/1", (16, 1)), ("1/16", (1, 16)))
        ],
    ),
    "fig5_6_discrete": (
        "configs/synthetic/cpu-categorical.yaml",
        [
            ("REINFORCE 1", lambda lam: {"mi-kl": {"estimator": "reinforce", "samples": 1, "lam": lam}}),
            ("VIMCO 16 KL", lambda lam: {"mi-kl": {"estimator": "vimco", "samples": 16, "lam": lam}}),
            (
                "VIMCO 16 Rényi",
                lambda lam: {"mi-renyi": {"estimator": "vimco", "samples": 16, "lam": lam, "alpha": 2.0}},
            ),
        ],
    ),
}


def power_curves(estimator: str, name: str) -> list[Curve]:
    """KL, Rényi (α 2) and power objectives with 16 draws of ``estimator`` (Figs. 5.26-5.27)."""
    term = {"estimator": estimator, "samples": 16}
    return [
        (f"{name} 16 KL", lambda lam: {"mi-kl": {**term, "lam": lam}}),
        (f"{name} 16 Rényi", lambda lam: {"mi-renyi": {**term, "lam": lam, "alpha": 2.0}}),
        # Definition 6: the power objective is the Rényi objective with λ = (α - 1)/α, so α = 1/(1 - λ)
        (f"{name} 16 power", lambda lam: {"mi-power": {**term, "alpha": 1.0 / (1.0 - lam)}}),
    ]


FIGURES["fig5_26_power_continuous"] = ("configs/synthetic/cpu-gaussian.yaml", power_curves("dreg", "DReG"))
FIGURES["fig5_27_power_discrete"] = ("configs/synthetic/cpu-categorical.yaml", power_curves("vimco", "VIMCO"))
DEFAULT_FIGURES = ["fig5_3_continuous", "fig5_6_discrete"]


def slug(text: str) -> str:
    return text.lower().replace(" ", "-").replace("/", "-").replace("é", "e")


def run_point(base: Path, objective: dict, run_dir: Path, steps: int, seed: int) -> tuple[list[str], float]:
    config = yaml.safe_load(base.read_text())
    config["objective"] = objective
    config["run"]["dir"] = str(run_dir)
    config["run"]["seed"] = seed
    config["train"]["max_steps"] = steps
    config["train"]["eval_every"] = steps
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir.parent / f"{run_dir.name}.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    command = [sys.executable, "-m", "infolm", "train", str(config_path)]
    start = time.time()
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return command, time.time() - start


def nll_at_mi(points: list[tuple[float, float]], targets: list[float]) -> list[float | None]:
    """NLL at each MI of ``targets``, linear between the (MI, NLL) points of a curve's frontier (a point
    is dropped when another has at least its MI and a lower NLL); None outside the frontier's MI range."""
    finite = [(mi, nll) for mi, nll in points if math.isfinite(mi) and math.isfinite(nll)]  # a diverged run: no point
    frontier = sorted(point for point, kept in zip(finite, pareto_frontier(finite)) if kept)
    found: list[float | None] = []
    for target in targets:
        value = None
        for (m0, n0), (m1, n1) in zip(frontier, frontier[1:] or frontier):  # one point: itself
            if m0 <= target <= m1:
                value = n0 if m1 == m0 else n0 + (n1 - n0) * (target - m0) / (m1 - m0)
                break
        found.append(value)
    return found


def finished(run_dir: Path, steps: int) -> bool:
    log = run_dir / "metrics.jsonl"
    if not log.is_file():
        return False
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return any(r.get("step") == steps and "mi" in r for r in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/thesis-fig5-synthetic")
    parser.add_argument("--lams", type=float, nargs="+", default=[0.0, 0.3, 0.5, 0.65, 0.8, 0.95])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--figures", nargs="+", default=DEFAULT_FIGURES, choices=list(FIGURES))
    parser.add_argument("--docs-img", default="docs/img", help="where the PNGs are copied ('' : nowhere)")
    args = parser.parse_args()
    if any(not math.isfinite(lam) or lam >= 1.0 for lam in args.lams):
        raise SystemExit(f"--lams must be finite and below 1 (the objectives' λ < 1), got {args.lams}")
    out = Path(args.out)
    summary: dict = {"optimum": OPTIMUM, "steps": args.steps, "lams": args.lams, "runs": []}
    # λ outermost: every curve of every figure gets its spread of points before any gets more
    for lam in args.lams:
        for figure in args.figures:
            base, curves = FIGURES[figure]
            for label, objective in curves:
                run_dir = out / figure / f"{slug(label)}-lam{lam:g}"
                record = {"figure": figure, "curve": label, "lam": lam, "run": str(run_dir)}
                if not finished(run_dir, args.steps):
                    command, seconds = run_point(ROOT / base, objective(lam), run_dir, args.steps, args.seed)
                    record.update(command=" ".join(command), wall_s=round(seconds, 1))
                    print(f"{figure} {label} λ={lam:g}: {seconds:.0f} s", flush=True)
                summary["runs"].append(record)
    for figure in args.figures:
        runs = [r["run"] for r in summary["runs"] if r["figure"] == figure]
        pareto = [sys.executable, "-m", "infolm", "pareto", *runs, "--out", str(out / figure),
                  "--nll-key", "loss", "--mi-key", "mi", "--optimum", f"{OPTIMUM:.4f}"]  # fmt: skip
        subprocess.run(pareto, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        if args.docs_img:
            Path(args.docs_img).mkdir(parents=True, exist_ok=True)
            shutil.copy(out / figure / "pareto.png", Path(args.docs_img) / f"thesis_{figure}.png")
    for record in summary["runs"]:
        log = Path(record["run"]) / "metrics.jsonl"
        last = [json.loads(line) for line in log.read_text().splitlines() if '"mi"' in line][-1]
        record.update(nll=last["loss"], mi=last["mi"], kl=last.get("kl"))
    name = "summary.json" if args.figures == DEFAULT_FIGURES else f"summary-{'-'.join(args.figures)}.json"
    if (out / name).is_file():  # runs trained by an earlier call keep the command and wall time recorded then
        earlier = {r["run"]: r for r in json.loads((out / name).read_text()).get("runs", [])}
        for record in summary["runs"]:
            if "wall_s" not in record and "wall_s" in earlier.get(record["run"], {}):
                record.update(command=earlier[record["run"]]["command"], wall_s=earlier[record["run"]]["wall_s"])
    write_json_atomic(out / name, summary)
    for r in summary["runs"]:
        point = f"NLL {r['nll']:.4f}  MI {r['mi']:.3f}  KL {r['kl']:.3f}"
        print(f"{r['figure']:18s} {r['curve']:16s} λ={r['lam']:<5g} {point}")
    targets = [1.0, 2.0, 3.0, 4.0, 5.0]
    print("\nNLL at MI = " + " / ".join(f"{t:g}" for t in targets) + " nats, linear along each curve's frontier:")
    for figure in args.figures:
        for label, _ in FIGURES[figure][1]:
            points = [(r["mi"], r["nll"]) for r in summary["runs"] if r["figure"] == figure and r["curve"] == label]
            cells = " / ".join("–" if v is None else f"{v:.3f}" for v in nll_at_mi(points, targets))
            print(f"{figure:18s} {label:16s} {cells}")


if __name__ == "__main__":
    main()
