"""Shared fixtures: a small corpus, tiny models, the repository root, a CLI runner (in a new process or
in this one)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
# A mirror of the real datasets, where the environment provides one (CI does); tests that need it skip
# without it, and every other test makes the files it needs.
DATA_MIRROR = Path(os.environ["INFOLM_DATA_MIRROR"]) if os.environ.get("INFOLM_DATA_MIRROR") else None

os.environ.setdefault("INFOLM_OFFLINE", "1")
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def small_corpus():
    """A PTB slice with its own small vocabulary (fast to train on)."""
    from infolm.data import Corpus, read_text

    texts = {}
    for split, lines in (("train", 400), ("valid", 60), ("test", 60)):
        text = read_text(ROOT / "src/infolm/data/ptb" / f"ptb.{split}.txt.gz").splitlines()
        texts[split] = "\n".join(text[:lines])
    vocab_text = "\n".join(texts.values())
    from infolm.data.corpus import tokenize_lines
    from infolm.data.vocab import EOS, Vocab

    vocab = Vocab.from_tokens((t for line in tokenize_lines(vocab_text, "word") for t in line), specials=(EOS,))
    return Corpus.from_texts("ptb-small", "word", texts, vocab=vocab)


@pytest.fixture(scope="session")
def copy_task_files(tmp_path_factory):
    """Reverse-copy files (5 symbols of 12, 200 / 16 / 16 examples) for ``data.name=path``: the data section."""
    from infolm.data.copy_task import CopyTaskConfig, write_copy_task

    out = tmp_path_factory.mktemp("reverse-copy")
    paths = write_copy_task(out, CopyTaskConfig(length=5, vocab_size=12, train=200, valid=16, test=16, seed=1))
    return {"name": "path", "level": "word", **{split: str(path) for split, path in paths.items()}}


@pytest.fixture(scope="session")
def ptb_slice_files(tmp_path_factory):
    """The first 150 / 30 / 30 lines of PTB as text files for ``data.name=path``: the data section."""
    from infolm.data import read_text

    out = tmp_path_factory.mktemp("ptb-slice")
    section = {"name": "path", "level": "word"}
    for split, count in (("train", 150), ("valid", 30), ("test", 30)):
        lines = read_text(ROOT / "src/infolm/data/ptb" / f"ptb.{split}.txt.gz").splitlines()[:count]
        (out / f"{split}.txt").write_text("\n".join(lines) + "\n")
        section[split] = str(out / f"{split}.txt")
    return section


@pytest.fixture(scope="session")
def cola_task_files(tmp_path_factory):
    """A tiny CoLA-format set (100 labelled sentences, 90 to train on; the same file as test) for ``data.name=path``."""
    import numpy as np

    out = tmp_path_factory.mktemp("cola")
    rng = np.random.default_rng(0)
    words = ["the", "cat", "dog", "sat", "ran", "on", "a", "mat", "big", "small"]
    rows = [(1, " ".join(rng.choice(words, size=5))) for _ in range(66)]
    rows += [(0, " ".join(rng.choice(words, size=3)) + " sat sat") for _ in range(34)]
    text = "".join(f"src\t{label}\t\t{sentence}\n" for label, sentence in rows)
    (out / "train.tsv").write_text(text)
    (out / "test.tsv").write_text(text)
    return {"name": "path", "train": str(out / "train.tsv"), "test": str(out / "test.tsv")}


@dataclasses.dataclass
class DrawsConfig:
    weight: float = 1.0  # multiplier in the Composite


@pytest.fixture
def drawing_term(monkeypatch):
    """The objective ``draws``, registered for one test: a term that draws from torch's global generator
    before and after the model's pass and adds exactly nothing to the loss or the gradient."""
    from infolm.objectives.base import OBJECTIVES, Objective, Terms
    from infolm.registry import Entry

    class Draws(Objective):
        def __init__(self, config: DrawsConfig) -> None:
            super().__init__()
            self.config = config

        def transform_batch(self, batch):
            torch.rand(101)
            return batch

        def forward(self, model, batch, output):
            torch.rand(37)
            return Terms(losses={"draws": output.logits.sum() * 0.0})

        def loss_scale(self, vocab_size: int) -> float:
            return 0.0  # the Composite's scale, and so the divergence rule, as without the term

    monkeypatch.setitem(OBJECTIVES._entries, "draws", Entry("draws", Draws, DrawsConfig, "draws, adds nothing"))
    return "draws"


def tiny_model(name: str, vocab_size: int, **overrides):
    from infolm.models import MODELS

    settings = {
        "lstm": {"emb": 16, "hidden": 16, "layers": 2, "dropout": 0.2, "dropout_hidden": 0.1},
        "gru": {"emb": 12, "hidden": 16, "layers": 2, "dropout": 0.2, "dropout_hidden": 0.1},
        "transformer": {"dim": 16, "layers": 2, "heads": 2, "max_len": 64},
        "melis": {
            "hidden": 16,
            "layers": 2,
            "rounds": 3,
            "rank": 4,
            "dropout_input": 0.1,
            "dropout_state": 0.1,
            "dropout_cell": 0.1,
            "dropout_output": 0.1,
        },
    }.get(name, {})
    settings.update(overrides)
    return MODELS.build(name, settings, vocab_size=vocab_size)


def _cli_env(env: dict | None) -> dict:
    # No progress lines (training prints one on stderr every 30 s when stdout is not a terminal):
    # stderr holds only what the test looks for.
    return {**os.environ, "OMP_NUM_THREADS": "1", "INFOLM_PROGRESS_SECONDS": "1e9", **(env or {})}


def run_cli(
    *args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "infolm", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=_cli_env(env),
        timeout=timeout,
    )


def start_cli(*args: str) -> subprocess.Popen:
    """``infolm ARGS`` started in a new process, as ``run_cli`` runs it; ``finish_cli`` waits for it."""
    return subprocess.Popen(
        [sys.executable, "-m", "infolm", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_cli_env(None),
    )


def finish_cli(proc: subprocess.Popen, timeout: int = 300) -> subprocess.CompletedProcess:
    """What ``run_cli`` returns, for a process of ``start_cli`` (killed if it outlives ``timeout``)."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def run_cli_concurrently(*commands: list[str], timeout: int = 300) -> list[subprocess.CompletedProcess]:
    """``run_cli`` of each command, the processes started together so that they share the machine's cores;
    the results in the order of the commands."""
    procs = [start_cli(*args) for args in commands]
    try:
        return [finish_cli(proc, timeout) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def run_in_process(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``infolm ARGS`` through the CLI's ``main`` in this process, from the repository root: what ``run_cli``
    returns, without starting an interpreter and importing torch again. For runs a test only needs (a
    reference, a run to report on); what a test asserts about a fresh process goes through ``run_cli``."""
    from infolm.cli.main import main

    stdout, stderr = io.StringIO(), io.StringIO()
    settings = {"INFOLM_PROGRESS_SECONDS": "1e9", **(env or {})}
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    try:
        with contextlib.chdir(ROOT), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = main(list(args))
            except SystemExit as exit_:  # argparse's usage errors and --help
                code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(["infolm", *args], code, stdout.getvalue(), stderr.getvalue())


def _kill_once_written(proc: subprocess.Popen, path: Path, timeout: float) -> None:
    """SIGKILL ``proc`` as soon as ``path`` exists (or at ``timeout`` seconds); at once if it has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and not path.exists():
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def train_killed_after_checkpoint(*args: str, run_dir: Path, step: int, timeout: float = 240) -> Iterator[None]:
    """A real ``infolm train ARGS run.dir=RUN_DIR`` process, SIGKILLed as soon as its checkpoint of ``step`` is
    written. The ``with`` body runs while it trains (an uninterrupted reference run, on the other core);
    the block ends once the process is dead, and fails if it ended any other way."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "infolm", "train", *args, f"run.dir={run_dir}"],
        cwd=ROOT,
        env=_cli_env(None),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    checkpoint = Path(run_dir) / "checkpoints" / f"step-{step:08d}"
    killer = threading.Thread(target=_kill_once_written, args=(proc, checkpoint, timeout))
    killer.start()
    try:
        yield
    finally:
        killer.join()
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.returncode == -signal.SIGKILL, f"infolm train exited with {proc.returncode} before the kill: {stderr}"
