"""BMI Table 2 (Cao & Xu) at a tiny CPU budget: AWD-LSTM-MoS baseline vs BMI-base vs BMI-full on PTB, several seeds.

For each config in ``configs/ptb/bmi-{baseline,base,full}.yaml`` and each seed: ``infolm train`` (the
exact command is printed and stored), then, in this process, on the best (averaged) weights:

* perplexity on the validation and test splits (the run's ``data.max_eval_tokens`` prefix of each;
  valid is the trainer's final validation, test is computed here the same way);
* reverse perplexity (Sec. 5.1): ``--gen-tokens`` tokens sampled from the model train a fresh small
  LSTM (``REVERSE``), whose perplexity on the same real valid/test prefixes is reported;
* the segment MI lower bound (Sec. 5.2) of the same generated tokens, and of as many real PTB
  training tokens (the reference row), with a reduced estimator (``MI``).

The NT-ASGD switch never fires in a run this short, so every config switches at ``--switch`` steps:
tail averaging starts there (``optim.average.nonmono=0 optim.average.start=S``) and BMI-full's
Phase II starts there (``objective.bmi.phase2_start=S``), the paper's "Phase II at the ASGD switch".

    OMP_NUM_THREADS=1 python experiments/bmi_ptb_table2.py --seeds 0 1 2 --out runs/bmi-ptb-table2

Writes ``OUT/results.json`` (every number, the commands, wall times) and prints a summary table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from infolm.build import load_run
from infolm.evaluation.mi import MIEstimatorConfig, estimate_segment_mi, generate_texts
from infolm.evaluation.perplexity import evaluate_split, stream_nll
from infolm.evaluation.reverse_ppl import ReversePPLConfig, train_fresh_lm

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("baseline", "base", "full")
# the fresh LM of reverse perplexity: a small tied LSTM (the paper: an RNN-LM on 6M tokens)
REVERSE = {"lm": {"name": "lstm", "emb": 64, "hidden": 64, "layers": 1, "dropout": 0.2}, "epochs": 2}
# the MI estimator, reduced for CPU (the paper: 10 folds; our library default: 2000 critic steps)
MI = {"folds": 5, "steps": 300, "eval_every": 25, "patience": 4}


def train_command(name: str, seed: int, out: Path, switch: int, steps: int) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "infolm",
        "train",
        f"configs/ptb/bmi-{name}.yaml",
        f"run.dir={out / f'{name}-s{seed}'}",
        f"run.seed={seed}",
        f"train.max_steps={steps}",
        "train.eval_every=0",  # validate once, at the end (on the averaged weights)
        "train.progress=false",
        "optim.average.nonmono=0",
        f"optim.average.start={switch}",
    ]
    if name == "full":
        command.append(f"objective.bmi.phase2_start={switch}")
    return command


def reverse_ppl_of(generated: torch.Tensor, corpus: Any, seed: int) -> dict[str, float]:
    """Reverse perplexity from an already generated stream (``reverse_perplexity`` minus its sampling)."""
    config = ReversePPLConfig(num_tokens=generated.numel(), seed=seed, **REVERSE)  # type: ignore[arg-type]
    eos = corpus.vocab.eos_id
    lm = train_fresh_lm(generated, len(corpus.vocab), eos, config)
    out = {}
    for split in ("valid", "test"):
        nll, count = stream_nll(lm, corpus.stream(split), eos, config.eval_batch_size, config.bptt)
        out[f"{split}_ppl"] = math.exp(nll / count)
    return out


def evaluate_run(run_dir: Path, seed: int, gen_tokens: int) -> dict[str, Any]:
    config, corpus, model = load_run(run_dir, "cpu")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r.get("split") == "valid"][-1]  # the trainer's final validation
    result: dict[str, Any] = {"valid": {"ppl": valid["ppl"], "nll": valid["loss"], "step": valid["step"]}}
    result["test"] = evaluate_split(model, corpus, "test", config.data.eval_batch_size, config.data.bptt)
    generator = torch.Generator().manual_seed(seed)
    layout, eos = MIEstimatorConfig(), corpus.vocab.eos_id
    with torch.no_grad():  # 64 independent texts; MI pairs are taken within a text, never across two
        texts = generate_texts(model, gen_tokens, eos, layout.seg_len, layout.gap, 64, generator)
    generated = torch.cat([texts, torch.full((texts.size(0), 1), eos)], 1).reshape(-1)[:gen_tokens]
    result["reverse"] = reverse_ppl_of(generated, corpus, seed)
    mi = estimate_segment_mi(texts, len(corpus.vocab), MIEstimatorConfig(seed=seed, **MI))  # type: ignore[arg-type]
    result["mi"] = {"mean": mi.mean, "std": mi.std, "folds": mi.folds}
    return result


def real_reference(out: Path, seed: int, gen_tokens: int) -> dict[str, Any]:
    """MI (and reverse perplexity) of ``gen_tokens`` real PTB training tokens, the 'Real Data' row."""
    _, corpus, _ = load_run(out / f"baseline-s{seed}", "cpu")
    start = seed * gen_tokens  # a different slice per seed
    real = corpus.stream("train")[start : start + gen_tokens]
    mi = estimate_segment_mi(real, len(corpus.vocab), MIEstimatorConfig(seed=seed, **MI))  # type: ignore[arg-type]
    return {"mi": {"mean": mi.mean, "std": mi.std, "folds": mi.folds}, "reverse": reverse_ppl_of(real, corpus, seed)}


def summarize(results: dict[str, Any]) -> str:
    def cell(values: list[float], digits: int = 1) -> str:
        if len(values) == 1:
            return f"{values[0]:.{digits}f}"
        return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"

    rows = ["| model | valid PPL | test PPL | reverse PPL valid | reverse PPL test | MI of generations (nats) |"]
    rows.append("| --- | --- | --- | --- | --- | --- |")
    for name in CONFIGS:
        runs = [r for r in results["runs"] if r["config"] == name]
        if not runs:
            continue
        rows.append(
            f"| {name} | {cell([r['valid']['ppl'] for r in runs])} | {cell([r['test']['ppl'] for r in runs])} | "
            f"{cell([r['reverse']['valid_ppl'] for r in runs])} | {cell([r['reverse']['test_ppl'] for r in runs])} | "
            f"{cell([r['mi']['mean'] for r in runs], 3)} |"
        )
    real = results.get("real", [])
    if real:
        rows.append(
            f"| real PTB train tokens | – | – | {cell([r['reverse']['valid_ppl'] for r in real])} | "
            f"{cell([r['reverse']['test_ppl'] for r in real])} | {cell([r['mi']['mean'] for r in real], 3)} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps of every run")
    parser.add_argument("--switch", type=int, default=50, help="step of the ASGD switch and of BMI Phase II")
    parser.add_argument("--gen-tokens", type=int, default=20000, help="generated tokens per model")
    parser.add_argument("--out", type=Path, default=Path("runs/bmi-ptb-table2"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "results.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"runs": [], "real": []}
    results["settings"] = {
        "steps": args.steps,
        "switch": args.switch,
        "gen_tokens": args.gen_tokens,
        "reverse": REVERSE,
        "mi": MI,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), torch {torch.__version__}",
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip(),
    }
    done = {(r["config"], r["seed"]) for r in results["runs"]}
    for seed in args.seeds:
        for name in args.configs:
            if (name, seed) in done:
                continue
            command = train_command(name, seed, args.out, args.switch, args.steps)
            shown = "OMP_NUM_THREADS=1 infolm " + shlex.join(command[3:])
            print(shown, flush=True)
            tick = time.perf_counter()
            subprocess.run(command, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
            train_s = time.perf_counter() - tick
            tick = time.perf_counter()
            record = evaluate_run(args.out / f"{name}-s{seed}", seed, args.gen_tokens)
            record.update(config=name, seed=seed, command=shown, train_s=train_s, eval_s=time.perf_counter() - tick)
            results["runs"].append(record)
            path.write_text(json.dumps(results, indent=1))
            print(
                f"  {name} s{seed}: valid {record['valid']['ppl']:.1f} test {record['test']['ppl']:.1f} "
                f"reverse {record['reverse']['valid_ppl']:.1f}/{record['reverse']['test_ppl']:.1f} "
                f"MI {record['mi']['mean']:.3f} (train {train_s:.0f}s, eval {record['eval_s']:.0f}s)",
                flush=True,
            )
        if seed not in {r["seed"] for r in results["real"]} and "baseline" in args.configs:
            real = real_reference(args.out, seed, args.gen_tokens)
            real["seed"] = seed
            results["real"].append(real)
            path.write_text(json.dumps(results, indent=1))
            print(f"  real s{seed}: MI {real['mi']['mean']:.3f} reverse {real['reverse']}", flush=True)
    print(summarize(results))


if __name__ == "__main__":
    main()
