"""Matthews correlation and accuracy against hand-computed values."""

from __future__ import annotations

import math

import torch

from infolm.evaluation.classification import accuracy, matthews_corrcoef


def test_matthews_correlation_equals_the_hand_computed_value():
    labels = torch.tensor([1, 1, 1, 1, 0, 0, 0])
    predictions = torch.tensor([1, 1, 1, 0, 1, 0, 0])
    # TP=3, FN=1, FP=1, TN=2: (3*2 - 1*1) / sqrt((3+1)(3+1)(2+1)(2+1)) = 5 / 12
    assert math.isclose(matthews_corrcoef(predictions, labels), 5 / 12, rel_tol=1e-12)
    assert math.isclose(accuracy(predictions, labels), 5 / 7, rel_tol=1e-12)


def test_matthews_correlation_extremes():
    labels = torch.tensor([0, 1, 1, 0, 1])
    assert matthews_corrcoef(labels, labels) == 1.0
    assert matthews_corrcoef(1 - labels, labels) == -1.0
    assert matthews_corrcoef(torch.ones_like(labels), labels) == 0.0  # constant prediction
