"""From a validated ``Config`` to the objects the trainer receives: task, model, objective, averager.

The CLI calls these; the trainer never imports models or objectives.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import torch

from infolm.config import Config, load_raw, save_config, to_dict
from infolm.data import Corpus
from infolm.errors import InfolmError
from infolm.models.base import LanguageModel

# Keys that may differ when a run directory is reused (resume, extend, evaluate elsewhere).
RESUMABLE_KEYS = {
    "train.max_steps",
    "train.epochs",
    "train.eval_every",
    "train.checkpoint_every",
    "train.checkpoint_minutes",
    "train.keep_checkpoints",
    "train.log_every",
    "train.progress",
    "train.tensorboard",
    "train.early_stopping",
    "run.device",
    "run.dir",
    "run.init_from",
    "run.keep_freed_memory",
}


MISSING_SHOWN = 8  # names of missing weights shown in run.init_from's refusal


def eos_of(vocab: Any) -> int | None:
    """The id of ``<eos>`` in ``vocab``, None where it has none (a WordPiece vocabulary)."""
    try:
        return int(vocab.eos_id)
    except (AttributeError, KeyError):
        return None


def unk_of(vocab: Any) -> int | None:
    """The id of ``<unk>`` in ``vocab``, None where it has none."""
    unk = getattr(vocab, "unk_id", None)
    return None if unk is None else int(unk)


def build_model(config: Config, vocab_size: int, eos_id: int | None = None, unk_id: int | None = None) -> LanguageModel:
    """The configured model for a vocabulary of ``vocab_size``; a model that takes the id of ``<eos>``
    (the sentence GRU ends its sentences with it) gets ``eos_id``, the vocabulary's, when it is known, and
    one that takes the id of ``<unk>`` (the sentence GRU's word dropout) gets ``unk_id`` likewise."""
    import inspect

    from infolm.models import MODELS

    settings = {k: v for k, v in config.model.items() if k != "name"}
    extra: dict[str, Any] = {}
    parameters = inspect.signature(MODELS.get(config.model["name"]).factory).parameters
    if eos_id is not None and "eos_id" in parameters:
        extra["eos_id"] = eos_id
    if unk_id is not None and "unk_id" in parameters:
        extra["unk_id"] = unk_id
    return MODELS.build(config.model["name"], settings, vocab_size=vocab_size, where="model", **extra)


def build_task(config: Config, corpus: Corpus) -> Any:
    """The registered task ``config.task`` names, set up on ``corpus``."""
    from infolm.tasks import TASKS

    settings = {k: v for k, v in config.task.items() if k != "name"}
    task = TASKS.build(config.task["name"], settings, where="task")
    task.setup(config, corpus)
    return task


def task_data(config: Config) -> Corpus:
    """What the task of ``config`` trains on (``Task.load_data``; a corpus unless the task says otherwise).
    A note on stderr counts the tokens of a corpus read as ``<unk>`` (``Corpus.unk_note``), if any."""
    from infolm.tasks import TASKS, Task

    task_class = cast(type[Task], TASKS.get(config.task["name"]).factory)
    data: Corpus = task_class.load_data(config)
    note = data.unk_note() if isinstance(data, Corpus) else None
    if note is not None and int(os.environ.get("RANK", "0")) == 0:  # once, not once per torchrun process
        sys.stderr.write(f"infolm: note: data: {note}\n")
    return data


def check_train_data(config: Config, data: Any) -> None:
    """The task's refusal of data it cannot train on (``Task.check_train_data``), before the run directory."""
    from infolm.tasks import TASKS, Task

    task_class = cast(type[Task], TASKS.get(config.task["name"]).factory)
    task_class.check_train_data(config, data)


def build_objective(config: Config) -> Any:
    from infolm.objectives import build_objective as build

    return build(config.objective)


def build_averager(config: Config, model: torch.nn.Module) -> Any:
    if not config.optim.average:
        return None
    settings = dict(config.optim.average)
    name = settings.pop("name", None)
    if not isinstance(name, str):
        raise InfolmError("optim.average needs a name (two-tailed, tail or ema)")
    from infolm.optim.averaging import AVERAGERS

    return AVERAGERS.build(name, settings, [p for p in model.parameters() if p.requires_grad], where="optim.average")


def validate_plugins(config: Config) -> None:
    """Check task, model and objective settings against their registered configs, and that the task
    can serve the model and the objectives (no torch work)."""
    from infolm.compatibility import check_compatibility
    from infolm.data.datasets import DATASETS
    from infolm.models import MODELS
    from infolm.objectives import OBJECTIVES
    from infolm.tasks import TASKS

    if config.data.name != "path" and config.data.name not in DATASETS:
        known = ", ".join(sorted(DATASETS))
        raise InfolmError(f"unknown dataset {config.data.name!r}; known: {known}, or path (with data.train/valid/test)")
    settings = {k: v for k, v in config.model.items() if k != "name"}
    MODELS.make_config(config.model["name"], settings, "model")
    for name, term in config.objective.items():
        OBJECTIVES.make_config(name, term or {}, f"objective.{name}")
    TASKS.make_config(config.task["name"], {k: v for k, v in config.task.items() if k != "name"}, "task")
    check_compatibility(config)


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def check_run_dir(config: Config, run_dir: Path) -> None:
    """A run directory holding another config is an error (no file is touched)."""
    saved = run_dir / "config.yaml"
    if not saved.exists():
        from infolm.training.run_lock import LOCK, OWNER

        if run_dir.exists() and any(p.name not in (LOCK, OWNER) for p in run_dir.iterdir()):
            raise InfolmError(f"run directory {run_dir} is not empty and holds no infolm run (no config.yaml)")
        return
    try:
        old = _flatten(load_raw(saved))
    except InfolmError as error:
        raise InfolmError(f"run directory {run_dir} has an unreadable config.yaml: {error}") from None
    if not any(key.startswith("task.") for key in old):
        old["task.name"] = "stream-lm"  # runs from before tasks existed trained a stream LM
    new = _flatten(to_dict(config))
    defaults = _flatten(to_dict(type(config)()))
    for key in sorted(set(old) | set(new)):
        if key in RESUMABLE_KEYS:
            continue
        if key not in old and key in defaults and new.get(key) == defaults[key]:
            continue  # a setting added since the run started, at its default: the run's behaviour
        if old.get(key) != new.get(key):
            raise InfolmError(
                f"run directory {run_dir} holds a run of another config ({key}: {old.get(key)!r} there, "
                f"{new.get(key)!r} now); use another run.dir"
            )


def prepare_run_dir(config: Config, corpus: Corpus, overrides: list[str]) -> None:
    run_dir = Path(config.run.dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / ".config.yaml.tmp")
    (run_dir / ".config.yaml.tmp").replace(run_dir / "config.yaml")
    (run_dir / "overrides.json").write_text(json.dumps(overrides))
    vocab_path = run_dir / "vocab.json"
    if not vocab_path.exists():
        corpus.vocab.save(run_dir / ".vocab.json.tmp")
        (run_dir / ".vocab.json.tmp").replace(vocab_path)


def _remove_new_run(run_dir: Path) -> None:
    """Delete what a run that failed to start wrote in its directory (the lock files stay)."""
    import shutil

    from infolm.training.run_lock import LOCK, OWNER

    for path in run_dir.iterdir():
        if path.name in (LOCK, OWNER):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def versions() -> dict[str, str]:
    """The versions a run's numbers depend on: infolm, torch, numpy, python."""
    import platform

    import numpy

    import infolm

    return {
        "infolm": infolm.__version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
    }


def run_meta(config: Config, corpus: Corpus) -> dict[str, Any]:
    import platform

    return {
        "config": to_dict(config),
        "vocab_sha": corpus.vocab.digest(),
        "vocab_size": len(corpus.vocab),
        "versions": versions(),
        "git_commit": git_commit(),
        "seeds": {
            "python": config.run.seed,
            "numpy": config.run.seed,
            "torch": config.run.seed,
            "data": config.run.seed,
        },
        "machine": platform.machine(),
    }


def build_trainer(config: Config) -> tuple[Any, Corpus]:
    """The trainer of ``config`` and its corpus, built as ``train`` builds them (the model drawn after
    ``torch.manual_seed(run.seed)``) but without the run-directory checks, the lock or ``run.init_from``:
    for benchmarks and tests that step a trainer themselves."""
    from infolm.training import Trainer

    validate_plugins(config)
    corpus = task_data(config)
    check_train_data(config, corpus)
    torch.manual_seed(config.run.seed)
    model = build_model(config, len(corpus.vocab), eos_of(corpus.vocab), unk_of(corpus.vocab))
    objective = build_objective(config)
    objective.setup(corpus, model)
    averager = build_averager(config, model)
    return Trainer(config, model, objective, build_task(config, corpus), averager=averager), corpus


def train(config: Config, overrides: list[str] | None = None) -> dict[str, Any]:
    """Everything ``infolm train`` does: build, resume or start, fit, return a summary."""
    from infolm.training import Trainer, seed_everything

    run_dir = Path(config.run.dir)
    validate_plugins(config)
    main_process = int(os.environ.get("RANK", "0")) == 0  # under torchrun, only rank 0 reads and writes run_dir
    if main_process:
        check_run_dir(config, run_dir)
    corpus = task_data(config)
    check_train_data(config, corpus)
    if config.run.deterministic:
        torch.use_deterministic_algorithms(True)
    seed_everything(config.run.seed)
    model = build_model(config, len(corpus.vocab), eos_of(corpus.vocab), unk_of(corpus.vocab))
    if config.run.init_from:
        init_weights(model, config.run.init_from, corpus, init_checkpoint(config))
    objective = build_objective(config)
    objective.setup(corpus, model)
    if config.run.init_from:
        init_objective_state(objective, config.run.init_from, init_checkpoint(config))
    averager = build_averager(config, model)
    from infolm.training.run_lock import run_dir_lock

    # One process per run directory: the rank-0 process under torchrun checks and writes it; the other
    # ranks neither write nor read it here (reading it while rank 0 writes found half-made directories)
    with run_dir_lock(run_dir) if main_process else contextlib.nullcontext():
        if main_process:
            check_run_dir(config, run_dir)  # again, now that no other process can write there
        fresh = main_process and not (run_dir / "config.yaml").exists()  # then it holds only the lock files
        try:
            if main_process:
                prepare_run_dir(config, corpus, list(overrides or []))
            task = build_task(config, corpus)
            trainer = Trainer(config, model, objective, task, averager=averager, meta=run_meta(config, corpus))
        except InfolmError:
            if fresh:  # a setting refused once the task is built (a warmup longer than the run): no half-made run
                _remove_new_run(run_dir)
            raise
        try:
            summary = trainer.fit()
        finally:
            from infolm.training import distributed

            distributed.shutdown()
    summary["run_dir"] = str(run_dir)
    summary["parameters"] = sum(p.numel() for p in model.parameters())
    return summary


def _evaluation_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint whose weights stand for a run: ``best/``, else the latest one (None if none)."""
    from infolm.training import checkpoint as ckpt

    best = run_dir / ckpt.CHECKPOINTS / ckpt.BEST
    return best if (best / "model.safetensors").exists() else ckpt.latest_checkpoint(run_dir)


def _load_checkpoint_weights(model: torch.nn.Module, checkpoint: Path) -> list[str]:
    """Load ``checkpoint``'s evaluation weights into ``model``; returns the names the checkpoint lacks."""
    from infolm.training import checkpoint as ckpt

    try:
        return ckpt.load_weights(model, checkpoint)
    except Exception as error:  # safetensors raises its own error types on damaged files
        raise InfolmError(f"cannot load weights from {checkpoint}: {str(error).splitlines()[0]}") from None


def _named(names: Sequence[str]) -> str:
    """The first ``MISSING_SHOWN`` of ``names`` and how many there are, for a one-line refusal."""
    shown = ", ".join(names[:MISSING_SHOWN]) + (", ..." if len(names) > MISSING_SHOWN else "")
    return f"{shown} ({len(names)} in all)"


def _load_run_weights(model: torch.nn.Module, run_dir: Path, checkpoint: Path) -> None:
    """Load a run's own evaluation weights into the model its config builds: every weight, or a refusal.

    The file loader is lenient (it returns the names a file lacks) for ``init_weights``, where a model
    that starts from another run adds weights of its own (a classification head). Here the model is the
    one the run trained, so nothing may be lacking: tied weights are restored from the file's aliases,
    non-persistent buffers are not in a state dict, persistent ones (a codebook, a length prior) are
    written with the weights, and the evaluation weights of a run with weight averaging are the averaged
    copy of the same model. A lacking name would otherwise keep its random initial value unseen."""
    lacking = sorted(_load_checkpoint_weights(model, checkpoint))
    if lacking:
        raise InfolmError(
            f"run directory {run_dir}: checkpoint {checkpoint.name} lacks weights of the run's model: "
            f"{_named(lacking)}; the checkpoint is incomplete or the model settings (model.*) were changed"
        )


def init_checkpoint(config: Config) -> str:
    """Which checkpoint of ``run.init_from`` the run starts from (``Task.init_checkpoint``): best or last."""
    from infolm.tasks import TASKS, Task

    task_class = cast(type[Task], TASKS.get(config.task["name"]).factory)
    return task_class.init_checkpoint(config)


def _init_source(run_dir: Path, which: str) -> Path | None:
    """``best``: the run's evaluation checkpoint (best/, else the latest); ``last``: its latest step."""
    from infolm.training import checkpoint as ckpt

    return ckpt.latest_checkpoint(run_dir) if which == "last" else _evaluation_checkpoint(run_dir)


def init_weights(model: torch.nn.Module, run_dir: str | Path, corpus: Corpus, which: str = "best") -> None:
    """Load another run's evaluation weights into ``model``, from its ``best`` checkpoint (best/, else the
    latest: the fine-tuning phase of AWD-LSTM / MoS restarts from the trained model with averaging from
    the first step) or its ``last`` one (an encoder fine-tuned from the end of its pretraining)."""
    from infolm.data.vocab import Vocab

    run_dir = Path(run_dir)
    chosen = _init_source(run_dir, which)
    if chosen is None or not (run_dir / "vocab.json").exists():
        raise InfolmError(f"run.init_from={run_dir} is not an infolm run with a checkpoint")
    if Vocab.load(run_dir / "vocab.json").itos != corpus.vocab.itos:
        raise InfolmError(f"run.init_from={run_dir} was trained with another vocabulary")
    missing = _load_checkpoint_weights(model, chosen)
    new_here = getattr(model, "new_in_finetuning", None)  # weights the model adds (a classification head)
    lacking = sorted(set(missing) - (set(new_here()) if callable(new_here) else set()))
    if lacking:
        raise InfolmError(
            f"run.init_from={run_dir}: checkpoint {chosen.name} lacks weights the model needs: {_named(lacking)}; "
            "the model settings (model.*) must be those of the run it starts from"
        )


def init_objective_state(objective: Any, run_dir: str | Path, which: str = "best") -> list[str]:
    """Continue the state of the objective terms that ``run_dir`` also trained (BMI's discriminator and
    phase, IMM's start) at the checkpoint ``init_weights`` loads (``which``): fine-tuning goes on where
    the other run's objective was. Returns those terms."""
    from infolm.training import checkpoint as ckpt

    chosen = _init_source(Path(run_dir), which)
    saved = ckpt.load_objective_state(chosen) if chosen is not None else None
    if not saved:
        return []
    continued = []
    for name, term in objective.named_terms():
        prefix = f"terms.{name}."
        state = {k[len(prefix) :]: v for k, v in saved.items() if k.startswith(prefix)}
        if not state:
            continue
        try:
            term.load_state_dict(state)
        except (RuntimeError, KeyError) as error:
            first = str(error).strip().splitlines()[0]
            raise InfolmError(f"run.init_from={run_dir}: objective.{name} cannot continue its state: {first}") from None
        continued.append(name)
    return continued


def load_run(
    run_dir: str | Path, device: str = "cpu", full_splits: bool = False
) -> tuple[Config, Corpus, LanguageModel]:
    """Config, corpus (same vocabulary) and the evaluation weights of a run (best, else latest).

    ``full_splits`` ignores the run's ``data.max_eval_tokens`` (score all of valid and test)."""
    from infolm.config import load_config
    from infolm.data.vocab import Vocab

    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise InfolmError(f"{run_dir} is not an infolm run directory (no config.yaml)")
    config = load_config(run_dir / "config.yaml")
    config.run.dir = str(run_dir)  # the run's own files (a tokenizer) are found wherever the run now lies
    chosen = _evaluation_checkpoint(run_dir)
    if chosen is None:
        raise InfolmError(f"run directory {run_dir} has no checkpoint yet")
    if full_splits:
        config.data.max_eval_tokens = None
    corpus = task_data(config)
    saved_vocab = Vocab.load(run_dir / "vocab.json")
    if saved_vocab.itos != corpus.vocab.itos:
        raise InfolmError(f"the data of {run_dir} no longer gives the vocabulary the run was trained with")
    model = build_model(config, len(corpus.vocab), eos_of(corpus.vocab), unk_of(corpus.vocab))
    _load_run_weights(model, run_dir, chosen)
    model.to(device).eval()
    return config, corpus, model


def load_run_model(run_dir: str | Path, device: str = "cpu") -> tuple[Config, LanguageModel, Path]:
    """Config, evaluation weights (best, else latest) and their checkpoint folder of a run, from the run
    directory alone: the model's size comes from the saved ``vocab.json``, no data is read or fetched."""
    from infolm.config import load_config
    from infolm.data.vocab import Vocab

    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise InfolmError(f"{run_dir} is not an infolm run directory (no config.yaml)")
    if not (run_dir / "vocab.json").is_file():
        raise InfolmError(f"run directory {run_dir} has no vocab.json")
    config = load_config(run_dir / "config.yaml")
    config.run.dir = str(run_dir)
    chosen = _evaluation_checkpoint(run_dir)
    if chosen is None:
        raise InfolmError(f"run directory {run_dir} has no checkpoint yet")
    vocab = Vocab.load(run_dir / "vocab.json")
    model = build_model(config, len(vocab), eos_of(vocab), unk_of(vocab))
    _load_run_weights(model, run_dir, chosen)
    model.to(device).eval()
    return config, model, chosen


def evaluate_best(config: Config, splits: Sequence[str]) -> dict[str, dict[str, float]]:
    """The task's metrics of a finished run's evaluation weights (best, else latest) on ``splits``."""
    loaded, data, model = load_run(config.run.dir)
    task = build_task(loaded, data)
    return {split: task.evaluate(model, split).values for split in splits}
