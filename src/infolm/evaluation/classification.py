"""Classification metrics: Matthews correlation (CoLA's metric, GLUE) and accuracy."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def confusion_matrix(predictions: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """(C, C) counts: row = true label, column = predicted label."""
    index = labels.long() * num_classes + predictions.long()
    return torch.bincount(index, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def matthews_corrcoef(predictions: Tensor, labels: Tensor, num_classes: int = 2) -> float:
    """Matthews correlation coefficient (Gorodkin's multiclass form; for two classes
    (TP·TN - FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN))). 0 when a marginal is constant."""
    c = confusion_matrix(predictions, labels, num_classes).double()
    n = c.sum()
    correct = c.trace()
    predicted = c.sum(0)  # per class, how often predicted
    true = c.sum(1)  # per class, how often true
    numerator = float(correct * n - (predicted * true).sum())
    denominator = math.sqrt(float(n * n - (predicted * predicted).sum()) * float(n * n - (true * true).sum()))
    return numerator / denominator if denominator > 0 else 0.0


def accuracy(predictions: Tensor, labels: Tensor) -> float:
    return float((predictions == labels).double().mean()) if labels.numel() else 0.0
