"""InfoNCE identities (Kong et al. Eq. 1, Eq. 2) and local NCE."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from infolm.objectives.infonce import in_batch_negative_counts, info_nce, info_nce_bound, local_nce


def test_whole_vocabulary_with_uniform_q_is_softmax_cross_entropy():
    """Eq. 2: B = the whole vocabulary, each type once."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 13, generator=g, dtype=torch.float64)
    targets = torch.randint(0, 13, (7,), generator=g)
    expected = F.cross_entropy(logits, targets, reduction="none")
    torch.testing.assert_close(info_nce(logits, targets), expected)
    counts = torch.ones_like(logits)
    counts[torch.arange(7), targets] = 0
    torch.testing.assert_close(info_nce(logits, targets, counts), expected)


def test_a_negative_drawn_twice_counts_twice_and_count_zero_leaves_it_out():
    scores = torch.tensor([[2.0, 0.5, -1.0]], dtype=torch.float64)
    positive = torch.tensor([0])
    counts = torch.tensor([[0.0, 2.0, 0.0]], dtype=torch.float64)
    expected = math.log(math.exp(2.0) + 2 * math.exp(0.5)) - 2.0
    assert math.isclose(float(info_nce(scores, positive, counts)), expected, rel_tol=1e-12)
    bound = float(info_nce_bound(scores, positive, counts))
    assert math.isclose(bound, math.log(3) - expected, rel_tol=1e-12)


def test_bound_never_exceeds_log_of_the_candidate_count():
    g = torch.Generator().manual_seed(2)
    scores = 10 * torch.randn(50, 9, generator=g)
    positive = torch.randint(0, 9, (50,), generator=g)
    assert bool((info_nce_bound(scores, positive) <= math.log(9) + 1e-5).all())
    scores[torch.arange(50), positive] = 1e4  # a perfect critic reaches the bound log|B|
    torch.testing.assert_close(info_nce_bound(scores, positive), torch.full((50,), math.log(9)))


def test_in_batch_negatives_count_the_other_sequences_only():
    owner = torch.tensor([0, 0, 1, 2, 2, 2])
    candidate_of = torch.tensor([3, 1, 3, 0, 0, 2])
    counts = in_batch_negative_counts(owner, candidate_of, num_candidates=4, num_owners=3)
    for n in range(6):
        for k in range(4):
            expected = sum(1 for m in range(6) if owner[m] != owner[n] and candidate_of[m] == k)
            assert counts[n, k] == expected


def test_local_nce_is_binary_cross_entropy_of_real_against_noise():
    g = torch.Generator().manual_seed(3)
    pos, neg = torch.randn(5, generator=g), torch.randn(5, 4, generator=g)
    expected = F.binary_cross_entropy_with_logits(pos, torch.ones(5), reduction="none") + (
        F.binary_cross_entropy_with_logits(neg, torch.zeros(5, 4), reduction="none").sum(1)
    )
    torch.testing.assert_close(local_nce(pos, neg), expected)
