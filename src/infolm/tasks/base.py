"""The task contract: what differs between shapes of learning (token streams, sentences, masked
encoders, labeled sentences) lives in a task, never in the trainer.

A task is registered by name, configured by the ``task:`` section of a config, and built by
``build()``. It owns the training batches (a resumable iterator per data-parallel rank), whether a
recurrent state is carried between batches, and evaluation of a model on a split, which returns
:class:`Metrics` naming the one number (and its direction) that decides ``best/``, early stopping,
NT-ASGD triggers and averaging decisions. It also declares what it provides (batch features that
objectives may need) and which model protocols it serves; ``infolm.compatibility`` checks these
declarations when the config is read.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from infolm.data.batch import Batch
from infolm.registry import Registry

if TYPE_CHECKING:
    from infolm.config import Config, DataConfig
    from infolm.data.corpus import Corpus
    from infolm.evaluation.generation import SamplingSettings
    from infolm.evaluation.perplexity import TokenScores
    from infolm.models.base import LanguageModel

TASKS: Registry[Task] = Registry("task")
register_task = TASKS.register

# Batch features a task may provide and an objective may need.
FEATURES = {
    "next-token": "next-token targets",
    "stream": "windows of one running text (consecutive sentences in order)",
    "carried-state": "a recurrent state carried from batch to batch",
    "sentences": "one padded sentence per row with its length",
    "latents": "per-sentence latent fields",
    "masked-positions": "masked positions with their original tokens",
    "masked-spans": "the masked n-grams of each row (span ids)",
    "sentence-pairs": "rows of two sentences, [CLS] A [SEP] B [SEP]",
    "labels": "a label per row",
    "source-target": "rows of a source and its target, the loss on the target half only",
}

# Model protocols a task may serve.
PROTOCOLS = {
    "causal-lm": "a language model over token ids (models.base.LanguageModel)",
    "latent-variable": "a latent-variable sentence model (posterior, prior, log_likelihood)",
    "vector-quantized": "a latent-variable model with a VQ-VAE latent (latent.vq.QuantizedLatentModel)",
    "encoder": "an encoder of per-token states and a sentence representation",
    "seq2seq": "an encoder-decoder reading rows of a source and the decoder's inputs (models.melis_seq2seq)",
}


@dataclasses.dataclass
class Metrics:
    """A task's numbers on one split, one of which selects among checkpoints."""

    values: dict[str, float]  # every number the task reports on the split, by name
    selection: str  # the name in ``values`` that decides best/, early stopping, NT-ASGD and averaging
    higher_is_better: bool = False  # perplexity: lower is better; MCC / accuracy: higher
    log_names: dict[str, str] = dataclasses.field(default_factory=dict)  # value -> name on metrics.jsonl
    # evaluation lines (only these values are logged); empty: every value under its own name
    notes: list[str] = dataclasses.field(default_factory=list)  # how to read the numbers

    def __post_init__(self) -> None:
        if self.selection not in self.values:
            raise ValueError(f"selection metric {self.selection!r} is not among {sorted(self.values)}")

    @property
    def score(self) -> float:
        return float(self.values[self.selection])

    @property
    def loss(self) -> float:
        """The selection metric as a quantity to minimize (negated when higher is better)."""
        return -self.score if self.higher_is_better else self.score

    def log_name(self, name: str) -> str:
        return self.log_names.get(name, name)

    def logged(self) -> dict[str, float]:
        """The values written on an evaluation line of metrics.jsonl, under their log names."""
        if not self.log_names:
            return dict(self.values)
        return {self.log_names[k]: v for k, v in self.values.items() if k in self.log_names}

    def report(self) -> dict[str, Any]:
        """What ``infolm evaluate`` prints: every value, then the notes if any."""
        out: dict[str, Any] = dict(self.values)
        if self.notes:
            out["notes"] = list(self.notes)
        return out


class Batches(Protocol):
    """A rank's training batches, epoch after epoch, resumable from its ``state_dict``."""

    def next_batch(self) -> Batch | None:
        """The next batch, or None at the end of an epoch (the call after that starts the next one)."""
        ...

    def __len__(self) -> int:
        """Batches per epoch (progress bars)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Position and random state as tensors and plain containers (``torch.load(weights_only=True)``)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Task:
    """Base class of a task. Subclasses set ``config`` (their registered dataclass) and the
    declarations below, and implement ``setup``, ``train_batches`` and ``evaluate``."""

    config: Any
    carries_state: bool = False  # the trainer carries the model's state from one batch to the next
    provides: frozenset[str] = frozenset()  # batch features (FEATURES) the task's batches carry
    serves: frozenset[str] = frozenset({"causal-lm"})  # model protocols (PROTOCOLS) it can train
    generates: bool = False  # implements ``generate`` (what ``infolm generate`` samples from)
    scores_tokens: bool = False  # implements ``token_scores`` (what ``infolm evaluate --interpolate`` mixes)

    @classmethod
    def load_data(cls, config: Config) -> Any:
        """The data the task trains on, read before any model is built. Default: the corpus that
        ``config.data`` names. Whatever it returns has a ``vocab`` (saved with the run, checked when
        the run is loaded, its size the model's) and is what ``setup`` and the objectives receive."""
        from infolm.data import load_corpus

        return load_corpus(config.data)

    @classmethod
    def check_train_data(cls, config: Config, data: Any) -> None:
        """Refuse, with one ``InfolmError`` line, data ``load_data`` returned that training cannot use
        (called before the run directory is written; evaluating a run does not call it). Default: none."""

    @classmethod
    def init_checkpoint(cls, config: Config) -> str:
        """Which checkpoint of ``run.init_from`` a run starts from: ``best`` (its evaluation weights,
        best/: AWD-LSTM's fine-tuning phase restarts from the best model) or ``last`` (its final step)."""
        return "best"

    @classmethod
    def input_length(cls, config: Any, data: DataConfig) -> int | None:
        """The longest input row the task feeds a model (None: unbounded), known from the config."""
        return None

    @classmethod
    def length_setting(cls) -> str:
        """The setting that bounds :meth:`input_length` (named in refusals)."""
        return "task.max_len"

    def setup(self, config: Config, corpus: Corpus) -> None:  # pragma: no cover - abstract
        """Indexes, splits and batch settings from the run's config and corpus (once, before use)."""
        raise NotImplementedError

    def train_batches(self, rank: int = 0, world: int = 1) -> Batches:  # pragma: no cover - abstract
        """Rank ``rank`` of ``world``'s training batches: disjoint rows of the same global batches."""
        raise NotImplementedError

    def evaluate(
        self, model: LanguageModel, split: str, device: torch.device | str = "cpu"
    ) -> Metrics:  # pragma: no cover - abstract
        """Deterministic metrics of ``model`` on ``split`` (eval mode; the model's mode is restored)."""
        raise NotImplementedError

    def generate(
        self, model: LanguageModel, prompt: list[int], settings: SamplingSettings, generator: torch.Generator
    ) -> list[list[int]]:  # pragma: no cover - abstract
        """Sampled continuations of ``prompt`` (token ids), one list per sample."""
        raise NotImplementedError

    def token_scores(
        self, model: LanguageModel, split: str, device: torch.device | str = "cpu"
    ) -> TokenScores:  # pragma: no cover - abstract
        """ln p(token | history) of every target of ``split`` in text order, with the segments of text
        the histories come from (their sum is ``evaluate``'s NLL sum)."""
        raise NotImplementedError


def numpy_rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """A numpy generator's state for a checkpoint: its big integers as strings (``weights_only``)."""
    state = dict(rng.bit_generator.state)
    state["state"] = {k: str(v) for k, v in state["state"].items()}
    return state


def set_numpy_rng_state(rng: np.random.Generator, state: dict[str, Any]) -> None:
    restored = dict(state)
    restored["state"] = {k: int(v) for k, v in state["state"].items()}
    rng.bit_generator.state = restored


class ShuffledBatches:
    """Rows shuffled each epoch into batches of ``batch_size``; ``make(rows, rng)`` builds the whole
    batch with a generator seeded by (seed, epoch, position), so a batch's random choices (masks) do
    not depend on what came before, and rank ``rank`` keeps rows ``rank::world`` of it: the ranks
    together train on exactly the batch one process would. Resumable: the state is the random state
    at the epoch's start and the position."""

    def __init__(
        self,
        count: int,
        make: Callable[[np.ndarray, np.random.Generator], Batch],
        batch_size: int,
        seed: int,
        rank: int,
        world: int,
    ) -> None:
        self.count, self.make = count, make
        self.batch_size, self.seed, self.rank, self.world = batch_size, seed, rank, world
        self.rng = np.random.default_rng(seed)
        self.epoch = 0
        self._start_epoch()

    def _start_epoch(self) -> None:
        self.epoch_start = numpy_rng_state(self.rng)
        order = self.rng.permutation(self.count)
        self.order = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        self.order = [b for b in self.order if len(b) >= self.world]
        self.position = 0

    def next_batch(self) -> Batch | None:
        if self.position >= len(self.order):
            self.epoch += 1
            self._start_epoch()
            return None
        rows = self.order[self.position]
        rng = np.random.default_rng([self.seed, self.epoch, self.position, 0])  # the 0: as single-process runs drew
        self.position += 1
        batch = self.make(rows, rng)
        if self.world == 1:
            return batch
        return batch.rows(torch.arange(self.rank, len(rows), self.world))

    def __len__(self) -> int:
        return len(self.order)

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "epoch": self.epoch, "rng": self.epoch_start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_numpy_rng_state(self.rng, state["rng"])
        self.epoch = int(state["epoch"])
        self._start_epoch()
        self.position = int(state["position"])


def perplexity(nll: float) -> float:
    """exp(nll), capped so that a diverged model gives a large finite number."""
    return math.exp(min(nll, 700.0))
