"""A run's record: the small files of a finished run directory, kept where version control holds them.

A run directory holds megabytes of checkpoints beside a few kilobytes that every table is built from:
``config.yaml`` and ``overrides.json`` (what ran), ``metrics.jsonl`` (the log), ``train-summary.json``
(how it ended) and the cached scores (``eval-*.json``, ``report-*.json``). A long experiment can
outlive the machine its runs trained on, so a driver copies those files into a folder of records in the
repository (``archive_run``), and rebuilds its table from the run directories and the records together.

A record is read-only evidence: its cached scores are final, nothing in it is scored again, and a
table must take them as they are (``is_record``). ``record.json`` says where it came from, what its
checkpoints said of how it trained (commits, versions, machine), and what the driver knew of the run
(its commands, wall time). A record keeps no weights (git history is not a weight store): a protocol
that continues a run from its weights records their sha256 and names the command that trains them again.

A run longer than the life of its machine (a working tree and its ``runs/`` are laid anew on every
machine) is *parked* between machines: ``park_run`` keeps what resuming it needs (its top-level files,
its latest step checkpoint, ``checkpoints/best``) in one folder, checksummed, to be copied to the next
machine by hand (it holds weights, so version control ignores it), and
``unpark_run`` lays it out again as a run directory that ``infolm train`` resumes, bit for bit from that
checkpoint. A parked run is not a record: it has not ended, and its copy is dropped once it has.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infolm.errors import InfolmError
from infolm.training.checkpoint import BEST, CHECKPOINTS, latest_checkpoint, write_json_atomic
from infolm.training.run_lock import run_dir_in_use

RECORD = "record.json"
LEFT_OUT = frozenset({"vocab.json"})  # rebuilt from the config's data section; 100 kB a run on PTB
MAX_FILE_BYTES = 4_000_000  # a log past this is no longer a small file: refused, never truncated
PARKED = "parked.json"
MAX_PARKED_WEIGHTS_BYTES = 64_000_000  # a parked run's weights (16M float32 parameters) at most


def is_record(run: str | Path) -> bool:
    """Whether ``run`` is an archived record (no checkpoints: its cached scores are final)."""
    return (Path(run) / RECORD).is_file()


def runs_and_records(folders: list[Path], accept: Callable[[Path], bool]) -> list[Path]:
    """The runs found in ``folders`` (run directories first, then folders of records), those that
    ``accept`` takes, one per name: an earlier folder's run stands for a later one's of the same name.
    Sorted by name; hidden folders (an archive in progress) are skipped."""
    found: dict[str, Path] = {}
    for folder in folders:
        if folder.is_dir():
            for path in sorted(folder.iterdir()):
                if path.is_dir() and not path.name.startswith(".") and accept(path):
                    found.setdefault(path.name, path)
    return [found[name] for name in sorted(found)]


def record_files(run: Path) -> list[Path]:
    """The files of ``run`` that its record keeps: every top-level file but hidden ones (the lock),
    the vocabulary and temporary files; folders (``checkpoints/``) are left out."""
    return [
        path
        for path in sorted(run.iterdir())
        if path.is_file()
        and not path.name.startswith(".")
        and path.name not in LEFT_OUT
        and path.suffix != ".tmp"
        and path.name != RECORD
    ]


def checkpoint_provenance(run: Path) -> dict[str, Any]:
    """What the run's checkpoints say of how it trained: the commit, versions and machine of its best
    checkpoint, and every commit that wrote a checkpoint (a resumed run may span several)."""
    metas = sorted((run / "checkpoints").glob("*/meta.json")) if (run / "checkpoints").is_dir() else []
    found: dict[str, Any] = {"commits": []}
    for path in metas:
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        commit = meta.get("git_commit")
        if commit and commit not in found["commits"]:
            found["commits"].append(commit)
        if path.parent.name == "best":
            found["best"] = {key: meta.get(key) for key in ("step", "git_commit", "versions", "machine")}
    return found


def archive_run(
    run: str | Path,
    records: str | Path,
    meta: dict[str, Any] | None = None,
    extra: dict[str, Path] | None = None,
) -> Path:
    """Copy the small files of the run directory ``run`` into ``records/<run's name>``, with a
    ``record.json`` holding ``meta``, and each file of ``extra`` (a driver's score kept outside the run
    directory) under its name there; an earlier record of the same name is replaced whole. No weights
    are copied. The copy is made in a hidden folder beside and renamed into place, so an interrupted
    archive never leaves a half-written record. Refuses (``InfolmError``) a run that is training now, a
    run directory without a log, and a file too large for version control."""
    run, records = Path(run), Path(records)
    if not (run / "metrics.jsonl").is_file():
        raise InfolmError(f"{run} is not a run directory (no metrics.jsonl)")
    if is_record(run):
        raise InfolmError(f"{run} is already a record")
    if run_dir_in_use(run):
        raise InfolmError(f"{run} is training now: archive it when it has ended")
    files = record_files(run)
    extra = extra or {}
    for name, path in extra.items():
        if not path.is_file() or name in {p.name for p in files} | {RECORD} or "/" in name:
            raise InfolmError(f"{path} cannot be kept as {name!r} in the record of {run}")
    for path in [*files, *extra.values()]:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InfolmError(f"{path} is {size} bytes, more than a record keeps ({MAX_FILE_BYTES})")
    records.mkdir(parents=True, exist_ok=True)
    target = records / run.name
    staging = records / f".{run.name}.new"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for path in files:
        shutil.copy2(path, staging / path.name)
    for name, path in extra.items():
        shutil.copy2(path, staging / name)
    kept = [p.name for p in files] + list(extra)
    known: dict[str, Any] = {"source": str(run.resolve()), "files": kept, "checkpoints": checkpoint_provenance(run)}
    write_json_atomic(staging / RECORD, known | (meta or {}))
    _replace_dir(staging, target)
    return target


def sha256_file(path: Path) -> str:
    """The sha256 of the file at ``path``, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def park_run(run: str | Path, folder: str | Path) -> Path:
    """Keep the run directory ``run``, which has not ended, in ``folder/<run's name>`` to be resumed on
    another machine: its top-level files (the vocabulary too), its latest step checkpoint and
    ``checkpoints/best``, whose weights are kept once when they are the latest step's own bytes (an
    improving run's best is its latest evaluation). ``parked.json`` lists every file with its sha256.
    An earlier parked copy is replaced whole (staged in a hidden folder, renamed into place). Refuses a
    run training now (stop it first), one without a step checkpoint and a copy over
    :data:`MAX_WEIGHTS_BYTES` plus the small files' limit."""
    run, folder = Path(run), Path(folder)
    if not (run / "metrics.jsonl").is_file():
        raise InfolmError(f"{run} is not a run directory (no metrics.jsonl)")
    if run_dir_in_use(run):
        raise InfolmError(f"{run} is training now: stop it before parking it")
    latest = latest_checkpoint(run)
    if latest is None:
        raise InfolmError(f"{run} has no step checkpoint to resume from")
    copies = [(path, path.name) for path in sorted(run.iterdir()) if path.is_file() and not path.name.startswith(".")]
    copies = [(path, name) for path, name in copies if path.suffix != ".tmp"]
    copies += [
        (path, f"{CHECKPOINTS}/{latest.name}/{path.name}") for path in sorted(latest.iterdir()) if path.is_file()
    ]
    best, shared = run / CHECKPOINTS / BEST, []
    for path in sorted(best.iterdir()) if best.is_dir() else []:
        twin = latest / path.name
        if path.suffix == ".safetensors" and twin.is_file() and _same_weights(path, twin):
            shared.append(path.name)
        elif path.is_file():
            copies.append((path, f"{CHECKPOINTS}/{BEST}/{path.name}"))
    size = sum(path.stat().st_size for path, _ in copies)
    if size > MAX_PARKED_WEIGHTS_BYTES + MAX_FILE_BYTES:
        raise InfolmError(f"{run} would park {size} bytes, more than version control keeps of a run")
    folder.mkdir(parents=True, exist_ok=True)
    target, staging = folder / run.name, folder / f".{run.name}.new"
    shutil.rmtree(staging, ignore_errors=True)
    for path, name in copies:
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, staging / name)
    files = {name: sha256_file(staging / name) for _, name in copies}
    write_json_atomic(
        staging / PARKED,
        {"source": str(run.resolve()), "latest": latest.name, "files": files, "best_as_latest": shared},
    )
    _replace_dir(staging, target)
    return target


def _same_weights(a: Path, b: Path) -> bool:
    """Whether two weight files hold the same tensors under the same names: the same bytes, or files
    that differ only in how a tied tensor was named (the best weights are written from the evaluation
    copy, the step checkpoint from the training one). A file safetensors cannot read is no match."""
    if sha256_file(a) == sha256_file(b):
        return True
    import torch
    from safetensors import safe_open

    def tensors(path: Path) -> dict[str, torch.Tensor]:
        with safe_open(str(path), framework="pt") as handle:
            aliases = handle.metadata() or {}
            state = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
        state |= {alias: state[kept] for alias, kept in aliases.items() if alias != "format" and kept in state}
        return state

    try:
        first, second = tensors(a), tensors(b)
    except Exception:  # safetensors raises its own error types on files it cannot read
        return False
    return first.keys() == second.keys() and all(
        first[k].dtype == second[k].dtype and torch.equal(first[k], second[k]) for k in first
    )


def unpark_run(parked: str | Path, out: str | Path) -> Path | None:
    """Lay the parked run ``parked`` out again as ``out/<its name>``, every file checked against its
    sha256 (an error names the first that differs), and the best weights it shares with its latest
    checkpoint copied back; staged in a hidden folder and renamed into place. None, and nothing written,
    when ``out`` already has a run of that name: the run there stands (it may be further on)."""
    parked, out = Path(parked), Path(out)
    target = out / parked.name
    if target.exists():
        return None
    try:
        known = json.loads((parked / PARKED).read_text())
    except (OSError, ValueError):
        raise InfolmError(f"{parked} is not a parked run (no readable {PARKED})") from None
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f".{parked.name}.unpark"
    shutil.rmtree(staging, ignore_errors=True)
    for name, digest in known["files"].items():
        source = parked / name
        if not source.is_file() or sha256_file(source) != digest:
            shutil.rmtree(staging, ignore_errors=True)
            raise InfolmError(f"{source}: missing or not the file that was parked (sha256)")
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, staging / name)
    for name in known.get("best_as_latest", []):
        (staging / CHECKPOINTS / BEST).mkdir(parents=True, exist_ok=True)
        shutil.copy2(staging / CHECKPOINTS / known["latest"] / name, staging / CHECKPOINTS / BEST / name)
    os.replace(staging, target)
    return target


def _replace_dir(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``, an existing ``target`` set aside first and removed after."""
    if target.exists():
        old = target.with_name(f".{target.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(staging, target)
        shutil.rmtree(old)
    else:
        os.replace(staging, target)
