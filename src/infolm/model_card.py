"""The model card (``README.md``) that ``infolm export`` writes beside the exported weights.

Everything on it is read from the run directory: ``config.yaml`` (task, data, model, objective terms and
weights, optimizer), ``overrides.json`` (the command line's overrides), ``metrics.jsonl`` (steps trained
and the validation scores of the best evaluation) and the exported checkpoint's ``meta.json`` (its step,
the versions that trained it). Nothing is recomputed and no data is read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from infolm.config import Config, to_dict
from infolm.training.metrics import read_metrics


def _settings(section: dict[str, Any]) -> str:
    """``key value, key value`` of a config mapping, its name left out."""
    return ", ".join(f"{key} {value}" for key, value in section.items() if key != "name")


def best_validation(records: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """The selection metric's name and the validation record where it was best (the first such one), from
    the ``best_<name>`` field of the last validation record; None when the run logged no evaluation."""
    evaluations = [r for r in records if r.get("split") == "valid"]
    if not evaluations:
        return None
    last = evaluations[-1]
    names = [key[len("best_") :] for key in last if key.startswith("best_") and key[len("best_") :] in last]
    if not names:
        return None
    name = names[0]
    best = last[f"best_{name}"]
    return name, next((r for r in evaluations if r.get(name) == best), last)


def _data_lines(config: Config) -> list[str]:
    from infolm.data.datasets import DATASETS  # the registry's table only: nothing is read or fetched

    data = config.data
    spec = DATASETS.get(data.name)
    described = f": {spec.description}" if spec is not None else ""
    lines = [f"- data: `{data.name}` ({data.level} level){described}"]
    for split in ("train", "valid", "test"):
        path = getattr(data, split)
        if path:
            lines.append(f"  - {split} file: `{path}`")
    if data.max_train_tokens:
        lines.append(f"  - trained on the first {data.max_train_tokens:,} training tokens")
    if data.max_eval_tokens:
        lines.append(f"  - valid and test cut to {data.max_eval_tokens:,} tokens")
    return lines


def model_card(
    run_dir: Path, config: Config, parameters: int, vocab_size: int, checkpoint: Path, architecture: str, version: str
) -> str:
    """The card's Markdown."""
    meta_path = checkpoint / "meta.json"
    meta: dict[str, Any] = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    records = read_metrics(run_dir / "metrics.jsonl")
    steps = max((int(r["step"]) for r in records if "step" in r), default=meta.get("step", 0))
    overrides_path = run_dir / "overrides.json"
    overrides: list[str] = json.loads(overrides_path.read_text()) if overrides_path.is_file() else []
    model = config.model
    objective = ", ".join(
        f"`{name}` (weight {settings.get('weight', 1.0)}"
        + (f"; {_settings({k: v for k, v in settings.items() if k != 'weight'})})" if len(settings) > 1 else ")")
        for name, settings in config.objective.items()
    )
    lines = [
        f"# {run_dir.resolve().name}",
        "",
        f"A `{model['name']}` model trained with infolm, exported by `infolm export` (infolm {version}) as a "
        f"`transformers` `{architecture}` directory: `config.json`, `model.safetensors`"
        + (", `tokenizer.json`, `tokenizer_config.json`" if (run_dir / "tokenizer.json").is_file() else "")
        + ".",
        "",
        "## Training",
        "",
        f"- task: `{config.task['name']}`" + (f" ({_settings(config.task)})" if len(config.task) > 1 else ""),
        *_data_lines(config),
        f"- objective: {objective}",
        f"- optimizer: `{config.optim.name}`, lr {config.optim.lr}, schedule `{config.optim.schedule}`, "
        f"batch size {config.data.batch_size}, seed {config.run.seed}",
        f"- steps: {steps:,} trained; the exported weights are `{checkpoint.name}/`, from step {meta.get('step', '?')}",
    ]
    if config.run.init_from:
        lines.append(f"- initialized from the run `{config.run.init_from}`")
    lines += [
        "",
        "## Model",
        "",
        f"- `{model['name']}`: {_settings(model)}",
        f"- {parameters:,} parameters, a vocabulary of {vocab_size:,} tokens",
        "",
        "## Validation",
        "",
    ]
    best = best_validation(records)
    if best is None:
        lines.append("The run logged no validation evaluation (`metrics.jsonl`).")
    else:
        name, record = best
        lines += [
            f"The best validation evaluation of the run (`metrics.jsonl`, selected by `{name}`), at step "
            f"{record.get('step', '?')}:",
            "",
            "| metric | value |",
            "| --- | --- |",
        ]
        skip = {"step", "epoch", "split"}
        for key, value in record.items():
            if key in skip or key.startswith("best_") or not isinstance(value, (int, float)):
                continue
            lines.append(f"| {key} | {value:.4f} |" if isinstance(value, float) else f"| {key} | {value} |")
    versions = meta.get("versions", {})
    trained_with = ", ".join(f"{k} {v}" for k, v in versions.items())
    commit = f", commit {meta['git_commit']}" if meta.get("git_commit") else ""
    lines += [
        "",
        "## How it was made",
        "",
        f"Trained with {trained_with or 'infolm'}{commit}. The overrides on its command line were "
        + (" ".join(f"`{o}`" for o in overrides) if overrides else "none")
        + "; the resolved config below trains it again with `infolm train config.yaml run.dir=NEW_DIR`.",
        "",
        "```yaml",
        yaml.safe_dump(to_dict(config), sort_keys=False).rstrip(),
        "```",
        "",
    ]
    return "\n".join(lines)
