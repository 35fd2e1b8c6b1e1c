"""Atomic, resumable checkpoints: a folder per checkpoint, written under a temporary name and renamed.

Layout of ``checkpoints/step-00000100/``: ``model.safetensors`` (weights used for evaluation:
the averaged ones when weight averaging is on), ``raw_model.safetensors`` (training weights,
only with averaging), ``trainer.pt`` (optimizer, schedule, RNG, data position, recurrent state:
tensors and plain containers only, loaded with ``weights_only=True``), ``meta.json``. ``best/``
holds the evaluation weights of the best validation loss and, when divergence restarts are on, what a
restart restores (``raw_model.safetensors`` with averaging, ``restart.pt``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from infolm.errors import InfolmError

CHECKPOINTS = "checkpoints"
BEST = "best"


def _atomic_dir(final: Path, write: Any) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=final.parent))
    try:
        write(tmp)
        _fsync_dir(tmp)
        if final.exists():
            trash = final.with_name(f".old-{final.name}-{os.getpid()}")
            os.replace(final, trash)
            os.replace(tmp, final)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    for child in path.iterdir():
        with open(child, "rb") as handle:
            os.fsync(handle.fileno())


def write_json_atomic(path: Path, payload: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str))
    os.replace(tmp, path)


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: nn.Module,
    trainer_state: dict[str, Any],
    meta: dict[str, Any],
    eval_model: nn.Module | None = None,
    keep: int = 2,
) -> Path:
    """Write ``checkpoints/step-XXXXXXXX`` atomically and prune all but the ``keep`` most recent."""
    root = run_dir / CHECKPOINTS
    final = root / f"step-{step:08d}"

    def write(tmp: Path) -> None:
        if eval_model is not None:
            save_weights(eval_model, str(tmp / "model.safetensors"))
            save_weights(model, str(tmp / "raw_model.safetensors"))
        else:
            save_weights(model, str(tmp / "model.safetensors"))
        torch.save(trainer_state, tmp / "trainer.pt")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, default=str))

    _atomic_dir(final, write)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


RESTART = "restart.pt"
OBJECTIVE = "objective.pt"


def save_best(
    run_dir: Path,
    model: nn.Module,
    meta: dict[str, Any],
    raw_model: nn.Module | None = None,
    restart_state: dict[str, Any] | None = None,
    objective_state: dict[str, Any] | None = None,
) -> None:
    """Write ``checkpoints/best``: the evaluation weights, ``objective.pt`` (the objective's state, which
    ``run.init_from`` continues) and, for divergence restarts (Melis Sec. 4.4), the training weights
    (``raw_model``, with averaging) and ``restart.pt`` (optimizer, averager and objective state)."""

    def write(tmp: Path) -> None:
        save_weights(model, str(tmp / "model.safetensors"))
        if objective_state is not None:
            torch.save(objective_state, tmp / OBJECTIVE)
        if raw_model is not None:
            save_weights(raw_model, str(tmp / "raw_model.safetensors"))
        if restart_state is not None:
            torch.save(restart_state, tmp / RESTART)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, default=str))

    _atomic_dir(run_dir / CHECKPOINTS / BEST, write)


def list_checkpoints(run_dir: Path) -> list[Path]:
    root = run_dir / CHECKPOINTS
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-"))


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def save_weights(model: nn.Module, path: str | Path) -> None:
    """``model``'s state dict as safetensors, each tensor once: a tensor that another name already holds
    (tied weights) is written once and the other name is recorded in the metadata (``alias: kept``, the
    layout of safetensors' ``save_model``). Each tensor is written from its own copy: cuDNN's LSTM keeps
    its weights as views of one flat buffer on the GPU, which safetensors refuses to write as they are."""
    tensors: dict[str, torch.Tensor] = {}
    metadata = {"format": "pt"}
    kept: dict[tuple[Any, ...], str] = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.device, tensor.dtype, tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))
        if tensor.numel() and key in kept:
            metadata[name] = kept[key]
            continue
        kept[key] = name
        tensors[name] = tensor.detach().to("cpu", copy=True).contiguous()
    save_file(tensors, str(path), metadata=metadata)


def load_weights_file(model: nn.Module, path: str | Path) -> list[str]:
    """Load a file of :func:`save_weights` (or of safetensors' ``save_model``) into ``model``, on whatever
    device it is; returns the names the file lacks. A name the model does not have is an error."""
    state = load_file(str(path))
    with safe_open(str(path), framework="pt") as handle:
        aliases = handle.metadata() or {}
    for alias, kept in aliases.items():
        if alias != "format" and kept in state:
            state[alias] = state[kept]
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected:
        raise RuntimeError(f"unexpected weights: {unexpected[:3]}")
    return list(missing)


def load_weights(model: nn.Module, checkpoint: Path, raw: bool = False) -> list[str]:
    """Load a checkpoint's weights into ``model``; returns the names the checkpoint lacks."""
    name = "raw_model.safetensors" if raw and (checkpoint / "raw_model.safetensors").exists() else "model.safetensors"
    try:
        return load_weights_file(model, checkpoint / name)
    except RuntimeError as error:
        if str(error).startswith("unexpected weights"):
            raise RuntimeError(f"checkpoint {checkpoint} has {error}") from None
        raise


def load_complete_weights(model: nn.Module, checkpoint: Path, raw: bool = False) -> None:
    """:func:`load_weights` for continuing a run (resume, restore, restart): a checkpoint that lacks any of
    the model's weights was written for another model, and is refused in one line naming them."""
    missing = load_weights(model, checkpoint, raw)
    if missing:
        raise InfolmError(missing_weights(checkpoint, missing))


def missing_weights(checkpoint: Path, missing: list[str], shown: int = 8) -> str:
    """The one line that refuses a checkpoint lacking ``missing`` weights of the model being continued."""
    names = ", ".join(missing[:shown]) + (f" and {len(missing) - shown} more" if len(missing) > shown else "")
    return (
        f"checkpoint {checkpoint} lacks {len(missing)} weight(s) of this model ({names}): it was written for "
        "another model configuration; continue it with the config it was trained with, or use another run.dir"
    )


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(checkpoint / "trainer.pt", weights_only=True)
    return state


def load_objective_state(checkpoint: Path) -> dict[str, Any] | None:
    """The objective's state saved with a checkpoint (``best/objective.pt`` or a step's trainer state)."""
    if (checkpoint / OBJECTIVE).exists():
        state: dict[str, Any] = torch.load(checkpoint / OBJECTIVE, weights_only=True)
        return state
    if (checkpoint / "trainer.pt").exists():
        objective: dict[str, Any] | None = load_trainer_state(checkpoint).get("objective")
        return objective
    return None


def load_restart_state(checkpoint: Path) -> dict[str, Any] | None:
    """The optimizer / averager / objective state saved with ``best`` for restarts, if any."""
    path = checkpoint / RESTART
    if not path.exists():
        return None
    state: dict[str, Any] = torch.load(path, weights_only=True)
    return state


def set_aside(checkpoint: Path) -> Path:
    """Rename a damaged checkpoint to ``damaged-<name>`` beside it: kept for inspection, never deleted,
    and out of the way of resuming, pruning and later checkpoints of the same step."""
    target = checkpoint.with_name(f"damaged-{checkpoint.name}")
    suffix = 1
    while target.exists():
        suffix += 1
        target = checkpoint.with_name(f"damaged-{checkpoint.name}-{suffix}")
    os.replace(checkpoint, target)
    return target


def newest_intact_checkpoint(run_dir: Path, model: nn.Module) -> tuple[Path, dict[str, Any]] | None:
    """Load the newest checkpoint that reads back (training weights into ``model``, and its trainer
    state); each newer one that does not is set aside with a warning on stderr. None if none is left."""
    import sys

    for checkpoint in reversed(list_checkpoints(run_dir)):
        try:
            missing = load_weights(model, checkpoint, raw=True)
            state = load_trainer_state(checkpoint)
        except Exception as error:  # safetensors and torch.load raise their own types on damaged files
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            kept = set_aside(checkpoint)
            sys.stderr.write(
                f"infolm: warning: checkpoint {checkpoint} is damaged ({reason}); kept as {kept.name}, "
                "resuming from the newest intact checkpoint\n"
            )
            continue
        if missing:  # intact, but of another model: refused, never set aside
            raise InfolmError(missing_weights(checkpoint, missing))
        return checkpoint, state
    return None
