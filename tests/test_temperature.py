"""Softmax temperature: T=1 is plain cross-entropy, the fit recovers a known temperature, the
re-running search agrees with the exact fit on stored logits."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from infolm.evaluation.perplexity import stream_batches, stream_nll
from infolm.evaluation.temperature import (
    fit_temperature,
    nll_at_temperatures,
    stream_nll_at_temperatures,
    tune_temperature,
)
from infolm.models.base import LanguageModel, LMOutput

V, EOS = 17, 0


class Bigram(LanguageModel):
    """A stateless LM following the contract: logits from the previous token only, scaled by ``sharpness``."""

    def __init__(self, sharpness: float) -> None:
        super().__init__()
        self.vocab_size = V
        self.table = nn.Embedding(V, V)
        self.sharpness = sharpness

    def forward(self, tokens: Tensor, state: object = None) -> LMOutput:
        logits = self.sharpness * self.table(tokens)  # (B, T, V)
        return LMOutput(logits=logits, hiddens=[logits], state=None)


def test_temperature_one_is_cross_entropy() -> None:
    torch.manual_seed(0)
    logits, targets = torch.randn(3, 5, V), torch.randint(0, V, (3, 5))
    targets[2, 3:] = -100
    nll = nll_at_temperatures(logits, targets, [1.0, 2.0])
    expected = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum", ignore_index=-100)
    assert float(nll[0]) == pytest.approx(float(expected), rel=1e-6)
    expected_t2 = F.cross_entropy(logits.flatten(0, 1) / 2, targets.flatten(), reduction="sum", ignore_index=-100)
    assert float(nll[1]) == pytest.approx(float(expected_t2), rel=1e-6)


def test_fit_recovers_the_overconfidence_factor() -> None:
    generator = torch.Generator().manual_seed(1)
    true_logits = 1.5 * torch.randn(20000, V, generator=generator)
    targets = torch.multinomial(F.softmax(true_logits, -1), 1, generator=generator).squeeze(1)
    temperature = fit_temperature(2.5 * true_logits, targets)  # the model is 2.5x too confident
    assert temperature == pytest.approx(2.5, rel=0.03)
    around = nll_at_temperatures(2.5 * true_logits, targets, [temperature * 0.99, temperature, temperature * 1.01])
    assert float(around[1]) <= float(around[0]) and float(around[1]) <= float(around[2])
    # anti-correlated logits: the optimum beta = 1/T is negative, so T ends at the upper bound
    assert fit_temperature(-true_logits, targets, bounds=(0.1, 10.0)) == pytest.approx(10.0, rel=1e-5)


def test_search_by_rerunning_matches_exact_fit_on_stored_logits() -> None:
    torch.manual_seed(2)
    model = Bigram(sharpness=2.0)
    table = model.table.weight.detach()
    tokens = [EOS]
    for _ in range(600):  # text from the same bigram table at half the model's sharpness: T* near 2
        tokens.append(int(torch.multinomial(F.softmax(table[tokens[-1]], -1), 1)))
    stream = torch.tensor(tokens[1:])
    logits, targets = [], []
    with torch.no_grad():
        for inputs, window_targets in stream_batches(stream, EOS, 4, 16):
            logits.append(model(inputs).logits)
            targets.append(window_targets)
    exact = fit_temperature(torch.cat(logits, 1), torch.cat(targets, 1))
    tuned = tune_temperature(model, stream, EOS, batch_size=4, bptt=16)
    assert tuned.temperature == pytest.approx(exact, rel=1e-3) and tuned.passes <= 6
    assert tuned.nll <= tuned.nll_at_one
    static, tokens = stream_nll(model, stream, EOS, batch_size=4, bptt=16)
    assert tuned.nll_at_one == pytest.approx(static / tokens, rel=1e-6) and tuned.tokens == tokens == 600
    totals, _ = stream_nll_at_temperatures(model, stream, EOS, [tuned.temperature], batch_size=4, bptt=16)
    assert float(totals[0]) / tokens == pytest.approx(tuned.nll, rel=1e-6)  # float32 vs float64 sums
