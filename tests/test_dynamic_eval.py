"""Dynamic evaluation: lr 0 is static evaluation, one step follows Eq. 8, MS is the mean squared gradient."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from infolm.errors import InfolmError
from infolm.evaluation.dynamic import (
    DynamicEvalConfig,
    DynamicEvalGrid,
    dynamic_evaluate,
    gradient_statistics,
    tune_dynamic_eval,
)
from infolm.models.base import LanguageModel, LMOutput

V, EOS = 11, 0


class TinyLSTM(LanguageModel):
    """A minimal LM following the contract (embedding, dropout, LSTM, dropout, softmax)."""

    def __init__(self, dropout: float = 0.3, hidden: int = 16) -> None:
        super().__init__()
        self.vocab_size = V
        self.embedding = nn.Embedding(V, 8)
        self.lstm = nn.LSTM(8, hidden, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, V)

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
        zeros = torch.zeros(1, batch_size, self.lstm.hidden_size, device=device)
        return zeros, zeros.clone()

    def forward(self, tokens: Tensor, state: tuple[Tensor, Tensor] | None = None) -> LMOutput:
        state = state if state is not None else self.init_state(tokens.size(0), tokens.device)
        hidden, state = self.lstm(self.drop(self.embedding(tokens)), state)  # (B, T, H)
        return LMOutput(logits=self.head(self.drop(hidden)), hiddens=[hidden], state=state)


def static_nll(model: nn.Module, stream: Tensor) -> float:
    """One forward over the whole stream (one row): the reference for windowed evaluation."""
    model.eval()
    with torch.no_grad():
        inputs = torch.cat([torch.tensor([EOS]), stream[:-1]])[None]
        logits = model(inputs).logits[0]
        return float(F.cross_entropy(logits, stream, reduction="sum"))


@pytest.fixture
def model_and_stream() -> tuple[TinyLSTM, Tensor]:
    torch.manual_seed(0)
    return TinyLSTM(), torch.randint(1, V, (57,))


def test_lr_zero_equals_static_evaluation(model_and_stream) -> None:
    model, stream = model_and_stream
    ms = gradient_statistics(model, stream, EOS, batch_size=2, bptt=7)
    for batch_size in (1, 3):
        config = DynamicEvalConfig(lr=0.0, decay=0.5, bptt=5, batch_size=batch_size)
        result = dynamic_evaluate(model, stream, EOS, ms, config)
        assert result.tokens == stream.numel()
        if batch_size == 1:
            assert result.nll == pytest.approx(static_nll(model, stream), rel=1e-5)


def test_one_update_follows_eq_8_and_weights_are_restored(model_and_stream) -> None:
    model, stream = model_and_stream
    stream = stream[:10]  # two segments of 5 tokens, one row
    ms = gradient_statistics(model, stream, EOS, batch_size=1, bptt=5)
    before = [p.detach().clone() for p in model.parameters()]
    config = DynamicEvalConfig(lr=0.05, decay=0.3, epsilon=1e-3, bptt=5, batch_size=1)
    result = dynamic_evaluate(model, stream, EOS, ms, config)
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))
    assert model.training  # mode restored

    # by hand: segment 1 with theta_1, one RMS-normalized step (the decay term is 0 at theta_1), segment 2
    model.eval()
    inputs = torch.cat([torch.tensor([EOS]), stream[:-1]])[None]
    out1 = model(inputs[:, :5])
    loss1 = F.cross_entropy(out1.logits[0], stream[:5], reduction="sum")
    grads = torch.autograd.grad(loss1 / 5, list(model.parameters()))
    with torch.no_grad():
        for p, g, m in zip(model.parameters(), grads, ms):
            p.sub_(config.lr * g / (m.sqrt() + config.epsilon))
        state = tuple(s.detach() for s in out1.state)
        loss2 = F.cross_entropy(model(inputs[:, 5:], state).logits[0], stream[5:], reduction="sum")
        for p, b in zip(model.parameters(), before):
            p.copy_(b)
    assert result.nll == pytest.approx(float(loss1.detach()) + float(loss2), rel=1e-5)


def test_gradient_statistics_are_mean_squared_gradients(model_and_stream) -> None:
    model, stream = model_and_stream
    stream = stream[:8]
    ms = gradient_statistics(model, stream, EOS, batch_size=1, bptt=4)
    model.eval()
    inputs = torch.cat([torch.tensor([EOS]), stream[:-1]])[None]
    out = model(inputs[:, :4])
    g1 = torch.autograd.grad(F.cross_entropy(out.logits[0], stream[:4]), list(model.parameters()))
    state = tuple(s.detach() for s in out.state)
    g2 = torch.autograd.grad(
        F.cross_entropy(model(inputs[:, 4:], state).logits[0], stream[4:]), list(model.parameters())
    )
    for m, a, b in zip(ms, g1, g2):
        torch.testing.assert_close(m, (a.square() + b.square()) / 2)


def test_adaptation_helps_on_repeated_text_and_grid_search_picks_best() -> None:
    torch.manual_seed(1)
    model = TinyLSTM(dropout=0.0)
    pattern = torch.randint(1, V, (15,))
    stream = pattern.repeat(6)
    ms = gradient_statistics(model, torch.randint(1, V, (200,)), EOS, batch_size=4, bptt=10)
    static = dynamic_evaluate(model, stream, EOS, ms, DynamicEvalConfig(lr=0.0, bptt=5)).loss
    adapted = dynamic_evaluate(model, stream, EOS, ms, DynamicEvalConfig(lr=1e-2, decay=1e-3, bptt=5)).loss
    assert adapted < static - 0.3  # 1.97 vs 2.45 nats
    grid = DynamicEvalGrid(lr=[0.0, 1e-2], decay=[1e-3], epsilon=[1e-5], bptt=[])
    best, trials = tune_dynamic_eval(model, stream, EOS, ms, DynamicEvalConfig(bptt=5), grid)
    assert best.lr == 1e-2 and len(trials) == 2
    assert trials[0][1] == pytest.approx(static)


def test_grid_tunes_max_time_steps_and_ms_batch_is_the_thesis_value() -> None:
    """Table 2.6 tunes max_time_steps (the update segment length) too; MS is collected with batch 1024."""
    assert DynamicEvalConfig().ms_batch_size == 1024
    torch.manual_seed(1)
    model = TinyLSTM(dropout=0.0)
    stream = torch.randint(1, V, (15,)).repeat(6)
    ms = gradient_statistics(model, torch.randint(1, V, (200,)), EOS, batch_size=4, bptt=10)
    grid = DynamicEvalGrid(lr=[1e-2], decay=[1e-3], epsilon=[1e-5], bptt=[2, 5, 15])
    best, trials = tune_dynamic_eval(model, stream, EOS, ms, DynamicEvalConfig(), grid)
    assert [c.bptt for c, _ in trials] == [2, 5, 15]
    for config, loss in trials:
        assert loss == pytest.approx(dynamic_evaluate(model, stream, EOS, ms, config).loss)
    assert best == min(trials, key=lambda trial: trial[1])[0]
    assert len({round(loss, 6) for _, loss in trials}) == 3  # the segment length matters


def test_bad_inputs_fail_clearly(model_and_stream) -> None:
    model, stream = model_and_stream
    ms = gradient_statistics(model, stream, EOS, batch_size=1, bptt=5)
    with pytest.raises(InfolmError, match="do not match"):
        dynamic_evaluate(model, stream, EOS, ms[:-1], DynamicEvalConfig())
    with pytest.raises(InfolmError, match="all zero"):
        dynamic_evaluate(model, stream, EOS, [torch.zeros_like(m) for m in ms], DynamicEvalConfig())
    with pytest.raises(InfolmError):
        dataclasses.replace(DynamicEvalConfig(), bptt=0)


def test_gradient_statistics_from_few_windows_warn(model_and_stream, capsys) -> None:
    """MS from one window is the square of one averaged gradient, not a mean of squares: say so."""
    model, stream = model_and_stream  # 57 tokens
    gradient_statistics(model, stream, EOS, batch_size=4, bptt=20)  # 4 rows of 14 tokens: one window
    assert "come from 1 window(s) of 4 rows x 20 tokens" in capsys.readouterr().err
    gradient_statistics(model, stream, EOS, batch_size=1, bptt=5)  # 12 windows
    assert capsys.readouterr().err == ""


def test_run_reports_the_static_test_loss_beside_the_dynamic_one() -> None:
    """The baseline of the test loss is the same walk with the weights held: the one-row static NLL."""
    from infolm.evaluation.dynamic import run_dynamic_eval

    torch.manual_seed(1)
    model = TinyLSTM(dropout=0.0)
    streams = {"train": torch.randint(1, V, (200,)), "valid": torch.randint(1, V, (15,)).repeat(4)}
    streams["test"] = streams["valid"].flip(0)

    class Corpus:
        class vocab:  # noqa: N801 - the corpus attribute the evaluation reads
            eos_id = EOS

        def stream(self, split: str) -> Tensor:
            return streams[split]

    grid = DynamicEvalGrid(lr=[1e-2], decay=[1e-3], epsilon=[1e-5], bptt=[5])
    result = run_dynamic_eval(model, Corpus(), DynamicEvalConfig(ms_batch_size=4, ms_bptt=10), grid)
    assert result["static_test_nll"] == pytest.approx(static_nll(model, streams["test"]) / 60, rel=1e-5)
    assert result["static_valid_nll"] == pytest.approx(static_nll(model, streams["valid"]) / 60, rel=1e-5)
    assert result["test_nll"] < result["static_test_nll"] - 0.1  # repeated text: adaptation helps
