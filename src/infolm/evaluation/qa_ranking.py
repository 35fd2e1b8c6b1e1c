"""Question-answer ranking with a latent-variable sentence model, without fine-tuning (SentenceMIM Sec. 4.6).

Each question Q_i has answers A_i^1..A_i^K ordered by rank (A_i^1 is the best). The pair Q_i^k is
Q_i, "?", A_i^k; Q_i^unk is Q_i, "?" and |A_i^k| ``<unk>`` tokens. With z_i^k ~ q(z|Q_i^k) and
z_i^unk ~ q(z|Q_i^unk), answers are ranked by the normalized distance

    S_i^k = || (z_i^unk - z_i^k) / sigma_i^{k,unk} ||      (smaller is better)

where sigma_i^{k,unk} is the standard deviation of q(z|Q_i^unk) (elementwise; a deterministic
auto-encoder uses sigma = 1, as the paper's AE row). P@1 is the fraction of questions whose best
answer ranks first, MRR the mean of 1 / rank(A_i^1). A tie counts against the best answer
(rank = 1 + the number of other answers scoring at most as well): a constant scorer gets no credit.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor
from torch.distributions import Distribution

from infolm.data.batching import pad_sentences
from infolm.data.vocab import UNK, Vocab
from infolm.errors import InfolmError

SEPARATOR = "?"  # joins question and answer (Sec. 4.6)


@dataclasses.dataclass
class QAItem:
    question: list[str]  # question tokens
    answers: list[list[str]]  # answer tokens, best first (answers[k] has rank k + 1)


@dataclasses.dataclass
class QAResult:
    precision_at_1: float  # P@1 = mean of 1(rank(A^1) = 1)
    mrr: float  # mean reciprocal rank of the best answer
    questions: int
    ranks: list[int]  # rank of the best answer per question


class SentencePosterior(Protocol):
    def posterior(self, tokens: Tensor, lengths: Tensor) -> Distribution: ...


def normalized_distance(z_pair: Tensor, z_unk: Tensor, std_unk: Tensor) -> Tensor:
    """S = ||(z_unk - z_pair) / sigma_unk|| over the last dimension (Sec. 4.6). (..., D) -> (...)."""
    return torch.linalg.vector_norm((z_unk - z_pair) / std_unk, dim=-1)


def best_answer_rank(scores: Tensor) -> int:
    """Rank of answer 0 among ``scores`` (K,), smaller scores better; ties count against answer 0."""
    return 1 + int((scores[1:] <= scores[0]).sum())


def precision_at_1(ranks: Sequence[int]) -> float:
    return sum(1 for r in ranks if r == 1) / len(ranks)


def mean_reciprocal_rank(ranks: Sequence[int]) -> float:
    return sum(1.0 / r for r in ranks) / len(ranks)


def _batch(vocab: Vocab, sentences: list[list[str]], device: torch.device | str) -> tuple[Tensor, Tensor]:
    """Sentences -> padded ids with ``<eos>`` appended (B, T) and lengths (B,)."""
    ids = [torch.tensor(vocab.encode(s, unk_ok=True) + [vocab.eos_id]) for s in sentences]
    tokens, lengths = pad_sentences(ids, vocab.eos_id)
    return tokens.to(device), lengths.to(device)


@torch.no_grad()
def rank_answers(
    model: SentencePosterior,
    vocab: Vocab,
    items: Sequence[QAItem],
    sample: bool = True,
    deterministic: bool = False,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> QAResult:
    """P@1 and MRR of ``model`` on ``items`` (Sec. 4.6).

    ``sample``: z drawn from the posteriors, as the paper (off: the posterior means).
    ``deterministic``: sigma = 1 and the means (an auto-encoder, the paper's AE row)."""
    if UNK not in vocab:
        raise InfolmError(f"QA ranking needs a {UNK} token in the vocabulary")
    if not items:
        raise InfolmError("QA ranking of an empty set of questions")
    ranks = []
    for number, item in enumerate(items):
        if len(item.answers) < 2:
            raise InfolmError(f"QA question {number} has {len(item.answers)} answer(s); ranking needs at least 2")
        head = item.question + [SEPARATOR]
        pairs = [head + answer for answer in item.answers]
        unknown = [head + [UNK] * len(answer) for answer in item.answers]
        tokens, lengths = _batch(vocab, pairs + unknown, device)
        q = model.posterior(tokens, lengths)
        mean, std = q.mean, q.stddev  # (2K, D)
        if deterministic:
            z, std = mean, torch.ones_like(std)
        elif sample:
            noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
            z = mean + std * noise
        else:
            z = mean
        k = len(item.answers)
        scores = normalized_distance(z[:k], z[k:], std[k:])  # (K,)
        ranks.append(best_answer_rank(scores))
    return QAResult(precision_at_1(ranks), mean_reciprocal_rank(ranks), len(ranks), ranks)


def read_qa_jsonl(path: str | Path) -> list[QAItem]:
    """One question per line: ``{"question": "...", "answers": ["best ...", "second ...", ...]}``
    (whitespace-tokenized text, answers in rank order; ``.gz`` is read transparently)."""
    from infolm.data.corpus import read_text

    items = []
    path = Path(path)
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            question, answers = record["question"], record["answers"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise InfolmError(f"{path}:{number}: expected {{'question': str, 'answers': [str, ...]}}") from None
        if (
            not isinstance(question, str)
            or not isinstance(answers, list)
            or not all(isinstance(a, str) for a in answers)
        ):
            raise InfolmError(f"{path}:{number}: question must be a string and answers a list of strings")
        items.append(QAItem(question.split(), [a.split() for a in answers]))
    if not items:
        raise InfolmError(f"{path} holds no questions")
    return items


def load_qa(name: str, split: str) -> list[QAItem]:
    """A registered QA dataset's split (YahooCQA is not shipped: it is read from the data mirror)."""
    from infolm.data.datasets import DATASETS, locate

    spec = DATASETS.get(name)
    if spec is None or spec.kind != "qa":
        known = ", ".join(sorted(n for n, s in DATASETS.items() if s.kind == "qa"))
        raise InfolmError(f"unknown QA dataset {name!r}; known: {known}")
    if split not in spec.files:
        raise InfolmError(f"QA dataset {name} has no split {split!r}; it has {', '.join(spec.files)}")
    return read_qa_jsonl(locate(spec, split))
