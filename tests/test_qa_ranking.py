"""QA ranking (SentenceMIM Sec. 4.6): P@1 / MRR by hand, the normalized-distance score, the mirror loader."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import Tensor
from torch.distributions import Distribution, Independent, Normal

from infolm.data.datasets import dataset_texts
from infolm.data.vocab import EOS, UNK, Vocab
from infolm.errors import InfolmError
from infolm.evaluation.qa_ranking import (
    QAItem,
    best_answer_rank,
    load_qa,
    mean_reciprocal_rank,
    normalized_distance,
    precision_at_1,
    rank_answers,
    read_qa_jsonl,
)


def test_precision_and_mrr_by_hand() -> None:
    ranks = [1, 2, 1, 3]
    assert precision_at_1(ranks) == 0.5
    assert math.isclose(mean_reciprocal_rank(ranks), (1 + 1 / 2 + 1 + 1 / 3) / 4)


def test_rank_of_the_best_answer_counts_ties_against_it() -> None:
    assert best_answer_rank(torch.tensor([0.1, 0.5, 0.3])) == 1
    assert best_answer_rank(torch.tensor([0.4, 0.5, 0.3, 0.2])) == 3
    assert best_answer_rank(torch.tensor([1.0, 1.0, 1.0])) == 3


def test_normalized_distance_is_a_scaled_norm() -> None:
    z_pair, z_unk, std = torch.tensor([1.0, 2.0]), torch.tensor([4.0, 6.0]), torch.tensor([3.0, 2.0])
    assert math.isclose(float(normalized_distance(z_pair, z_unk, std)), math.hypot(1.0, 2.0), rel_tol=1e-6)


class BagOfWords(torch.nn.Module):
    """q(z|x): mean = counts of the words 'good' and 'bad' in x, std = 0.5 + 0.1 * length."""

    def posterior(self, tokens: Tensor, lengths: Tensor) -> Distribution:
        mask = torch.arange(tokens.size(1)) < lengths.unsqueeze(1)
        mean = torch.stack([((tokens == 3) & mask).sum(1), ((tokens == 4) & mask).sum(1)], dim=1).float()
        std = (0.5 + 0.1 * lengths.float()).unsqueeze(1).expand(-1, 2)
        return Independent(Normal(mean, std), 1)


VOCAB = Vocab([EOS, UNK, "?", "good", "bad", "why", "answer"])


def synthetic_items() -> list[QAItem]:
    # With the bag-of-words posterior, answers with fewer 'good'/'bad' words lie closer to the
    # <unk>-filled question: the best answer ranks 1st, 2nd and 3rd in the three questions.
    return [
        QAItem(["why"], [["answer"], ["good"], ["good", "bad"]]),
        QAItem(["why"], [["good", "answer"], ["answer", "answer"], ["bad", "bad"]]),
        QAItem(["why", "good"], [["bad", "bad"], ["bad", "answer"], ["answer", "answer"]]),
    ]


def test_ranking_with_posterior_means_gives_the_hand_computed_ranks() -> None:
    result = rank_answers(BagOfWords(), VOCAB, synthetic_items(), sample=False)
    assert result.ranks == [1, 2, 3]
    assert math.isclose(result.precision_at_1, 1 / 3)
    assert math.isclose(result.mrr, (1 + 1 / 2 + 1 / 3) / 3)
    # an auto-encoder (sigma = 1) ranks the same here: the scale is common to a question's answers
    assert rank_answers(BagOfWords(), VOCAB, synthetic_items(), deterministic=True).ranks == [1, 2, 3]


def test_sampled_codes_follow_the_seed() -> None:
    items = synthetic_items()
    first = rank_answers(BagOfWords(), VOCAB, items, generator=torch.Generator().manual_seed(3))
    again = rank_answers(BagOfWords(), VOCAB, items, generator=torch.Generator().manual_seed(3))
    assert first == again


def test_bad_input_is_one_clear_error() -> None:
    with pytest.raises(InfolmError, match="<unk>"):
        rank_answers(BagOfWords(), Vocab([EOS, "why"]), synthetic_items())
    with pytest.raises(InfolmError, match="at least 2"):
        rank_answers(BagOfWords(), VOCAB, [QAItem(["why"], [["answer"]])])


def test_loader_reads_the_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "yahoocqa"
    folder.mkdir()
    lines = [
        {"question": "why good", "answers": ["answer", "bad bad"]},
        {"question": "why", "answers": ["a", "b", "c"]},
    ]
    (folder / "test.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    monkeypatch.setenv("INFOLM_DATA_MIRROR", str(tmp_path))
    monkeypatch.setenv("INFOLM_DATA", str(tmp_path / "cache"))
    monkeypatch.setenv("INFOLM_OFFLINE", "1")
    items = load_qa("yahoocqa", "test")
    assert items[0] == QAItem(["why", "good"], [["answer"], ["bad", "bad"]]) and len(items[1].answers) == 3
    with pytest.raises(InfolmError, match="INFOLM_OFFLINE"):
        load_qa("yahoocqa", "valid")
    monkeypatch.delenv("INFOLM_OFFLINE")
    with pytest.raises(InfolmError, match="not shipped"):
        load_qa("yahoocqa", "valid")
    with pytest.raises(InfolmError, match="unknown QA dataset"):
        load_qa("ptb", "test")
    with pytest.raises(InfolmError, match="not a text corpus"):
        dataset_texts("yahoocqa")
    (folder / "train.jsonl").write_text('{"question": "why"}\n')
    with pytest.raises(InfolmError, match="train.jsonl:1"):
        read_qa_jsonl(folder / "train.jsonl")
