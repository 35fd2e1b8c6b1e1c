"""AWD-LSTM's activation regularizers (Merity et al. 2017, Sec. 4.6).

AR penalizes large outputs of the last layer (after dropout); TAR penalizes fast changes of the
last layer's raw outputs between consecutive time steps. The Composite weight is alpha / beta.
On padded batches (sentences) both are means over real positions only (ours: AWD-LSTM has no padding).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor, nn

from infolm.objectives.base import Batch, Objective, Terms, register_objective


def activation_regularization(hidden: Tensor, mask: Tensor | None = None) -> Tensor:
    """AR: mean of squared activations. hidden (B, T, H); mask (B, T), True at real positions."""
    if mask is None:
        return hidden.pow(2).mean()
    return _masked_mean(hidden.pow(2), mask)


def temporal_activation_regularization(hidden: Tensor, mask: Tensor | None = None) -> Tensor:
    """TAR: mean squared difference of consecutive time steps. hidden (B, T, H); mask (B, T)."""
    change = (hidden[:, 1:] - hidden[:, :-1]).pow(2)  # (B, T-1, H)
    if mask is None:
        return change.mean()
    return _masked_mean(change, mask[:, 1:] & mask[:, :-1])


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` (B, T, H) over the positions where ``mask`` (B, T) is True."""
    weights = mask.to(values.dtype).unsqueeze(-1)  # (B, T, 1)
    return (values * weights).sum() / (weights.sum() * values.size(-1)).clamp(min=1.0)


@dataclasses.dataclass
class ARConfig:
    weight: float = 2.0  # alpha (AWD-LSTM: 2)


@dataclasses.dataclass
class TARConfig:
    weight: float = 1.0  # beta (AWD-LSTM: 1)


@register_objective("ar", config=ARConfig)
class ActivationRegularization(Objective):
    """AR on the last layer's dropped-out outputs."""

    def __init__(self, config: ARConfig) -> None:
        super().__init__()
        self.config = config

    def loss_scale(self, vocab_size: int) -> float | None:
        return 1.0  # the mean square of unit-scale activations (LSTM/GRU outputs lie in (-1, 1))

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        return Terms(losses={"ar": activation_regularization(output.hiddens[-1], batch.padding_mask)})


@register_objective("tar", config=TARConfig)
class TemporalActivationRegularization(Objective):
    """TAR on the last layer's raw outputs."""

    def __init__(self, config: TARConfig) -> None:
        super().__init__()
        self.config = config

    def loss_scale(self, vocab_size: int) -> float | None:
        return 2.0  # the mean squared difference of two independent unit-scale activations

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        raw = output.raw_hiddens if output.raw_hiddens is not None else output.hiddens
        return Terms(losses={"tar": temporal_activation_regularization(raw[-1], batch.padding_mask)})
