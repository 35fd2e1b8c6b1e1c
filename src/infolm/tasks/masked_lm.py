"""``masked-lm``: encoder pretraining by masked language modelling (BERT; InfoWord, Kong et al.).

The training text (the corpus's training lines, WordPiece-tokenized) is read as one consecutive
sequence cut into rows of ``max_len - 2`` subwords, each laid out ``[CLS] subwords [SEP]`` (InfoWord
Sec. 5.4: one consecutive sequence per example, no sentence pairs); with ``pairs`` (BERT's NSP) rows
end at word boundaries and are cut in two at a word start, ``extras["word_starts"]`` marking the
words for NSP's negatives (``objectives.nsp``). Each batch is masked afresh:
span masking (InfoWord Sec. 5.2, default) or BERT's token masking, then 80/10/10 replacement
(``infolm.data.masking``). Batches carry the masked inputs, the original subwords at the masked
positions as ``targets``, and the masked spans (``extras["span_ids"]``) for the DIM objective.
Evaluation masks each split's rows with a fixed seed and reports the full-softmax MLM cross-entropy
(the selection metric), its perplexity and the accuracy of the most likely subword.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from infolm.config import Config, DataConfig
from infolm.data.batch import Batch
from infolm.data.masking import IGNORE_INDEX, SPAN_IDS, WORD_STARTS, SpanLaw, mask_batch, span_ids, token_span_ids
from infolm.data.subwords import CLS_ID, PAD_ID, SEP_ID, EncoderData, SubwordSentences
from infolm.data.wordpiece import WordPieceConfig
from infolm.errors import InfolmError
from infolm.tasks.base import Metrics, ShuffledBatches, Task, perplexity, register_task
from infolm.tasks.wordpiece_run import corpus_lines, run_tokenizer, save_tokenizer

SCHEMES = ("span", "token")
EVAL_SEED = 20200426  # fixed masking of evaluation rows (any run, any seed)


@dataclasses.dataclass
class MaskedLMConfig:
    max_len: int = 512  # subwords per row, [CLS] and [SEP] included (InfoWord App. B: 512)
    masking: str = "span"  # span (InfoWord Sec. 5.2) | token (BERT: independent subwords)
    mask_rate: float = 0.15  # share of a row's subwords masked (BERT, InfoWord: 15%)
    span_mean: float = 5.0  # span masking: n-gram length in words ~ N(mean, std) ... (InfoWord Sec. 5.2: N(5, 1))
    span_std: float = 1.0  # ... rounded ...
    span_min: int = 1  # ... and clipped to [min, max] (InfoWord Sec. 5.2: 1 and 10)
    span_max: int = 10
    replace_mask: float = 0.8  # a masked subword reads [MASK] with this probability (BERT: 0.8) ...
    replace_random: float = 0.1  # ... a random subword with this one (BERT: 0.1), else itself
    vocab_size: int = 30522  # WordPiece types trained on the training text, specials included (BERT: 30,522)
    min_frequency: int = 2  # WordPiece trainer: least frequency of a merge
    lowercase: bool = True  # uncased WordPiece (BERT-base uncased)
    pairs: bool = False  # rows [CLS] A [SEP] B [SEP] cut at a uniform word start (BERT, for NSP); InfoWord: false
    # registered text datasets whose training lines join the pretraining text (and the WordPiece
    # trainer's), e.g. [tinyshakespeare] beside PTB, whose text has no punctuation; valid and test stay
    # data.name's (Kong et al. pretrain on several corpora at once: Wikipedia and BooksCorpus)
    extra_train: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.max_len < 3:
            raise InfolmError(f"task.max_len must be at least 3 ([CLS], a subword, [SEP]), got {self.max_len}")
        if self.pairs and self.max_len < 5:
            raise InfolmError(
                f"task.pairs needs task.max_len of at least 5 ([CLS] a [SEP] b [SEP]), got {self.max_len}"
            )
        if self.masking not in SCHEMES:
            raise InfolmError(f"task.masking must be one of {', '.join(SCHEMES)}; got {self.masking!r}")
        if not 0.0 < self.mask_rate < 1.0:
            raise InfolmError(f"task.mask_rate must be in (0, 1), got {self.mask_rate}")
        if not 1 <= self.span_min <= self.span_max:
            raise InfolmError(
                f"task.span_min and span_max must satisfy 1 <= min <= max, got {self.span_min}, {self.span_max}"
            )
        if self.replace_mask < 0 or self.replace_random < 0 or self.replace_mask + self.replace_random > 1:
            raise InfolmError("task.replace_mask and replace_random must be non-negative and sum to at most 1")
        from infolm.data.datasets import DATASETS

        texts = sorted(name for name, spec in DATASETS.items() if spec.kind == "text")
        for name in self.extra_train:
            if name not in texts:
                raise InfolmError(f"task.extra_train: unknown text dataset {name!r}; known: {', '.join(texts)}")

    def tokenizer(self) -> WordPieceConfig:
        return WordPieceConfig(self.vocab_size, self.min_frequency, self.lowercase)

    def law(self) -> SpanLaw:
        return SpanLaw(self.span_mean, self.span_std, self.span_min, self.span_max)


@dataclasses.dataclass
class Rows:
    """A split's subword stream cut into rows of ``[CLS] chunk [SEP]`` (the last row may be shorter)."""

    tokens: Tensor  # (R, L) int64, [PAD] after the [SEP] of a short last row
    word_start: Tensor  # (R, L) bool, True at the first subword of a word

    def __len__(self) -> int:
        return self.tokens.size(0)


def inner_subwords(sentences: SubwordSentences) -> Tensor:
    """The subwords of every sentence in order, without [CLS] / [SEP]: the split as one running text."""
    real = sentences.real() & (sentences.rows != CLS_ID) & (sentences.rows != SEP_ID)
    return sentences.rows[real]


def chunk_starts(word_start: np.ndarray, width: int) -> np.ndarray:
    """Starts of consecutive chunks of at most ``width`` subwords, each ending where a word ends (a word
    longer than ``width`` is cut: as far as the text allows). ``word_start`` (n,) bool. (count,) int64."""
    n = len(word_start)
    boundaries = np.append(np.flatnonzero(word_start), n)  # where a chunk may end
    starts = [0]
    while starts[-1] + width < n:
        start = starts[-1]
        end = int(boundaries[np.searchsorted(boundaries, start + width, side="right") - 1])
        starts.append(end if end > start else start + width)
    return np.array(starts, dtype=np.int64)


def cut_rows(flat: Tensor, continuation: Tensor, max_len: int, pairs: bool = False) -> Rows:
    """Chunks of ``max_len - 2`` subwords; with ``pairs``, of at most ``max_len - 3`` (room for the middle
    [SEP]) ending at word boundaries, so that no NSP segment starts or ends inside a word."""
    if flat.numel() == 0:
        raise InfolmError("the split has no subwords")
    width = max_len - 3 if pairs else max_len - 2
    n = flat.numel()
    starts = chunk_starts((~continuation[flat]).numpy(), width) if pairs else np.arange(0, n, width)
    lengths = torch.from_numpy(np.append(starts[1:], n) - starts)  # (R,) subwords per row
    if pairs and bool((lengths >= 2).any()):  # a row of one subword (the text's last) makes no pair: dropped,
        keep = (lengths >= 2).numpy()  # as NSP needs two segments in every row
        starts, lengths = starts[keep], lengths[keep]
    column = torch.arange(width)[None, :]
    inside = column < lengths[:, None]  # (R, width)
    source = (torch.from_numpy(starts)[:, None] + column).clamp(max=n - 1)
    tokens = torch.full((len(starts), width + 2), PAD_ID, dtype=torch.long)
    tokens[:, 0] = CLS_ID
    tokens[:, 1:-1] = torch.where(inside, flat[source], PAD_ID)
    tokens[torch.arange(len(starts)), lengths + 1] = SEP_ID
    word_start = ~continuation[tokens]
    return Rows(tokens, word_start)


def split_pairs(tokens: Tensor, word_start: Tensor, rng: np.random.Generator) -> tuple[Tensor, Tensor]:
    """[CLS] x [SEP] -> [CLS] x[:s] [SEP] x[s:] [SEP], s uniform over the word starts inside x (BERT cuts
    between sentences; the rows here are running text, so between words); a row of one word is cut
    inside it (uniform s in 1..len(x)-1) and a row of one subword stays."""
    lengths = (tokens != PAD_ID).sum(1) - 2  # subwords between [CLS] and [SEP]
    s = torch.arange(tokens.size(1))[None, :]  # a candidate s: x[s] (position s + 1) starts B
    inside = (s >= 1) & (s < lengths[:, None])
    between_words = inside & word_start.roll(-1, dims=1)
    candidates = torch.where(between_words.any(1, keepdim=True), between_words, inside)  # (B, T)
    count = candidates.sum(1)
    pick = torch.from_numpy(np.floor(rng.random(len(tokens)) * count.numpy()).astype(np.int64))  # (B,)
    chosen = candidates & (candidates.long().cumsum(1) == pick[:, None] + 1)
    cut = chosen.long().argmax(1)  # (B,) subwords in A
    ok = lengths[:, None] >= 2
    p = torch.arange(tokens.size(1) + 1)[None, :]
    source = torch.where((p > cut[:, None]) & ok, p - 1, p).clamp(max=tokens.size(1) - 1)  # B moves one right
    middle = (p == cut[:, None] + 1) & ok
    out = tokens.gather(1, source.expand(len(tokens), -1)).masked_fill(middle, SEP_ID)
    return out, word_start.gather(1, source.expand(len(tokens), -1)) | middle


def masked_rows(
    rows: Rows, index: np.ndarray, config: MaskedLMConfig, vocab_size: int, rng: np.random.Generator
) -> Batch:
    tokens, word_start = rows.tokens[index], rows.word_start[index]
    if config.pairs:
        tokens, word_start = split_pairs(tokens, word_start, rng)
    real = tokens != PAD_ID
    width = int(real.sum(1).max())
    tokens, word_start, real = tokens[:, :width], word_start[:, :width], real[:, :width]
    maskable = real & (tokens != CLS_ID) & (tokens != SEP_ID)
    masked = mask_batch(
        tokens,
        maskable,
        word_start,
        config.masking,
        mask_id=4,
        vocab_size=vocab_size,
        rng=rng,
        rate=config.mask_rate,
        law=config.law(),
        probs=(config.replace_mask, config.replace_random),
    )
    shape = (tokens.size(0), tokens.size(1))
    spans = span_ids(masked.spans, shape) if config.masking == "span" else token_span_ids(masked.masked)
    extras = {SPAN_IDS: spans}
    if config.pairs:  # nsp cuts its negatives at word boundaries, which [MASK] hides in the inputs
        extras[WORD_STARTS] = word_start
    return Batch(masked.inputs, masked.targets, padding_mask=real, lengths=real.sum(1), extras=extras)


def extra_lines(name: str) -> list[str]:
    """The non-empty training lines of the registered text dataset ``name`` (cache, mirror, sha256)."""
    from infolm.data.datasets import dataset_texts

    _, texts = dataset_texts(name)
    return [line.strip() for line in texts["train"].splitlines() if line.strip()]


def pretraining_lines(corpus: Any, settings: MaskedLMConfig) -> list[str]:
    """The pretraining text: the corpus's training lines, then those of each ``extra_train`` dataset."""
    lines = corpus_lines(corpus, "train")
    for name in settings.extra_train:
        lines = lines + extra_lines(name)
    return lines


def subword_corpus(corpus: Any, config: Config, settings: MaskedLMConfig) -> EncoderData:
    """A word-level corpus's lines as WordPiece sentences, with the run's tokenizer (``wordpiece_run``)."""
    lines = {
        split: pretraining_lines(corpus, settings) if split == "train" else corpus_lines(corpus, split)
        for split in corpus.splits
    }
    tokenizer = run_tokenizer(config.run.dir, config.run.init_from, lambda: lines["train"], settings.tokenizer())
    sentences = {split: SubwordSentences.from_ids(tokenizer.encode(text)) for split, text in lines.items()}
    for split, part in sentences.items():  # refused here, before anything is written to the run directory
        if inner_subwords(part).numel() == 0:
            source = getattr(config.data, split, None) if config.data.name == "path" else None
            raise InfolmError(
                f"{source or f'the {split} split of {config.data.name}'} has no WordPiece subwords once normalized "
                f"(control characters dropped{', accents stripped' if settings.lowercase else ''}); give it words"
            )
    return EncoderData.of(tokenizer, sentences)


@register_task("masked-lm", config=MaskedLMConfig)
class MaskedLM(Task):
    """Masked-LM pretraining of an encoder over WordPiece rows of the training text."""

    carries_state = False
    provides = frozenset({"masked-positions", "masked-spans", "sentence-pairs"})  # pairs with task.pairs=true
    serves = frozenset({"encoder"})

    def __init__(self, config: MaskedLMConfig) -> None:
        self.config = config
        self.data = DataConfig()
        self.seed = 0
        self.vocab_size = 0
        self.rows: dict[str, Rows] = {}

    @classmethod
    def input_length(cls, config: MaskedLMConfig, data: DataConfig) -> int | None:
        return config.max_len

    @classmethod
    def load_data(cls, config: Config) -> EncoderData:
        """The corpus's lines as WordPiece sentences, with the run's tokenizer (``wordpiece_run``)."""
        from infolm.config import build_dataclass
        from infolm.data import load_corpus

        settings = build_dataclass(MaskedLMConfig, {k: v for k, v in config.task.items() if k != "name"}, "task")
        return subword_corpus(load_corpus(config.data), config, settings)

    def setup(self, config: Config, corpus: Any) -> None:
        data: EncoderData = corpus
        self.data, self.seed, self.vocab_size = config.data, config.run.seed, data.vocab_size
        assert data.tokenizer is not None
        save_tokenizer(data.tokenizer, config.run.dir)
        continuation = data.tokenizer.continuation_table()
        self.rows = {
            split: cut_rows(inner_subwords(part), continuation, self.config.max_len, self.config.pairs)
            for split, part in data.sentences.items()
        }
        # ln q(w): the training subwords' unigram distribution (add-one), the candidates' distribution of
        # in-batch and unigram negatives; the prior-corrected reading below adds it to the scores
        counts = data.train.counts(data.vocab_size).double() + 1.0
        self.log_unigram = (counts / counts.sum()).log().float()

    def train_batches(self, rank: int = 0, world: int = 1) -> ShuffledBatches:
        rows = self.rows["train"]
        if len(rows) < world:
            raise InfolmError(f"the training split has {len(rows)} rows, fewer than the {world} processes")
        return ShuffledBatches(
            len(rows),
            lambda index, rng: masked_rows(rows, index, self.config, self.vocab_size, rng),
            self.data.batch_size,
            self.seed,
            rank,
            world,
        )

    @torch.no_grad()
    def evaluate(self, model: Any, split: str, device: torch.device | str = "cpu") -> Metrics:
        rows = self.rows[split]
        nll, correct, count = 0.0, 0, 0
        nll_prior, correct_prior = 0.0, 0
        log_unigram = self.log_unigram.to(device)
        was_training = model.training
        model.eval()
        try:
            for number, start in enumerate(range(0, len(rows), self.data.eval_batch_size)):
                index = np.arange(start, min(start + self.data.eval_batch_size, len(rows)))
                rng = np.random.default_rng([EVAL_SEED, number])
                batch = masked_rows(rows, index, self.config, self.vocab_size, rng).to(device)
                masked = batch.targets != IGNORE_INDEX
                states = model(batch.inputs, padding_mask=batch.padding_mask).states[masked]
                logits = model.mlm_logits(model.mlm_features(states)).float()
                targets = batch.targets[masked]
                nll += float(F.cross_entropy(logits, targets, reduction="sum"))
                correct += int((logits.argmax(-1) == targets).sum())
                # InfoNCE's optimal critic is ln p(w|c) - ln q(w) + const(c) (Oord et al. 2018, Eq. 2; Kong
                # et al. Sec. 3): for an encoder trained contrastively, softmax(scores + ln q) reads p(w|c);
                # for one trained with the full softmax it double-counts q (read the plain metrics there)
                corrected = logits + log_unigram
                nll_prior += float(F.cross_entropy(corrected, targets, reduction="sum"))
                correct_prior += int((corrected.argmax(-1) == targets).sum())
                count += len(targets)
        finally:
            model.train(was_training)
        mean = nll / max(count, 1)
        values = {
            "mlm_nll": mean,
            "mlm_ppl": perplexity(mean),
            "mlm_accuracy": correct / max(count, 1),
            "mlm_nll_prior": nll_prior / max(count, 1),
            "mlm_accuracy_prior": correct_prior / max(count, 1),
            "masked": count,
        }
        notes = [
            f"{self.config.masking} masking of {split} with a fixed seed; "
            "full-softmax cross-entropy per masked subword",
            "*_prior: the scores plus ln q(w), the training subwords' unigram distribution: p(w|c) as a contrastive "
            "(NCE-trained) encoder's scores give it; a full-softmax encoder's are the plain metrics",
        ]
        return Metrics(
            values,
            selection="mlm_nll",
            log_names={
                "mlm_nll": "loss",
                "mlm_ppl": "ppl",
                "mlm_accuracy": "accuracy",
                "mlm_nll_prior": "loss_prior",
                "mlm_accuracy_prior": "accuracy_prior",
            },
            notes=notes,
        )
