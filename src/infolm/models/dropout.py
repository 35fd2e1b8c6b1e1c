"""AWD-LSTM dropouts: locked (variational) dropout, embedding dropout, weight drop."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def locked_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """One mask per sequence, shared over time. x: (B, T, H)."""
    if not training or p == 0.0:
        return x
    mask = x.new_empty(x.size(0), 1, x.size(2)).bernoulli_(1 - p) / (1 - p)  # (B, 1, H)
    return x * mask


def sequence_dropout(x: Tensor, p: float, training: bool, locked: bool) -> Tensor:
    """Dropout on (B, T, H): one mask per sequence if ``locked`` (AWD), else a new mask at each time
    step (Zaremba et al. 2014, the setup of Xie et al. 2017)."""
    return locked_dropout(x, p, training) if locked else F.dropout(x, p, training)


def embedding_dropout(weight: Tensor, p: float, training: bool) -> Tensor:
    """Drop whole word types (rows of the embedding matrix), Gal & Ghahramani 2016."""
    if not training or p == 0.0:
        return weight
    mask = weight.new_empty(weight.size(0), 1).bernoulli_(1 - p) / (1 - p)  # (V, 1)
    return weight * mask


def weight_drop(weight: Tensor, p: float, training: bool) -> Tensor:
    """DropConnect on a weight matrix (AWD-LSTM applies it to the hidden-to-hidden weights)."""
    return F.dropout(weight, p, training) if p > 0.0 else weight


def uniform_init_(module: torch.nn.Module, init_range: float) -> None:
    """Every parameter ~ U(-init_range, init_range) (Zaremba et al. 2014)."""
    for parameter in module.parameters():
        torch.nn.init.uniform_(parameter, -init_range, init_range)
