"""``classification``: single sentences with labels (CoLA), for fine-tuning an encoder.

Rows are ``[CLS] sentence [SEP]`` cut to ``max_len`` subwords (InfoWord App. B: 128 for GLUE). The
data is a labelled dataset of the registry (``data.name=cola``: CoLA's public in-domain train and dev
files) or ``data.name=path`` with CoLA-format TSV files in ``data.train`` / ``data.test`` (and
optionally ``data.valid``). CoLA's test labels are not public: the public dev set is the ``test``
split here, and ``valid`` (which selects checkpoints) is a fixed ``valid_fraction`` of train, held out
with ``split_seed`` (the same sentences for every run seed). Evaluation reports Matthews correlation
(the selection metric, higher is better), accuracy, the cross-entropy and how many classes the model
predicts (1: the same class for every sentence, as a fine-tuning that learned nothing does).

Each batch also carries a masked copy of its sentences (BERT's 15% token masking, 80/10/10) with the
original subwords as ``targets``: MLM reintroduced during fine-tuning reads it (IMM App. D.2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from infolm.config import Config, DataConfig
from infolm.data.batch import Batch
from infolm.data.labelled import LabelledSentences, load_labelled, read_cola_tsv
from infolm.data.masking import MLM_INPUTS, mask_batch
from infolm.data.subwords import CLS_ID, SEP_ID, EncoderData, SubwordSentences
from infolm.data.wordpiece import WordPieceConfig
from infolm.errors import InfolmError
from infolm.evaluation.classification import accuracy, matthews_corrcoef
from infolm.tasks.base import Metrics, ShuffledBatches, Task, register_task
from infolm.tasks.wordpiece_run import corpus_lines, run_tokenizer, save_tokenizer

INIT_CHECKPOINTS = ("last", "best")
EVAL_NOTE = "mcc: Matthews correlation (CoLA's metric); valid is held out of train, test is CoLA's public dev set"


@dataclasses.dataclass
class ClassificationConfig:
    max_len: int = 128  # subwords per row, [CLS] and [SEP] included (InfoWord App. B: 128 for GLUE)
    num_labels: int = 2  # classes (CoLA: 0 unacceptable, 1 acceptable)
    valid_fraction: float = 0.1  # share of train held out for checkpoint selection (test labels are not public)
    split_seed: int = 0  # the held-out sentences are the same for every run seed
    mask_rate: float = 0.15  # the masked copy for MLM during fine-tuning (BERT: 15%, 80/10/10)
    background: str | None = None  # text dataset of IMM's Kneser-Ney bigram (App. D.2: the pretraining text);
    # None: the text the run.init_from encoder was pretrained on (its data and task.extra_train), else the
    # training sentences
    vocab_size: int = 30522  # WordPiece types when no run.init_from gives a tokenizer (BERT: 30,522)
    min_frequency: int = 2  # WordPiece trainer: least frequency of a merge (without run.init_from)
    lowercase: bool = True  # uncased WordPiece (without run.init_from)
    # which checkpoint of the run.init_from run is fine-tuned: last (its final step; Kong et al. Sec. 5.3
    # fine-tune the pretrained model, and best/ is chosen by the full-softmax MLM loss, which the
    # contrastive encoders, mlm-nce and dim, never optimise) | best (its best/)
    init_checkpoint: str = "last"

    def __post_init__(self) -> None:
        if self.max_len < 3:
            raise InfolmError(f"task.max_len must be at least 3 ([CLS], a subword, [SEP]), got {self.max_len}")
        if self.num_labels < 2:
            raise InfolmError(f"task.num_labels must be at least 2, got {self.num_labels}")
        if not 0.0 < self.valid_fraction < 1.0:
            raise InfolmError(f"task.valid_fraction must be in (0, 1), got {self.valid_fraction}")
        if not 0.0 < self.mask_rate < 1.0:
            raise InfolmError(f"task.mask_rate must be in (0, 1), got {self.mask_rate}")
        if self.init_checkpoint not in INIT_CHECKPOINTS:
            raise InfolmError(
                f"task.init_checkpoint must be one of {', '.join(INIT_CHECKPOINTS)}; got {self.init_checkpoint!r}"
            )


def labelled_splits(data: DataConfig, config: ClassificationConfig) -> dict[str, LabelledSentences]:
    """train / valid / test: the registry's (or the given files'), valid held out of train if absent."""
    if data.name == "path":
        if not data.train or not data.test:
            raise InfolmError("data.name=path with task classification needs data.train and data.test (TSV files)")
        files = {"train": data.train, "test": data.test} | ({"valid": data.valid} if data.valid else {})
        splits = {split: read_cola_tsv(path, config.num_labels) for split, path in files.items()}
    else:
        splits = load_labelled(data.name, config.num_labels)
    if "valid" not in splits:
        train = splits["train"]
        order = torch.from_numpy(np.random.default_rng(config.split_seed).permutation(len(train)))
        held = max(1, int(round(config.valid_fraction * len(train))))
        if held >= len(train):
            source = data.train if data.name == "path" else f"the train split of {data.name}"
            raise InfolmError(
                f"{source} has {len(train)} sentence(s): holding out task.valid_fraction={config.valid_fraction} "
                "for validation leaves none to train on; give more sentences or a data.valid file"
            )
        splits["valid"], splits["train"] = (
            train.subset(order[:held].sort().values),
            train.subset(order[held:].sort().values),
        )
    for split, part in splits.items():
        if len(part) == 0:
            raise InfolmError(f"the {split} split of {data.name} has no sentences")
    return splits


def check_head(config: ClassificationConfig, model: dict[str, Any]) -> None:
    """The model's classification head scores exactly the task's classes (refused before anything is written)."""
    head = model.get("num_labels", 0)
    if head != config.num_labels:
        has = f"a head of {head} classes" if head else "no classification head"
        raise InfolmError(
            f"task classification has {config.num_labels} classes (task.num_labels), but model {model.get('name')} "
            f"has {has} (model.num_labels); set model.num_labels={config.num_labels}"
        )


def background_lines(name: str | None, init_from: str | None) -> Callable[[], list[str]] | None:
    """How to read IMM's restricted-model text (App. D.2: the text the encoder was pretrained on):
    ``task.background``'s training lines, else the pretraining text of the run.init_from run, read from
    its saved config (a masked-lm run: its data's training lines and its ``task.extra_train``, as that
    run read them; a classification run: the text its own bigram read), else none (the training sentences)."""
    from infolm.config import build_dataclass, load_config
    from infolm.data import load_corpus
    from infolm.tasks.masked_lm import MaskedLMConfig, pretraining_lines

    if name is not None:
        return lambda: corpus_lines(load_corpus(DataConfig(name=name)), "train")
    if not init_from or not (Path(init_from) / "config.yaml").is_file():
        return None
    run = load_config(Path(init_from) / "config.yaml")
    settings = {k: v for k, v in run.task.items() if k != "name"}
    if run.task["name"] == "masked-lm":
        pretraining = build_dataclass(MaskedLMConfig, settings, "task")
        return lambda: pretraining_lines(load_corpus(run.data), pretraining)
    if run.task["name"] == "classification":  # fine-tuned before: the encoder's pretraining text is still that one
        earlier = build_dataclass(ClassificationConfig, settings, "task")
        return background_lines(earlier.background, run.run.init_from)
    return lambda: corpus_lines(load_corpus(run.data), "train")


@register_task("classification", config=ClassificationConfig)
class Classification(Task):
    """Sentence classification (CoLA) for encoders: Matthews correlation selects checkpoints."""

    carries_state = False
    provides = frozenset({"labels", "sentences", "masked-positions"})
    serves = frozenset({"encoder"})

    def __init__(self, config: ClassificationConfig) -> None:
        self.config = config
        self.data = DataConfig()
        self.seed = 0
        self.vocab_size = 0
        self.rows: dict[str, SubwordSentences] = {}
        self.labels: dict[str, torch.Tensor] = {}

    @classmethod
    def input_length(cls, config: ClassificationConfig, data: DataConfig) -> int | None:
        return config.max_len

    @classmethod
    def init_checkpoint(cls, config: Config) -> str:
        from infolm.config import build_dataclass

        settings = build_dataclass(ClassificationConfig, {k: v for k, v in config.task.items() if k != "name"}, "task")
        return str(settings.init_checkpoint)

    @classmethod
    def load_data(cls, config: Config) -> EncoderData:
        """Labelled sentences as WordPiece rows, with the tokenizer of run.init_from (``wordpiece_run``)."""
        from infolm.config import build_dataclass

        settings = build_dataclass(ClassificationConfig, {k: v for k, v in config.task.items() if k != "name"}, "task")
        check_head(settings, config.model)
        splits = labelled_splits(config.data, settings)
        tokenizer_settings = WordPieceConfig(settings.vocab_size, settings.min_frequency, settings.lowercase)
        train_text = splits["train"].sentences
        tokenizer = run_tokenizer(config.run.dir, config.run.init_from, lambda: train_text, tokenizer_settings)
        sentences = {
            split: SubwordSentences.from_ids(tokenizer.encode(part.sentences), settings.max_len)
            for split, part in splits.items()
        }
        labels = {split: part.labels for split, part in splits.items()}
        lines = background_lines(settings.background, config.run.init_from)
        background = None if lines is None else (lambda: SubwordSentences.from_ids(tokenizer.encode(lines())))
        return EncoderData.of(tokenizer, sentences, labels=labels, background=background)

    def setup(self, config: Config, corpus: Any) -> None:
        data: EncoderData = corpus
        self.data, self.seed, self.vocab_size = config.data, config.run.seed, data.vocab_size
        assert data.tokenizer is not None
        save_tokenizer(data.tokenizer, config.run.dir)
        self.rows, self.labels = data.sentences, data.labels

    def batch(self, split: str, index: np.ndarray, rng: np.random.Generator | None = None) -> Batch:
        rows = self.rows[split]
        tokens = rows.rows[index]
        lengths = rows.lengths[index]
        width = int(lengths.max())
        tokens = tokens[:, :width]
        real = torch.arange(width)[None, :] < lengths[:, None]
        batch = Batch(tokens, tokens.new_full(tokens.shape, -100), lengths=lengths, padding_mask=real)
        batch.labels = self.labels[split][index]
        if rng is not None:
            maskable = real & (tokens != CLS_ID) & (tokens != SEP_ID)
            masked = mask_batch(tokens, maskable, maskable, "token", 4, self.vocab_size, rng, self.config.mask_rate)
            batch.targets = masked.targets
            batch.extras[MLM_INPUTS] = masked.inputs
        return batch

    def train_batches(self, rank: int = 0, world: int = 1) -> ShuffledBatches:
        if len(self.rows["train"]) < world:
            raise InfolmError(
                f"the training split has {len(self.rows['train'])} sentences, fewer than the {world} processes"
            )
        return ShuffledBatches(
            len(self.rows["train"]),
            lambda rows, rng: self.batch("train", rows, rng),
            self.data.batch_size,
            self.seed,
            rank,
            world,
        )

    @torch.no_grad()
    def predict(self, model: Any, split: str, device: torch.device | str = "cpu") -> torch.Tensor:
        """Class scores of every sentence of ``split``, in order. (N, C)."""
        count = len(self.rows[split])
        out = []
        was_training = model.training
        model.eval()
        try:
            for start in range(0, count, self.data.eval_batch_size):
                batch = self.batch(split, np.arange(start, min(start + self.data.eval_batch_size, count))).to(device)
                out.append(model.classify(model(batch.inputs, padding_mask=batch.padding_mask).sentence).float().cpu())
        finally:
            model.train(was_training)
        return torch.cat(out)

    def evaluate(self, model: Any, split: str, device: torch.device | str = "cpu") -> Metrics:
        scores = self.predict(model, split, device)
        labels = self.labels[split]
        predictions = scores.argmax(-1)
        values = {
            "mcc": matthews_corrcoef(predictions, labels, self.config.num_labels),
            "accuracy": accuracy(predictions, labels),
            "nll": float(F.cross_entropy(scores, labels)),
            "sentences": float(len(labels)),
            "predicted_classes": float(predictions.unique().numel()),  # 1: one class for every sentence (MCC 0)
        }
        log_names = {"mcc": "mcc", "accuracy": "accuracy", "nll": "loss"}
        return Metrics(values, selection="mcc", higher_is_better=True, log_names=log_names, notes=[EVAL_NOTE])
