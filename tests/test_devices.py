"""What lets training run on a GPU, checked on the CPU: extra passes in eval mode that cuDNN can
back-propagate through, and averages that follow the parameters to their device."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from infolm.models.base import eval_mode
from infolm.optim.averaging import AVERAGERS


class TwoRNNs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.plain = nn.LSTM(4, 5, num_layers=2)  # no dropout of its own
        self.stacked = nn.LSTM(5, 5, num_layers=2, dropout=0.5)  # dropout between its layers
        self.dropout = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stacked(self.dropout(self.plain(x)[0]))[0]


def test_eval_mode_turns_dropout_off_and_keeps_cudnn_able_to_back_propagate():
    torch.manual_seed(0)
    model = TwoRNNs().train()
    x = torch.randn(3, 2, 4)
    with torch.no_grad():
        model.eval()
        expected = model(x)
        model.train()
    with eval_mode(model):
        assert model.plain.training  # same output in both modes; cuDNN then allows backward
        assert not model.stacked.training and not model.dropout.training  # their dropout must be off
        assert not torch.backends.cudnn.enabled  # so the stacked layer runs without cuDNN
        out = model(x)
        out.sum().backward()
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)  # the CPU's train-mode kernel differs in rounding
    assert torch.backends.cudnn.enabled
    assert all(module.training for module in model.modules())


def test_eval_mode_leaves_an_evaluating_model_in_eval_mode():
    model = TwoRNNs().eval()
    with eval_mode(model):
        assert not any(module.training for module in model.modules())
    assert not any(module.training for module in model.modules())


@pytest.mark.parametrize("name", ["two-tailed", "tail", "ema"])
def test_averages_follow_the_parameters_to_their_device(name):
    model = nn.Linear(3, 2)
    averager = AVERAGERS.build(name, {}, list(model.parameters()), where="optim.average")
    model.to("meta")
    averager.to("meta")
    lists = [value for key, value in vars(averager).items() if key != "params" and isinstance(value, list)]
    averages = [t for value in lists for t in value]
    assert averages and all(t.device.type == "meta" for t in averages)
