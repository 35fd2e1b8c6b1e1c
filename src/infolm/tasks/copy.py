"""``copy``: (source, target) pairs of the reverse copy task for an encoder-decoder (Melis thesis Sec. 2.3.3).

The data are the copy-task files (``python -m infolm.data.copy_task``, read with ``data.name=path``,
``data.level=word``): one example per line, ``source <rev> target``, the target the source reversed. Every
line of a split has the same source length S, and the target is as long as the source.

A row handed to the model is ``source, <rev>, target[:-1]`` (2S tokens): the encoder reads the source, the
decoder reads the marker and then the target shifted by one (teacher forcing). Its targets are the ignore index
over the source half and the target over the decoder's half, so the loss is on the copied symbols only.

Evaluation (thesis Fig. 2.4 plots the cross-entropy against the sequence length; "solves the task perfectly"
is a cross-entropy of zero): ``nll``, the teacher-forced cross-entropy per copied symbol in nats (the
selection metric, lower is better), and of the greedy copy (the decoder fed its own argmax from the marker on)
``token_accuracy``, the share of copied symbols right, and ``sequence_accuracy``, the share of examples copied
without an error.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from infolm.config import Config, DataConfig
from infolm.data.batch import Batch
from infolm.data.batching import IGNORE_INDEX
from infolm.data.copy_task import MARKER
from infolm.data.corpus import SPLITS, Corpus
from infolm.errors import InfolmError
from infolm.tasks.base import Metrics, ShuffledBatches, Task, register_task

if TYPE_CHECKING:
    from infolm.evaluation.generation import SamplingSettings

EVAL_NOTE = (
    "nll: teacher-forced nats per copied symbol (0: perfect copying, ln V: chance); token_accuracy / "
    "sequence_accuracy: the greedy copy's share of right symbols / of examples copied without an error"
)


@dataclasses.dataclass
class CopyConfig:
    # Batches come from data.batch_size / data.eval_batch_size; the examples from the data files.
    greedy: bool = True  # evaluate the greedy copy (token / sequence accuracy) besides the cross-entropy


@dataclasses.dataclass
class CopyPairs:
    """One split's examples: ``source (N, S)`` and ``target (N, S)`` symbol ids."""

    source: torch.Tensor
    target: torch.Tensor

    def __len__(self) -> int:
        return self.source.size(0)


def read_pairs(corpus: Corpus, split: str, source: str | None = None) -> CopyPairs:
    """The ``source <rev> target <eos>`` lines of ``split`` as equal-length pairs (refused with one line
    otherwise, naming ``source``, the split's file, where it is known)."""
    where = source or f"the {split} split of {corpus.name}"
    if MARKER not in corpus.vocab:
        where = source or f"the {corpus.name} data"
        raise InfolmError(f"task copy reads lines 'source {MARKER} target'; {where} has no {MARKER}")
    marker, eos = corpus.vocab.stoi[MARKER], corpus.vocab.eos_id
    stream, offsets = corpus.stream(split), corpus.sentence_offsets(split)
    widths = np.unique(np.diff(offsets))
    if len(widths) != 1:
        shortest, longest = int(widths[0]) - 1, int(widths[-1]) - 1
        raise InfolmError(
            f"task copy: the lines of {where} differ in length ({shortest} to {longest} tokens); "
            "write one length per file"
        )
    width = int(widths[0])  # S symbols, the marker, S symbols, <eos>
    if width < 4 or width % 2:
        raise InfolmError(
            f"task copy: a line of {where} must hold S symbols, {MARKER} and S symbols; got {width - 1} tokens"
        )
    length = (width - 2) // 2
    rows = stream[: int(offsets[-1])].view(-1, width)
    if not bool((rows[:, length] == marker).all()) or int((rows == marker).sum()) != rows.size(0):
        raise InfolmError(
            f"task copy: every line of {where} must be S symbols, {MARKER}, S symbols "
            f"(source and target of equal length, {MARKER} once, in the middle)"
        )
    if not bool((rows[:, -1] == eos).all()):
        raise InfolmError(f"task copy: a line of {where} does not end where the corpus puts <eos>")
    return CopyPairs(rows[:, :length].clone(), rows[:, length + 1 : -1].clone())


@register_task("copy", config=CopyConfig)
class Copy(Task):
    """(source, target) pairs for an encoder-decoder: loss on the target only; greedy copy accuracy."""

    carries_state = False
    provides = frozenset({"next-token", "source-target"})
    serves = frozenset({"seq2seq"})
    generates = True

    def __init__(self, config: CopyConfig) -> None:
        self.config = config
        self.data = DataConfig()
        self.seed = 0
        self.marker = 0
        self.pairs: dict[str, CopyPairs] = {}

    @classmethod
    def input_length(cls, config: CopyConfig, data: DataConfig) -> int | None:
        return None  # the files decide (2S per row)

    @classmethod
    def load_data(cls, config: Config) -> Corpus:
        """The corpus ``config.data`` names, its lines checked as copy examples before anything is built
        or written to the run directory."""
        corpus: Corpus = super().load_data(config)
        for split in SPLITS:
            read_pairs(corpus, split, getattr(config.data, split))
        return corpus

    def setup(self, config: Config, corpus: Corpus) -> None:
        self.data, self.seed = config.data, config.run.seed
        self.pairs = {split: read_pairs(corpus, split, getattr(config.data, split)) for split in SPLITS}
        self.marker = corpus.vocab.stoi[MARKER]

    def batch(self, split: str, index: np.ndarray | torch.Tensor) -> Batch:
        """Rows ``source, <rev>, target[:-1]`` with targets ``ignore x S, target``. (B, 2S)"""
        index = torch.as_tensor(index, dtype=torch.long)
        source, target = self.pairs[split].source[index], self.pairs[split].target[index]
        start = source.new_full((source.size(0), 1), self.marker)
        inputs = torch.cat([source, start, target[:, :-1]], dim=1)
        targets = torch.cat([torch.full_like(source, IGNORE_INDEX), target], dim=1)
        return Batch(inputs, targets)

    def train_batches(self, rank: int = 0, world: int = 1) -> ShuffledBatches:
        count = len(self.pairs["train"])
        if count < world:
            raise InfolmError(f"the training split has {count} examples, fewer than the {world} processes")
        return ShuffledBatches(
            count, lambda rows, rng: self.batch("train", rows), self.data.batch_size, self.seed, rank, world
        )

    @torch.no_grad()
    def greedy_copy(self, model: Any, source: torch.Tensor) -> torch.Tensor:
        """The decoder's argmax symbols, fed back as its next inputs, from the encoder's state and the marker. (B, S)"""
        state = model.encode(source)
        token = source.new_full((source.size(0), 1), self.marker)
        out = []
        for _ in range(source.size(1)):  # sequential by nature: each input is the previous step's prediction
            step = model.decode(token, state)
            token, state = step.logits[:, -1].argmax(-1, keepdim=True), step.state
            out.append(token)
        return torch.cat(out, dim=1)

    def generate(
        self, model: Any, prompt: list[int], settings: SamplingSettings, generator: torch.Generator
    ) -> list[list[int]]:
        """The greedy copy of ``prompt`` (a source), after the marker; sampling settings do not apply."""
        if not prompt:
            raise InfolmError("task copy copies a source: give the symbols to copy as the prompt")
        if self.marker in prompt:
            raise InfolmError(f"task copy writes {MARKER} after the source itself: give only the symbols to copy")
        was_training = model.training
        model.eval()
        try:
            copied = self.greedy_copy(model, torch.tensor([prompt]))[0].tolist()
        finally:
            model.train(was_training)
        return [[self.marker, *copied]]

    @torch.no_grad()
    def evaluate(self, model: Any, split: str, device: torch.device | str = "cpu") -> Metrics:
        pairs = self.pairs[split]
        nll_sum, right_tokens, right_rows = 0.0, 0, 0
        was_training = model.training
        model.eval()
        try:
            for start in range(0, len(pairs), self.data.eval_batch_size):
                index = torch.arange(start, min(start + self.data.eval_batch_size, len(pairs)))
                batch = self.batch(split, index).to(device)
                logits = model(batch.inputs).logits.float()  # (B, 2S, V)
                nll_sum += float(
                    F.cross_entropy(
                        logits.reshape(-1, logits.size(-1)),
                        batch.targets.reshape(-1),
                        ignore_index=IGNORE_INDEX,
                        reduction="sum",
                    )
                )
                if self.config.greedy:
                    copied = self.greedy_copy(model, pairs.source[index].to(device)) == pairs.target[index].to(device)
                    right_tokens += int(copied.sum())
                    right_rows += int(copied.all(dim=1).sum())
        finally:
            model.train(was_training)
        symbols = pairs.target.numel()
        values = {"nll": nll_sum / symbols, "examples": float(len(pairs)), "length": float(pairs.source.size(1))}
        log_names = {"nll": "loss"}
        if self.config.greedy:
            values["token_accuracy"] = right_tokens / symbols
            values["sequence_accuracy"] = right_rows / len(pairs)
            log_names |= {"token_accuracy": "token_accuracy", "sequence_accuracy": "sequence_accuracy"}
        return Metrics(values, selection="nll", log_names=log_names, notes=[EVAL_NOTE])
