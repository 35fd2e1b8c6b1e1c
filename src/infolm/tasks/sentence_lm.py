"""``sentence-lm``: a causal LM over single sentences (the baseline of sentence-level latent-variable
models: Bowman et al. 2015, SentenceMIM, Melis thesis ch. 5).

One sentence per row: the inputs are ``<eos>`` (the start symbol) followed by the sentence, the
targets the sentence followed by ``<eos>``, so ``<eos>`` is the last target and is counted in every
score. No state is carried: each row starts from the model's initial state (zeros, or a learned one
when the model has it). Training batches are length-bucketed and padded; evaluation scores every
sentence of a split once, deterministically, and reports per-token and per-sentence NLL.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from infolm.config import Config, DataConfig
from infolm.data.batch import Batch
from infolm.data.batching import IGNORE_INDEX
from infolm.data.corpus import SPLITS, Corpus
from infolm.errors import InfolmError
from infolm.evaluation.generation import SamplingSettings, sample
from infolm.evaluation.perplexity import TokenScores
from infolm.models.base import LanguageModel
from infolm.tasks.base import Metrics, Task, numpy_rng_state, perplexity, register_task, set_numpy_rng_state

EOS_NOTE = "<eos> is counted: the last target of every sentence is <eos> (tokens include one per sentence)"


@dataclasses.dataclass
class SentenceLMConfig:
    max_len: int | None = None  # longest row in tokens, <eos> included: a longer sentence keeps its first
    # max_len - 1 tokens and its <eos> (Melis thesis Sec. 5.7.2: 35, "non-standard"); None: whole sentences
    truncate: list[str] = dataclasses.field(default_factory=lambda: ["train", "valid"])  # splits max_len cuts
    # (the thesis truncates training and validation; it does not say for test, which is scored whole here)
    bucket_batches: int = 50  # length bucketing: each epoch's shuffled sentences are cut into pools of this
    # many batches, sorted by length within a pool and batched; the batches are shuffled (1: no bucketing)

    def __post_init__(self) -> None:
        if self.max_len is not None and self.max_len < 2:
            raise InfolmError(f"task.max_len must be at least 2 (a token and <eos>), got {self.max_len}")
        unknown = [s for s in self.truncate if s not in SPLITS]
        if unknown:
            raise InfolmError(f"task.truncate names unknown split {unknown[0]!r}; splits: {', '.join(SPLITS)}")
        if self.bucket_batches < 1:
            raise InfolmError(f"task.bucket_batches must be positive, got {self.bucket_batches}")


@dataclasses.dataclass
class Sentences:
    """A split's sentences as one flat id stream with per-sentence starts and lengths (``<eos>`` last)."""

    flat: Tensor  # (N,) int64
    starts: np.ndarray  # (S,) int64
    lengths: np.ndarray  # (S,) int64

    def __len__(self) -> int:
        return len(self.lengths)

    def batch(self, index: np.ndarray, eos_id: int) -> Batch:
        """Rows ``index`` padded to their longest: inputs ``<eos> s[:-1]``, targets ``s``. (B, L)."""
        lengths = torch.from_numpy(self.lengths[index])
        starts = torch.from_numpy(self.starts[index])
        steps = torch.arange(int(lengths.max()))
        real = steps.unsqueeze(0) < lengths.unsqueeze(1)  # (B, L)
        gathered = self.flat[(starts.unsqueeze(1) + steps).clamp(max=len(self.flat) - 1)]  # (B, L)
        targets = gathered.masked_fill(~real, IGNORE_INDEX)
        inputs = torch.cat([torch.full_like(gathered[:, :1], eos_id), gathered[:, :-1]], dim=1)
        inputs = inputs.masked_fill(~real, eos_id)  # padding reads <eos>; its targets are ignored
        return Batch(inputs, targets, lengths=lengths, padding_mask=real)


def split_sentences(corpus: Corpus, split: str, max_len: int | None) -> Sentences:
    """The lines of ``split``; with ``max_len`` a longer line keeps its first max_len - 1 tokens and <eos>."""
    stream = corpus.stream(split)
    offsets = corpus.sentence_offsets(split)
    starts, lengths = offsets[:-1].astype(np.int64), np.diff(offsets).astype(np.int64)
    if max_len is None or lengths.max() <= max_len:
        return Sentences(stream, starts, lengths)
    place = np.arange(int(offsets[-1])) - np.repeat(starts, lengths)  # position of each token in its line
    last = np.repeat(lengths - 1, lengths)
    keep = (place < max_len - 1) | (place == last)
    new_lengths = np.minimum(lengths, max_len)
    new_starts = np.concatenate([[0], np.cumsum(new_lengths)[:-1]]).astype(np.int64)
    return Sentences(stream[: int(offsets[-1])][torch.from_numpy(keep)], new_starts, new_lengths)


class SentenceBatches:
    """Length-bucketed training batches; rank ``rank`` takes rows ``rank::world`` of each global batch
    (sorted by length, so every rank gets similar lengths). Resumable: the state holds the random
    state at the start of the epoch (the epoch's order is redrawn from it) and the position in it."""

    def __init__(
        self, sentences: Sentences, eos_id: int, batch_size: int, bucket_batches: int, seed: int, rank: int, world: int
    ) -> None:
        self.sentences, self.eos_id = sentences, eos_id
        self.batch_size, self.bucket_batches = batch_size, bucket_batches
        self.rank, self.world = rank, world
        self.rng = np.random.default_rng(seed)
        self.epoch_start = numpy_rng_state(self.rng)
        self.order = self._draw_epoch()
        self.position = 0

    def _draw_epoch(self) -> list[np.ndarray]:
        lengths = self.sentences.lengths
        shuffled = self.rng.permutation(len(lengths))
        pool = self.bucket_batches * self.batch_size
        batches: list[np.ndarray] = []
        for start in range(0, len(shuffled), pool):
            chunk = shuffled[start : start + pool]
            chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
            batches.extend(chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size))
        batches = [batches[i] for i in self.rng.permutation(len(batches))]
        # a batch smaller than the number of ranks would leave a rank without rows: dropped
        return [b for b in batches if len(b) >= self.world]

    def next_batch(self) -> Batch | None:
        if self.position >= len(self.order):
            self.epoch_start = numpy_rng_state(self.rng)
            self.order = self._draw_epoch()
            self.position = 0
            return None
        rows = self.order[self.position][self.rank :: self.world]
        self.position += 1
        return self.sentences.batch(rows, self.eos_id)

    def __len__(self) -> int:
        return len(self.order)

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "rng": self.epoch_start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_numpy_rng_state(self.rng, state["rng"])
        self.epoch_start = numpy_rng_state(self.rng)
        self.order = self._draw_epoch()
        self.position = int(state["position"])


@register_task("sentence-lm", config=SentenceLMConfig)
class SentenceLM(Task):
    """Causal LM over single sentences: padded, length-bucketed rows, no state carried, <eos> counted."""

    carries_state = False
    provides = frozenset({"next-token", "sentences"})
    serves = frozenset({"causal-lm"})
    generates = True
    scores_tokens = True

    def __init__(self, config: SentenceLMConfig) -> None:
        self.config = config
        self.corpus: Corpus | None = None
        self.data = DataConfig()
        self.seed = 0
        self._splits: dict[str, Sentences] = {}

    @classmethod
    def input_length(cls, config: SentenceLMConfig, data: DataConfig) -> int | None:
        return config.max_len if set(SPLITS) <= set(config.truncate) else None

    @classmethod
    def length_setting(cls) -> str:
        return "task.max_len (with task.truncate=[train,valid,test])"

    def setup(self, config: Config, corpus: Corpus) -> None:
        self.corpus, self.data, self.seed = corpus, config.data, config.run.seed
        self._splits = {}

    def sentences(self, split: str) -> Sentences:
        """The split's rows as this task feeds them (truncated where ``task.truncate`` says)."""
        if self.corpus is None:
            raise RuntimeError("the task's setup(config, corpus) must run first")
        if split not in self._splits:
            max_len = self.config.max_len if split in self.config.truncate else None
            self._splits[split] = split_sentences(self.corpus, split, max_len)
        return self._splits[split]

    def train_batches(self, rank: int = 0, world: int = 1) -> SentenceBatches:
        assert self.corpus is not None
        sentences = self.sentences("train")
        if self.data.batch_size < world:
            raise InfolmError(f"data.batch_size={self.data.batch_size} sentences cannot be shared by {world} processes")
        if len(sentences) < world:
            raise InfolmError(f"the training split has {len(sentences)} sentences, fewer than the {world} processes")
        return SentenceBatches(
            sentences,
            self.corpus.vocab.eos_id,
            self.data.batch_size,
            self.config.bucket_batches,
            self.seed,
            rank,
            world,
        )

    @torch.no_grad()
    def evaluate(self, model: LanguageModel, split: str, device: torch.device | str = "cpu") -> Metrics:
        assert self.corpus is not None
        sentences = self.sentences(split)
        total, eos_total = 0.0, 0.0
        for _, batch, nll in self._scored_rows(model, sentences, device):
            assert batch.lengths is not None
            total += float(nll.sum())
            eos_total += float(nll.gather(1, (batch.lengths - 1).unsqueeze(1)).sum())
        return sentence_metrics(total, eos_total, int(sentences.lengths.sum()), len(sentences), self.corpus.level)

    @torch.no_grad()
    def token_scores(self, model: LanguageModel, split: str, device: torch.device | str = "cpu") -> TokenScores:
        """ln p(token | <eos> and the sentence before it) of every token of every row (truncated where
        ``task.truncate`` says), in text order; the segments are the rows."""
        sentences = self.sentences(split)
        log_probs = torch.full((len(sentences.flat),), math.nan, dtype=torch.float64)
        for rows, batch, nll in self._scored_rows(model, sentences, device):
            assert batch.padding_mask is not None
            real = batch.padding_mask.cpu()  # (B, L)
            where = torch.from_numpy(sentences.starts[rows]).unsqueeze(1) + torch.arange(real.size(1))  # (B, L)
            log_probs[where[real]] = -nll.cpu()[real].double()
        return TokenScores(log_probs, sentences.flat.long(), sentences.starts, sentences.lengths)

    def _scored_rows(
        self, model: LanguageModel, sentences: Sentences, device: torch.device | str
    ) -> Iterator[tuple[np.ndarray, Batch, Tensor]]:
        """Every row once, longest first (little padding, a fixed order), in eval mode (the mode is
        restored): ``(row indices, batch on device, per-token NLL (B, L) with 0 at padding)``."""
        assert self.corpus is not None
        eos_id = self.corpus.vocab.eos_id
        order = np.argsort(-sentences.lengths, kind="stable")
        was_training = model.training
        model.eval()
        try:
            for start in range(0, len(order), self.data.eval_batch_size):
                rows = order[start : start + self.data.eval_batch_size]
                batch = sentences.batch(rows, eos_id).to(device)
                logits = model(batch.inputs, None).logits.float()  # (B, L, V)
                nll = F.cross_entropy(
                    logits.transpose(1, 2), batch.targets, ignore_index=IGNORE_INDEX, reduction="none"
                )  # (B, L), 0 at padding
                yield rows, batch, nll
        finally:
            model.train(was_training)

    def generate(
        self, model: LanguageModel, prompt: list[int], settings: SamplingSettings, generator: torch.Generator
    ) -> list[list[int]]:
        """``settings.samples`` whole sentences after ``<eos>`` + prompt, each ending at its <eos>
        (or cut at ``settings.max_tokens``)."""
        assert self.corpus is not None
        eos_id = self.corpus.vocab.eos_id
        ids = torch.tensor([[eos_id, *prompt]]).repeat(settings.samples, 1)
        out = sample(
            model,
            ids,
            settings.max_tokens,
            settings.temperature,
            settings.top_k,
            settings.top_p,
            generator,
            stop_id=eos_id,
        )
        sentences = []
        for row in out.tolist():
            sentences.append(row[: row.index(eos_id) + 1] if eos_id in row else row)
        return sentences


def sentence_metrics(nll_sum: float, eos_nll_sum: float, tokens: int, sentences: int, level: str) -> Metrics:
    """Per-token NLL with <eos> counted (the selection metric), per-sentence NLL, and the per-token
    numbers without <eos> (the protocol of SentenceMIM's tables)."""
    nll = nll_sum / max(tokens, 1)
    words = tokens - sentences
    nll_without_eos = (nll_sum - eos_nll_sum) / max(words, 1)
    values = {
        "nll": nll,
        "ppl": perplexity(nll),
        "sentence_nll": nll_sum / max(sentences, 1),
        "nll_without_eos": nll_without_eos,
        "ppl_without_eos": perplexity(nll_without_eos),
        "tokens": tokens,
        "sentences": sentences,
    }
    log_names = {"nll": "loss", "ppl": "ppl", "sentence_nll": "sentence_nll"}
    if level == "char":
        values["bpc"] = nll / math.log(2)
        log_names["bpc"] = "bpc"
    return Metrics(values, selection="nll", log_names=log_names, notes=[EOS_NOTE])
