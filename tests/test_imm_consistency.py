"""The IMM paper's App. B.2 toy (a trigram whose short context is the previous word): the k-sample
induced cross-entropy of Eq. 15 keeps the true model as the minimizer of cross-entropy + λ·IMM, while
the single-sample form of Eq. 18 (the released code's 1-sample steps, noising) moves it (Prop. 5.1)."""

from __future__ import annotations

import torch

from infolm.objectives.imm import induced_cross_entropy

# π(y_-1, y_-2) and P(y_0 | y_-1, y_-2) of App. B.2: rows y_-1, columns y_-2; the last axis is y_0
PI = torch.tensor([[0.4, 0.3], [0.2, 0.1]], dtype=torch.float64)
P = torch.tensor([[[0.99, 0.01], [0.01, 0.99]], [[0.5, 0.5], [0.5, 0.5]]], dtype=torch.float64)
P_SHORT = PI.sum(1)  # π(y_-1)
P_BAR = (PI[..., None] * P).sum(1) / P_SHORT[:, None]  # the true induced model P̄(y_0 | y_-1), Eq. 6
# Eq. 15's samples of the extended context y_-2 given y_-1, drawn in exact proportion to π(y_-2 | y_-1):
# 12 of 21 draws y_-2 = 0 for y_-1 = 0 (4 : 3), 14 of 21 for y_-1 = 1 (2 : 1)
DRAWS = torch.tensor([[0] * 12 + [1] * 9, [0] * 14 + [1] * 7])
LAM = 1.0


def cross_entropy(log_q: torch.Tensor) -> torch.Tensor:
    """E_π Σ_y P(y | y_-1, y_-2) (-ln Q(y | y_-1, y_-2)): the main term of Eq. 11 at infinite data."""
    return -(PI[..., None] * P * log_q).sum()


def imm_eq15(log_q: torch.Tensor) -> torch.Tensor:
    """Σ_sh π(sh) (-Σ_y P̄(y|sh) ln Q̄(y|sh)), Q̄ the mean of Q over the drawn extended contexts."""
    samples = torch.stack([log_q[sh, DRAWS[sh]] for sh in range(2)], dim=1)  # (k, P=2, V=2)
    return induced_cross_entropy(P_BAR, samples, P_SHORT)


def one_sample_eq18(log_q: torch.Tensor) -> torch.Tensor:
    """E_π Σ_y P̄(y|sh) (-ln Q(y | sh, ex)): the expectation outside the log, one sample at a time."""
    contexts = [(sh, ex) for sh in range(2) for ex in range(2)]
    samples = torch.stack([log_q[sh, ex] for sh, ex in contexts])[None]  # (k=1, P=4, V=2)
    target = torch.stack([P_BAR[sh] for sh, _ in contexts])
    return induced_cross_entropy(target, samples, PI.flatten())


def minimize(term) -> torch.Tensor:
    """Q* of cross-entropy + λ·term over every table Q(y_0 | y_-1, y_-2), from the uniform table."""
    logits = torch.zeros(2, 2, 2, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([logits], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-15)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        log_q = torch.log_softmax(logits, -1)
        loss = cross_entropy(log_q) + LAM * term(log_q)
        loss.backward()
        return loss

    for _ in range(5):
        optimizer.step(closure)
    return torch.softmax(logits.detach(), -1)


def kl(p: torch.Tensor, q: torch.Tensor) -> float:
    """E_π KL(P(· | context) || Q(· | context)) in nats."""
    return float((PI[..., None] * p * (p / q).log()).sum())


def test_the_toy_is_the_papers() -> None:
    assert torch.allclose(P_BAR[:, 0], torch.tensor([0.57, 0.5], dtype=torch.float64))  # App. B.2's P̄


def test_eq_15_keeps_the_true_model_and_eq_18_does_not() -> None:
    exact = minimize(imm_eq15)
    assert kl(P, exact) < 1e-9  # consistent: the true model is the minimizer (Sec. 5.1)
    biased = minimize(one_sample_eq18)
    # Eq. 18 per context: Σ_y (P(y|c) + λ P̄(y|sh)) (-ln Q(y|c)) is minimized by their normalized sum
    closed_form = (P + LAM * P_BAR[:, None, :]) / (1 + LAM)
    assert torch.allclose(biased, closed_form, atol=1e-6)
    assert kl(P, biased) > 0.04  # Prop. 5.1: the fixed point is off the true model
