"""Figs. 5.3 and 5.6 of Melis's thesis at a CPU scale: NLL-vs-MI frontiers on the synthetic task.

Continuous latents (Fig. 5.3): ELBO (β-VAE with analytic KL, Prop. 13), DReG 1 (KL and Rényi are the
same objective with one draw, Props. 11-12), DReG 16 with the KL objective and with the Rényi
objective. Fig. 5.4 (``--figures fig5_4_asymmetric``): 16 draws for ln p(x) and one for the MI term,
and the reverse. Discrete latents (Fig. 5.6): REINFORCE 1 (VIMCO 1), VIMCO 16 KL and VIMCO 16 Rényi;
Fig. 5.7 (``--figures fig5_7_asymmetric_discrete``): VIMCO 16/1 and 1/16, KL and Rényi. The power
objective (App. 5.B.3, Figs. 5.26 and 5.27: ``--figures fig5_26_power_continuous fig5_27_power_discrete``)
against the KL and Rényi objectives, with DReG 16 and with VIMCO 16; its one knob α is set from each λ
of ``--lams`` by the power objective's tie λ = (α - 1)/α (Definition 6), so the three curves sweep the
same MI weights; their KL and Rényi curves are Figs. 5.3's and 5.6's 16-draw runs, read from those figures'
records. The runs of Figs. 5.4 and 5.26 are kept in Fig. 5.3's folders, those of Figs. 5.7 and 5.27 in Fig. 5.6's
(``FOLDERS``), so that a comparison reads them with the curves they are set against. Each
curve is one run per λ of ``--lams``; every run is ``infolm train`` on ``configs/synthetic/cpu-*.yaml``
(1,000 symbols, 1,000 steps, lr 3e-3: the scale is stated there) with the objective replaced, and its
final IWAE-100 NLL and MI over all 1,000 symbols are its point. ``infolm pareto`` then keeps each
curve's frontier and writes ``OUT/<figure>/pareto.{csv,png}``; the PNGs are copied to ``docs/img/``.

    OMP_NUM_THREADS=1 python experiments/thesis_fig5_synthetic.py --out runs/thesis-fig5-synthetic

``--schedule converged`` trains each point for 30,000 steps, the learning rate annealed over the last
third (the points of the 1,000-step ``short`` schedule are far from where training ends), and
``--seeds`` repeats every point: the page's tables give mean ± sd over seeds (``python -m experiments.report
thesis-ch5``, from the records), and the PNG each curve's
frontier of the seed means. ``--jobs N`` trains N runs at a time. ``--archive`` copies every finished
run's small files into ``experiments/records/thesis-fig5-synthetic[-converged]/<figure>/``; a point
whose record exists is read from it and not trained again.

Every point shares the base config's learning rate, where the thesis tunes it per point. ``--lr R`` is the
study that checks what that costs: every run at rate R, into an ``--out`` of its own (no record is read or
written, no docs figure), its points in that folder's summary beside the protocol's at the config's rate::

    OMP_NUM_THREADS=1 python experiments/thesis_fig5_synthetic.py --schedule converged --figures fig5_3_continuous \
        --curves 'DReG 16 KL' 'DReG 16 Rényi' --lams 0.1 0.65 --seeds 0 --lr 1e-3 --out runs/fig5-lr1e-3

Reruns skip finished runs (the trainer resumes cut-off ones). ``OUT/summary.json`` (with
``--figures``: ``OUT/summary-<figures>.json``) has every point,
the command of every run and its wall time. No point's NLL may lie below ln 1,000 = 6.9078 (beyond
Monte Carlo error): the split holds every symbol once, so its mean NLL is an expectation that
Gibbs' inequality bounds by the entropy.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from infolm.latent.pareto import frontier as pareto_frontier
from infolm.report import mean_std
from infolm.training.checkpoint import write_json_atomic
from infolm.training.metrics import read_metrics
from infolm.training.records import archive_run, is_record

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the repository's ``experiments`` package
    sys.path.insert(0, str(ROOT))

from experiments.reproduce.protocol import load_protocol, runs_of  # noqa: E402
from experiments.reproduce.provenance import git_commit, machine_line  # noqa: E402

JOB_KEYS = ("command", "wall_s", "commit", "machine")  # what a point's record keeps of the job that trained it
DIVERGED = "diverged.json"  # in a run directory: the trainer stopped it by its divergence rule (the error)
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
            # the curves Fig. 5.4 sets the splits against: Fig. 5.3's runs (one folder, read from its records)
            ("DReG 1", lambda lam: {"mi-kl": {"estimator": "dreg", "samples": 1, "lam": lam}}),
            ("DReG 16 KL", lambda lam: {"mi-kl": {"estimator": "dreg", "samples": 16, "lam": lam}}),
            ("DReG 16/1 KL", lambda lam: {"mi-kl": {"estimator": "dreg", "samples": 16, "mi_samples": 1, "lam": lam}}),
            ("DReG 1/16 KL", lambda lam: {"mi-kl": {"estimator": "dreg", "samples": 1, "mi_samples": 16, "lam": lam}}),
            # the bounded reading of 16/1: ln p(x) inside the KL from the 16 likelihood draws (Eq. 5.11's
            # grouping); the thesis's 16/1 is the one-draw rate above, unbounded with Gaussian latents
            (
                "DReG 16/1 KL (shared base)",
                lambda lam: {
                    "mi-kl": {
                        "estimator": "dreg",
                        "samples": 16,
                        "mi_samples": 1,
                        "lam": lam,
                        "mi_estimate": "shared-base",
                    }
                },
            ),
        ],
    ),
    "fig5_7_asymmetric_discrete": (
        "configs/synthetic/cpu-categorical.yaml",
        [
            # the curves Fig. 5.7 sets the splits against: Fig. 5.6's runs (one folder, read from its records)
            ("REINFORCE 1", lambda lam: {"mi-kl": {"estimator": "reinforce", "samples": 1, "lam": lam}}),
            ("VIMCO 16 KL", lambda lam: {"mi-kl": {"estimator": "vimco", "samples": 16, "lam": lam}}),
            (
                "VIMCO 16 Rényi",
                lambda lam: {"mi-renyi": {"estimator": "vimco", "samples": 16, "lam": lam, "alpha": 2.0}},
            ),
        ]
        + [
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
# the figures of one task (base config) and schedule keep their runs and records in one folder, so that a comparison
# reads any of their curves together (a protocol comparison reads one folder) and a curve two figures share (the
# power figures' KL and Rényi curves are Figs. 5.3's and 5.6's 16-draw runs: the same objective and run name) is
# trained once
FOLDERS = {
    "fig5_4_asymmetric": "fig5_3_continuous",
    "fig5_26_power_continuous": "fig5_3_continuous",
    "fig5_7_asymmetric_discrete": "fig5_6_discrete",
    "fig5_27_power_discrete": "fig5_6_discrete",
}


def folder(figure: str) -> str:
    """The folder of a figure's runs and records under ``--out`` and ``--records``."""
    return FOLDERS.get(figure, figure)


def slug(text: str) -> str:
    return text.lower().replace(" ", "-").replace("/", "-").replace("é", "e")


# name -> (steps, the epoch after which the lr decays x0.8 per epoch; 0: constant lr). An epoch is
# 20,000 symbols, 313 steps of 64. short: the first frontiers (1,000 steps at constant lr, far from
# converged: DReG 16 KL at λ 0.5 has MI 3.3 at 1,000 steps, 6.5 at 10,000). converged: 20,000 steps at
# constant lr, then x0.8 per epoch (lr 1.8e-5 at the end), a full schedule whose end is flat (pilot in
# docs/notebook/thesis-ch5.md: DReG 16 KL at λ 0.5 moved by 0.005 nats of NLL and 0.002 of MI over its last
# 5,000 steps).
SCHEDULES: dict[str, tuple[int, int]] = {"short": (1000, 0), "converged": (30000, 64)}


def run_point(
    base: Path,
    objective: dict,
    run_dir: Path,
    steps: int,
    seed: int,
    anneal_epoch: int = 0,
    eval_every: int = 0,
    lr: float | None = None,
) -> tuple[list[str], float]:
    config = yaml.safe_load(base.read_text())
    config["objective"] = objective
    if lr is not None:  # a learning-rate study (--lr): the base config's rate replaced
        config["optim"]["lr"] = lr
    config["run"]["dir"] = str(run_dir)
    config["run"]["seed"] = seed
    config["train"]["max_steps"] = steps
    config["train"]["epochs"] = steps  # the step limit ends the run
    config["train"]["eval_every"] = eval_every or steps
    if anneal_epoch:  # constant lr, then x0.8 at the end of every epoch after anneal_epoch
        config["optim"].update(schedule="step", decay=0.8, decay_start_epoch=anneal_epoch)
        # a long run at lr 3e-3 can blow up (DReG 16 KL at λ 0.3, seed 0: loss 103 at step 783): restart from
        # the best checkpoint with the lr x0.9 (Melis Sec. 4.4's restarts), where the thesis tunes the lr per
        # point; a run that still diverges after 10 restarts is a diverged point
        config["train"]["divergence"] = {"enabled": True}
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir.parent / f"{run_dir.name}.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    command = [sys.executable, "-m", "infolm", "train", str(config_path)]
    start = time.time()
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        error = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        if "training diverged" not in error:
            raise SystemExit(f"{run_dir}: training failed: {error}")
        # a diverged run is a result, not a failure: its point has no NLL (the trainer's divergence rule
        # stopped it), and running it again would diverge again (the runs are deterministic)
        write_json_atomic(run_dir / DIVERGED, {"error": error})
    return command, time.time() - start


def protocol_grid(experiment: str, figures: list[str]) -> tuple[list[float], list[int]] | None:
    """The λ and seeds that ``experiments/protocols/thesis-ch5.yaml`` reads from these figures' records
    (``experiments/records/<experiment>/<figure>``), or None where it reads none of them (arms of
    another driver there, such as the VQ-VAE's, have no λ and are not this driver's)."""
    page = load_protocol("thesis-ch5")
    lams: list[float] = []
    seeds: list[int] = []
    for figure in figures:
        for arm, seed in runs_of(page, records=f"{experiment}/{folder(figure)}"):
            if "-lam" not in arm:
                continue
            lam = float(arm.rsplit("-lam", 1)[1])
            lams += [lam] if lam not in lams else []
            seeds += [seed] if seed not in seeds else []
    return (sorted(lams), sorted(seeds)) if lams else None


@functools.cache
def protocol_arms(experiment: str, figure: str) -> frozenset[str]:
    """The arms (``<curve>-lam<λ>``) the protocol reads from one figure's records: with the protocol's
    default grid, a curve is trained only at the λ the protocol reads of it."""
    from experiments.reproduce.protocol import load_protocol, runs_of

    return frozenset(arm for arm, _ in runs_of(load_protocol("thesis-ch5"), records=f"{experiment}/{folder(figure)}"))


def finished(run_dir: Path, steps: int) -> bool:
    """The run reached ``steps`` and was evaluated there, or it diverged."""
    if (run_dir / DIVERGED).is_file():
        return True
    return any(record.get("step") == steps for record in evaluations(run_dir))


def evaluations(run: Path) -> list[dict[str, Any]]:
    """The run's evaluation records (those with an MI estimate), in order."""
    return [record for record in read_metrics(run / "metrics.jsonl") if "mi" in record]


def plot_means(
    points: dict[str, list[tuple[float, float, float, float]]], path: Path, title: str, nll_max: float = 0.0
) -> None:
    """Each curve's frontier of seed-mean points (MI, NLL, std MI, std NLL): error bars are one standard
    deviation over seeds; a point is kept when no other point of its curve has more MI and a lower NLL.
    With ``nll_max`` the axes end there, and the frontier points above it are named in a note instead."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4.5))
    off: list[str] = []
    shown_mi: list[float] = []
    for label, curve in points.items():
        finite = [p for p in curve if math.isfinite(p[0]) and math.isfinite(p[1])]
        kept = sorted(p for p, flag in zip(finite, pareto_frontier([(p[0], p[1]) for p in finite])) if flag)
        if nll_max:
            off += [f"{label}: MI {p[0]:.2f}, NLL {p[1]:.2f}" for p in kept if p[1] > nll_max]
            kept = [p for p in kept if p[1] <= nll_max]
        shown_mi += [p[0] + p[2] for p in kept]
        if kept:
            axes.errorbar([p[0] for p in kept], [p[1] for p in kept], xerr=[p[2] for p in kept],
                          yerr=[p[3] for p in kept], marker="o", capsize=2, label=label)  # fmt: skip
    if nll_max:
        axes.set_ylim(top=nll_max)
        if off and shown_mi:
            axes.set_xlim(right=max(shown_mi) * 1.05)
    if off:
        note = "above the plot (frontier points):\n" + "\n".join(off)
        axes.text(0.02, 0.97, note, transform=axes.transAxes, fontsize=7, va="top")
    axes.axhline(OPTIMUM, color="grey", linestyle="--", linewidth=1, label=f"optimum {OPTIMUM:.4f}")
    axes.set_xlabel("MI estimate (nats)")
    axes.set_ylabel("NLL, IWAE-100 (nats)")
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=7)
    figure.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    figure.savefig(tmp, dpi=120)
    plt.close(figure)
    tmp.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="", help="run directories (default runs/thesis-fig5-synthetic[-SCHEDULE])")
    parser.add_argument("--lams", type=float, nargs="+", help="default: the protocol's, else 0 0.3 0.5 0.65 0.8 0.95")
    parser.add_argument("--schedule", default="short", choices=list(SCHEDULES), help="steps and lr annealing")
    parser.add_argument("--steps", type=int, default=0, help="override the schedule's steps")
    parser.add_argument("--seeds", type=int, nargs="+", help="default: the protocol's, else 0")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time")
    parser.add_argument("--figures", nargs="+", default=DEFAULT_FIGURES, choices=list(FIGURES))
    parser.add_argument("--curves", nargs="+", help="only these curves of the figures (labels, e.g. 'DReG 16 KL')")
    parser.add_argument("--docs-img", default="docs/img", help="where the PNGs are copied ('' : nowhere)")
    parser.add_argument("--records", default="", help="archived runs (default experiments/records/<experiment>)")
    parser.add_argument("--archive", action="store_true", help="copy every finished run into --records")
    parser.add_argument("--nll-max", type=float, default=0.0, help="end the plot's NLL axis here (0: at the data)")
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        help="a study: every run at this learning rate instead of the config's (the thesis tunes it per point); "
        "needs an --out of its own, reads no record, archives none and writes no docs figure",
    )
    args = parser.parse_args()
    if args.lr is not None:
        if not (math.isfinite(args.lr) and args.lr > 0):
            raise SystemExit(f"--lr must be a positive number, got {args.lr}")
        if not args.out or args.archive:
            raise SystemExit("--lr is a study beside the protocol: give it an --out of its own, and no --archive")
        args.docs_img = ""
    experiment = "thesis-fig5-synthetic" + ("" if args.schedule == "short" else f"-{args.schedule}")
    by_protocol = args.lams is None and protocol_grid(experiment, args.figures) is not None
    if args.lams is None or args.seeds is None:  # the protocol's grid for the figures it reads, else the first one's
        grid = protocol_grid(experiment, args.figures) or ([0.0, 0.3, 0.5, 0.65, 0.8, 0.95], [0])
        args.lams = grid[0] if args.lams is None else args.lams
        args.seeds = grid[1] if args.seeds is None else args.seeds
    if any(not math.isfinite(lam) or lam >= 1.0 for lam in args.lams):
        raise SystemExit(f"--lams must be finite and below 1 (the objectives' λ < 1), got {args.lams}")
    known = [label for figure in args.figures for label, _ in FIGURES[figure][1]]
    unknown = [label for label in args.curves or [] if label not in known]
    if unknown:
        raise SystemExit(f"--curves: no curve {unknown[0]!r} in {args.figures}; known: {', '.join(known)}")
    if args.jobs < 1 or args.steps < 0:
        raise SystemExit(f"--jobs must be at least 1 and --steps at least 0, got {args.jobs} and {args.steps}")
    steps, anneal_epoch = SCHEDULES[args.schedule]
    steps = args.steps or steps
    out = Path(args.out or f"runs/{experiment}")
    records = Path(args.records or ROOT / "experiments" / "records" / experiment)
    eval_every = 0 if args.schedule == "short" else 1000  # converged: a curve to read the convergence from
    if args.lr is not None and out.resolve() == (ROOT / "runs" / experiment).resolve():
        raise SystemExit(f"--lr is a study beside the protocol: give it an --out other than {out}")
    summary_name = "summary.json" if args.figures == DEFAULT_FIGURES else f"summary-{'-'.join(args.figures)}.json"
    # one learning rate per folder: a study's runs never mix with the protocol's (or another rate's), either way
    for written in sorted(out.glob("summary*.json")):
        rate = json.loads(written.read_text()).get("lr")
        if rate != args.lr:
            held = f"learning rate {rate}" if rate is not None else "the config's learning rate"
            raise SystemExit(f"{out} holds runs at {held} ({written.name}): give this call an --out of its own")
    summary: dict = {"optimum": OPTIMUM, "schedule": args.schedule, "steps": steps, "anneal_epoch": anneal_epoch,
                     "lams": args.lams, "seeds": args.seeds, "lr": args.lr, "runs": []}  # fmt: skip
    todo = []
    # λ outermost: every curve of every figure gets its spread of points before any gets more
    for seed in args.seeds:
        for lam in args.lams:
            for figure in args.figures:
                base, curves = FIGURES[figure]
                for label, objective in curves:
                    if args.curves and label not in args.curves:
                        continue
                    if by_protocol and f"{slug(label)}-lam{lam:g}" not in protocol_arms(experiment, figure):
                        continue  # the protocol's grid: not a point it reads
                    name = f"{slug(label)}-lam{lam:g}-s{seed}"
                    run_dir, record_dir = out / folder(figure) / name, records / folder(figure) / name
                    # a study's point (--lr) is never the protocol's record of the same name
                    from_record = args.lr is None and is_record(record_dir) and not run_dir.is_dir()
                    found = record_dir if from_record else run_dir
                    record = {"figure": figure, "curve": label, "lam": lam, "seed": seed, "run": str(found)}
                    summary["runs"].append(record)
                    if not finished(found, steps):
                        todo.append((record, ROOT / base, objective(lam), run_dir, seed))

    commit, machine = git_commit(), machine_line()  # what a record of a point trained by this call names

    def train(item: tuple[dict[str, Any], Path, dict, Path, int]) -> None:
        record, base, objective, run_dir, seed = item
        command, seconds = run_point(base, objective, run_dir, steps, seed, anneal_epoch, eval_every, args.lr)
        record.update(command=" ".join(command), wall_s=round(seconds, 1), commit=commit, machine=machine)
        print(f"{record['figure']} {record['curve']} λ={record['lam']:g} s{seed}: {seconds:.0f} s", flush=True)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(train, todo))
    for record in summary["runs"]:
        diverged = Path(record["run"]) / DIVERGED
        if diverged.is_file():
            record.update(nll=math.nan, mi=math.nan, kl=math.nan, diverged=json.loads(diverged.read_text())["error"])
            continue
        last = evaluations(Path(record["run"]))[-1]
        record.update(nll=last["loss"], mi=last["mi"], kl=last.get("kl"))
    if (out / summary_name).is_file():  # runs trained by an earlier call keep the command and wall time recorded then
        earlier = {r["run"]: r for r in json.loads((out / summary_name).read_text()).get("runs", [])}
        for record in summary["runs"]:
            if "wall_s" not in record and "wall_s" in earlier.get(record["run"], {}):
                record.update({key: earlier[record["run"]][key] for key in JOB_KEYS if key in earlier[record["run"]]})
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / summary_name, summary)
    if args.archive:
        for record in summary["runs"]:
            run = Path(record["run"])
            kept = records / folder(record["figure"]) / run.name
            # a run that this call did not train and that is archived already keeps its record (and the
            # command and wall time recorded when it was trained)
            if not is_record(run) and ("wall_s" in record or not kept.exists()):
                meta = {key: record[key] for key in JOB_KEYS if key in record}
                archive_run(run, records / folder(record["figure"]), {"driver": "thesis_fig5_synthetic.py", **meta})
        print(f"archived the runs in {records}", file=sys.stderr)
    report(summary, args, out)


def report(summary: dict[str, Any], args: argparse.Namespace, out: Path) -> None:
    """Each figure's frontiers of the seed means as a PNG (copied to ``--docs-img``); the tables of the
    points are the generated page's."""
    runs = summary["runs"]
    for figure in args.figures:
        paths = [r["run"] for r in runs if r["figure"] == figure and "diverged" not in r]  # a diverged run: no point
        pareto = [sys.executable, "-m", "infolm", "pareto", *paths, "--out", str(out / figure),
                  "--nll-key", "loss", "--mi-key", "mi", "--optimum", f"{OPTIMUM:.4f}",
                  # each point is the run's last evaluation, at the end of its annealed schedule: the
                  # checkpoint selected by validation NLL is, on a frontier, an early one with the latents
                  # still unused (ELBO at λ 0.3: MI 0.29 at the lowest NLL, 5.22 at the end)
                  "--at", "last"]  # fmt: skip
        if paths:  # every run, flagged
            subprocess.run(pareto, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        means: dict[str, list[tuple[float, float, float, float]]] = {}
        for label, _ in FIGURES[figure][1]:
            for lam in args.lams:
                found = [r for r in runs if r["figure"] == figure and r["curve"] == label and r["lam"] == lam]
                finite = [r for r in found if math.isfinite(r["nll"]) and math.isfinite(r["mi"])]
                if not finite:  # every seed diverged: no point
                    continue
                (mi, mi_std), (nll, nll_std) = mean_std([r["mi"] for r in finite]), mean_std([r["nll"] for r in finite])
                means.setdefault(label, []).append((mi, nll, mi_std, nll_std))
        seeds = f"{len(args.seeds)} seed{'s' if len(args.seeds) > 1 else ''}"
        title = f"{figure}: {summary['steps']} steps, {seeds}"
        plot_means(means, out / figure / "frontier.png", title, args.nll_max)
        if args.docs_img:
            Path(args.docs_img).mkdir(parents=True, exist_ok=True)
            suffix = "" if args.schedule == "short" else f"_{args.schedule}"
            shutil.copy(out / figure / "frontier.png", Path(args.docs_img) / f"thesis_{figure}{suffix}.png")
    print("the tables of each point (mean ± sd over seeds): python -m experiments.report thesis-ch5 (from the records)")


if __name__ == "__main__":
    main()
