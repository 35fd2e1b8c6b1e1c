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
