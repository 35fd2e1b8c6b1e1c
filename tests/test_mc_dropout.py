"""MC dropout: p=0 is deterministic evaluation; N masks average the token probabilities."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from infolm.errors import InfolmError
from infolm.evaluation.mc_dropout import MCDropoutConfig, mc_dropout_evaluate
from infolm.evaluation.perplexity import stream_batches, stream_nll
from infolm.models.base import LanguageModel, LMOutput

V, EOS = 13, 0


class TinyLSTM(LanguageModel):
    """A minimal LM following the contract, with dropout so that MC dropout is meaningful."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.vocab_size = V
        self.embedding = nn.Embedding(V, 8)
        self.lstm = nn.LSTM(8, 16, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(16, V)

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
        zeros = torch.zeros(1, batch_size, 16, device=device)
        return zeros, zeros.clone()

    def forward(self, tokens: Tensor, state: tuple[Tensor, Tensor] | None = None) -> LMOutput:
        state = state if state is not None else self.init_state(tokens.size(0), tokens.device)
        hidden, state = self.lstm(self.drop(self.embedding(tokens)), state)  # (B, T, H)
        return LMOutput(logits=self.head(self.drop(hidden)), hiddens=[hidden], state=state)


@pytest.fixture
def stream() -> Tensor:
    torch.manual_seed(0)
    return torch.randint(1, V, (41,))


@pytest.mark.parametrize("batch_size, per_pass", [(1, 1), (3, 1), (3, 4)])
def test_zero_dropout_equals_deterministic_evaluation(stream: Tensor, batch_size: int, per_pass: int) -> None:
    model = TinyLSTM(dropout=0.0)
    config = MCDropoutConfig(samples=4, samples_per_pass=per_pass, batch_size=batch_size, bptt=6)
    result = mc_dropout_evaluate(model, stream, EOS, config)
    nll, tokens = stream_nll(model, stream, EOS, batch_size=batch_size, bptt=6)
    assert result.tokens == tokens == stream.numel()
    assert result.nll == pytest.approx(nll, rel=1e-5)


def test_probabilities_are_averaged_over_masks(stream: Tensor) -> None:
    torch.manual_seed(1)
    model = TinyLSTM(dropout=0.5)
    samples, seed = 3, 7
    result = mc_dropout_evaluate(model, stream, EOS, MCDropoutConfig(samples=samples, batch_size=2, bptt=5, seed=seed))

    # by hand, in the same order of mask draws: per window, each sample in turn on its own state
    model.train()
    torch.manual_seed(seed)
    states: list = [None] * samples
    nll = 0.0
    with torch.no_grad():
        for inputs, targets in stream_batches(stream, EOS, 2, 5):
            probs = torch.zeros(targets.shape)
            for d in range(samples):
                output = model(inputs, states[d] if states[d] is not None else model.init_state(2))
                states[d] = output.state
                p = F.softmax(output.logits, -1).gather(-1, targets.clamp(min=0)[..., None])[..., 0]
                probs += p / samples
            mask = targets != -100
            nll -= float(probs[mask].log().sum())
    assert result.nll == pytest.approx(nll, rel=1e-5)
    # Jensen: averaging probabilities beats each mask's own log-likelihood on average
    singles = [
        mc_dropout_evaluate(model, stream, EOS, MCDropoutConfig(samples=1, batch_size=2, bptt=5, seed=s)).nll
        for s in range(3)
    ]
    assert result.nll < sum(singles) / 3


def test_rng_untouched_and_mode_restored(stream: Tensor) -> None:
    model = TinyLSTM(dropout=0.3).eval()
    rng = torch.get_rng_state()
    first = mc_dropout_evaluate(model, stream, EOS, MCDropoutConfig(samples=2, bptt=8))
    assert torch.equal(rng, torch.get_rng_state()) and not model.training
    assert mc_dropout_evaluate(model, stream, EOS, MCDropoutConfig(samples=2, bptt=8)).nll == first.nll
    with pytest.raises(InfolmError, match="samples"):
        MCDropoutConfig(samples=0)


def test_rate_scale_zero_and_temperature_equal_deterministic_evaluation(stream: Tensor) -> None:
    """Sec. 2.2.2 settings: rates x 0 is deterministic evaluation; the temperature divides the logits."""
    from infolm.evaluation.temperature import nll_at_temperatures
    from infolm.models import MODELS

    torch.manual_seed(1)
    model = MODELS.build(
        "lstm", {"emb": 8, "hidden": 8, "layers": 2, "dropout": 0.4, "dropout_input": 0.3}, vocab_size=V
    )
    rates = (model.config.dropout, model.config.dropout_input)
    config = MCDropoutConfig(samples=3, batch_size=2, bptt=5, rate_scale=0.0, temperature=1.3)
    got = mc_dropout_evaluate(model, stream, EOS, config)
    assert (model.config.dropout, model.config.dropout_input) == rates  # restored
    model.eval()
    logits, targets = [], []
    with torch.no_grad():
        state = model.init_state(2)
        for inputs, window_targets in stream_batches(stream, EOS, 2, 5):
            output = model(inputs, state)
            state = output.state
            logits.append(output.logits)
            targets.append(window_targets)
    expected = nll_at_temperatures(torch.cat(logits, 1), torch.cat(targets, 1), [1.3])[0].item()
    assert got.nll == pytest.approx(expected, rel=1e-5)


def test_scaled_dropout_rates_scales_modules_and_configs() -> None:
    from infolm.evaluation.mc_dropout import scaled_dropout_rates
    from infolm.models import MODELS

    tiny = TinyLSTM(0.5)
    lstm = MODELS.build("lstm", {"emb": 8, "hidden": 8, "dropout": 0.6, "weight_drop": 0.2}, vocab_size=V)
    with scaled_dropout_rates(tiny, 0.5), scaled_dropout_rates(lstm, 2.0):
        assert tiny.drop.p == 0.25
        assert lstm.config.dropout == 0.95 and lstm.config.weight_drop == 0.4  # capped at 0.95
    assert tiny.drop.p == 0.5 and lstm.config.dropout == 0.6 and lstm.config.weight_drop == 0.2


def test_run_mc_dropout_tunes_rate_scale_and_temperature_on_valid(stream: Tensor) -> None:
    from infolm.evaluation.mc_dropout import MCDropoutGrid, run_mc_dropout

    class Corpus:
        class vocab:  # noqa: N801 - the corpus attribute the evaluation reads
            eos_id = EOS

        def stream(self, split: str) -> Tensor:
            return stream if split == "valid" else stream.flip(0)

    torch.manual_seed(2)
    model = TinyLSTM(0.5)
    config = MCDropoutConfig(samples=4, batch_size=2, bptt=5)
    grid = MCDropoutGrid(rate_scales=(0.0, 1.0), temperatures=(0.5, 1.0, 2.0))
    result = run_mc_dropout(model, Corpus(), config, grid=grid)
    trials = [
        mc_dropout_evaluate(model, stream, EOS, MCDropoutConfig(4, 1, 2, 5, 0, scale, temperature)).loss
        for scale in grid.rate_scales
        for temperature in grid.temperatures
    ]
    assert result["valid_nll"] == pytest.approx(min(trials))
    best = trials.index(min(trials))
    assert (result["rate_scale"], result["temperature"]) == (grid.rate_scales[best // 3], grid.temperatures[best % 3])
    untuned = run_mc_dropout(model, Corpus(), config, grid=MCDropoutGrid((), ()))
    assert (untuned["rate_scale"], untuned["temperature"]) == (1.0, 1.0) and untuned["valid_nll"] == pytest.approx(
        trials[4]
    )
    assert untuned["tuned_on_valid_tokens"] == 0 and result["tuned_on_valid_tokens"] == stream.numel()
    # the baseline of the test loss: the same rows and windows with dropout off
    nll, tokens = stream_nll(model, stream.flip(0), EOS, batch_size=2, bptt=5)
    assert result["standard_test_nll"] == untuned["standard_test_nll"] == pytest.approx(nll / tokens)
    assert model.drop.p == 0.5
