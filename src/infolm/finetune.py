"""Fine-tuning over several seeds with one command, and the mean ± std of the selected checkpoints.

``infolm finetune --seeds 1,2,3,4,5 CONFIG run.init_from=PRETRAINED key=value ...`` trains one run per
seed in ``run.dir/seed-N`` (each resumable on its own; each starts from the run.init_from run's checkpoint
that the task names, ``task.init_checkpoint``: classification's last step by default), evaluates each
run's ``best/`` checkpoint on valid and test, and writes ``run.dir/summary.json``: per seed, then mean
and sample standard deviation (ddof 1) of every number across seeds. Runs that already finished are
evaluated, not retrained.
When every seed's selected checkpoint predicts one class for every sentence of the selection split
(a task that reports ``predicted_classes``: classification), the summary carries a warning: the mean ±
std then describes runs that learned nothing (MCC 0), not a fine-tuning recipe.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infolm.config import Config, load_config
from infolm.errors import InfolmError

SELECTION_NAMES = ("mcc", "accuracy", "mlm_nll", "nll", "ppl")  # printed on the command line (all are in the file)


def seed_config(base: Config, seed: int) -> Config:
    run = dataclasses.replace(base.run, seed=seed, dir=str(Path(base.run.dir) / f"seed-{seed}"))
    return dataclasses.replace(base, run=run)


def mean_std(values: Sequence[float]) -> dict[str, float]:
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return {"mean": mean, "std": math.sqrt(var), "n": float(len(values))}


def summarize(per_seed: dict[int, dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """{split: {metric: {mean, std, n}}} over the seeds' {split: {metric: value}}."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    first = next(iter(per_seed.values()))
    for split, metrics in first.items():
        out[split] = {}
        for name, value in metrics.items():
            if isinstance(value, (int, float)):
                out[split][name] = mean_std([float(per_seed[s][split][name]) for s in per_seed])
    return out


def one_class_seeds(per_seed: dict[int, dict[str, dict[str, float]]], split: str = "valid") -> list[int]:
    """The seeds whose evaluation weights predict one class for every sentence of ``split``."""
    return [seed for seed, splits in per_seed.items() if splits.get(split, {}).get("predicted_classes") == 1]


def one_class_warning(per_seed: dict[int, dict[str, dict[str, float]]], split: str = "valid") -> str | None:
    """A line when every seed's selected checkpoint predicts a single class on ``split``, else None."""
    seeds = one_class_seeds(per_seed, split)
    if not seeds or len(seeds) < len(per_seed):
        return None
    mcc = {seed: per_seed[seed][split].get("mcc") for seed in seeds}
    at_zero = " (MCC 0)" if all(value == 0 for value in mcc.values()) else ""
    return (
        f"every seed's selected checkpoint ({len(seeds)} of {len(per_seed)}) predicts one class for all of "
        f"{split}{at_zero}: the fine-tuning learned nothing; try another optim.lr, more steps or another seed"
    )


def finetune(
    config_path: str | None, seeds: Sequence[int], overrides: Sequence[str], splits: Sequence[str]
) -> dict[str, Any]:
    from infolm.build import evaluate_best, train

    if not seeds:
        raise InfolmError("finetune needs at least one seed (--seeds 1 2 3)")
    base = load_config(config_path, overrides)
    per_seed: dict[int, dict[str, dict[str, float]]] = {}
    for seed in seeds:
        config = seed_config(base, seed)
        train(config, [*overrides, f"run.seed={seed}", f"run.dir={config.run.dir}"])
        per_seed[seed] = evaluate_best(config, splits)
    stats = summarize(per_seed)
    headline = {
        f"{split}_{name}": f"{value['mean']:.4f} ± {value['std']:.4f}"
        for split, metrics in stats.items()
        for name, value in metrics.items()
        if name in SELECTION_NAMES
    }
    warning = one_class_warning(per_seed)
    summary = {
        "run_dir": base.run.dir,
        "seeds": list(seeds),
        "per_seed": {str(s): m for s, m in per_seed.items()},
        "summary": stats,
        "headline": headline,
        "one_class_seeds": one_class_seeds(per_seed),  # selected checkpoints that predict one class on valid
        "warnings": [warning] if warning else [],
    }
    path = Path(base.run.dir) / "summary.json"
    tmp = path.with_name(".summary.json.tmp")
    tmp.write_text(json.dumps(summary, indent=1))
    os.replace(tmp, path)
    return summary
