"""MI lower bounds: known values of the formulas, and a proxy-trained critic on Gaussians of known MI."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import Tensor, nn

from infolm.errors import InfolmError
from infolm.evaluation.mi import (
    MIEstimatorConfig,
    PairDiscriminator,
    critic_mine_bound,
    cross_validated_mi,
    dv_mi_lower_bound,
    estimate_segment_mi,
    jsd_mi_lower_bound,
)


def test_bounds_on_constant_scores() -> None:
    pos, neg = torch.full((5,), 2.0), torch.full((7,), -1.0)
    assert math.isclose(float(dv_mi_lower_bound(pos, neg)), 3.0, rel_tol=1e-6)
    sp = math.log1p(math.exp(-2.0)) + math.log1p(math.exp(-1.0))
    assert math.isclose(float(jsd_mi_lower_bound(pos, neg)), -sp, rel_tol=1e-6)
    # a critic that ignores its inputs gives a DV bound of exactly 0
    same = torch.full((4,), 1.7)
    assert abs(float(dv_mi_lower_bound(same, same))) < 1e-6


def test_dv_bound_of_the_true_log_density_ratio_is_near_the_true_mi() -> None:
    torch.manual_seed(0)
    rho, n = 0.8, 200_000
    x, y = correlated_gaussians(n, 1, rho)
    true_mi = -0.5 * math.log(1 - rho**2)

    def log_ratio(a: Tensor, b: Tensor) -> Tensor:  # log p(x, y) / p(x) p(y) of the bivariate normal
        a, b = a.squeeze(-1), b.squeeze(-1)
        return -0.5 * math.log(1 - rho**2) - (rho**2 * (a**2 + b**2) - 2 * rho * a * b) / (2 * (1 - rho**2))

    bound = float(dv_mi_lower_bound(log_ratio(x, y), log_ratio(x, y.roll(1, 0))))
    assert abs(bound - true_mi) < 0.02


def correlated_gaussians(n: int, dim: int, rho: float) -> tuple[Tensor, Tensor]:
    x = torch.randn(n, dim)
    return x, rho * x + math.sqrt(1 - rho**2) * torch.randn(n, dim)


class VectorCritic(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.discriminator = PairDiscriminator(dim, hidden=64)

    def encode(self, x: Tensor) -> Tensor:
        return x

    def head(self, fx: Tensor, fy: Tensor) -> Tensor:
        return self.discriminator(fx, fy)


def test_proxy_trained_critic_orders_correlations_and_stays_below_true_mi() -> None:
    torch.manual_seed(0)
    dim = 2
    config = MIEstimatorConfig(folds=3, steps=300, batch_size=128, lr=3e-3, eval_every=50, patience=4, neg_shifts=32)
    estimates, truths = [], []
    for rho in (0.0, 0.5, 0.9):
        x, y = correlated_gaussians(1500, dim, rho)
        estimates.append(cross_validated_mi(x, y, lambda: VectorCritic(dim), config).mean)
        truths.append(-0.5 * dim * math.log(1 - rho**2))
    assert estimates[0] < estimates[1] < estimates[2], estimates
    for estimate, truth in zip(estimates, truths, strict=True):
        assert estimate < truth + 0.02, (estimate, truth)  # a lower bound (up to the finite-sample error)
    assert abs(estimates[0]) < 0.05 and estimates[2] > 0.5 * truths[2], (estimates, truths)


def test_segment_mi_separates_dependent_from_shuffled_text() -> None:
    torch.manual_seed(0)
    # a "topic" stream: blocks of 100 tokens drawn from one of 8 disjoint 5-word vocabularies
    topics = torch.randint(8, (120,))
    stream = (topics.repeat_interleave(100) * 5 + torch.randint(5, (12_000,))).long()
    config = MIEstimatorConfig(
        folds=3, steps=80, batch_size=32, eval_every=20, patience=3, seg_len=20, gap=5, channels=32, hidden=32
    )
    dependent = estimate_segment_mi(stream, 40, config)
    shuffled = estimate_segment_mi(stream[torch.randperm(stream.numel())], 40, config)
    assert dependent.mean > 0.5 and dependent.mean < math.log(8) + 0.05
    assert abs(shuffled.mean) < 0.1
    assert len(dependent.folds) == 3 and "nats" in str(dependent)
    bag = estimate_segment_mi(stream, 40, dataclasses.replace(config, encoder="bag", emb=16))
    assert bag.mean > 0.5 and bag.mean < math.log(8) + 0.05


def test_critic_bound_is_zero_for_an_input_blind_critic() -> None:
    class Blind(VectorCritic):
        def head(self, fx: Tensor, fy: Tensor) -> Tensor:
            return torch.zeros(fx.size(0))

    x, y = correlated_gaussians(50, 2, 0.9)
    assert abs(critic_mine_bound(Blind(2), x, y)) < 1e-6


def test_bad_settings_are_user_errors() -> None:
    with pytest.raises(InfolmError):
        MIEstimatorConfig(folds=2)
    with pytest.raises(InfolmError):
        MIEstimatorConfig(encoder="lstm")
    with pytest.raises(InfolmError):
        estimate_segment_mi(torch.arange(100), 10)


def test_generated_texts_give_pairs_that_never_cross_two_texts() -> None:
    """Parallel generations are separate texts: a segment pair lies inside one of them."""
    from infolm.evaluation.mi import generate_texts, row_segment_pairs
    from infolm.models import MODELS

    rows = torch.arange(4 * 50).view(4, 50)  # row r holds ids 50 r .. 50 r + 49
    x, y = row_segment_pairs(rows, seg_len=5, gap=2)  # span 12: 4 pairs per row
    assert x.shape == (16, 5) and y.shape == (16, 5)
    assert torch.equal(x // 50, y // 50) and (x // 50 == x[:, :1] // 50).all()
    model = MODELS.build("lstm", {"emb": 8, "hidden": 8, "layers": 1}, vocab_size=13)
    texts = generate_texts(model, 300, 0, seg_len=5, gap=2, texts=8, generator=torch.Generator().manual_seed(0))
    assert texts.size(0) == 8 and texts.size(1) % 12 == 0 and texts.numel() >= 300
    pairs, _ = row_segment_pairs(texts, 5, 2)
    assert len(pairs) == texts.numel() // 12  # every token is in a pair: none lost at a boundary


def test_every_fold_is_made_when_the_pairs_do_not_divide_evenly() -> None:
    """32 pairs in 10 folds: chunks of 4 would make only 8 folds; each of the 10 gets 3 or 4 pairs."""
    config = MIEstimatorConfig(folds=10, steps=1, batch_size=4, eval_every=1, patience=1, neg_shifts=2)
    x, y = correlated_gaussians(32, 2, 0.5)
    assert len(cross_validated_mi(x, y, lambda: VectorCritic(2), config).folds) == 10
