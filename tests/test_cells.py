"""Recurrent cells (LSTM, Mogrifier, RLSTM) and the Melis language model built on them."""

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from infolm.errors import InfolmError
from infolm.models.base import MODELS, LMOutput, detach_state
from infolm.models.cells import LSTMCell, MogrifierLSTMCell, RLSTMCell
from infolm.models.melis import MelisConfig, MelisLM

B, T, IN, H = 3, 6, 5, 7
V = 40

CELLS = {
    "lstm": lambda backend: LSTMCell(IN, H, backend=backend),
    "lstm_capped": lambda backend: LSTMCell(IN, H, capped_input_gate=True, backend=backend),
    "mogrifier_r1_full": lambda backend: MogrifierLSTMCell(IN, H, rounds=1, rank=0, backend=backend),
    "mogrifier_r2_rank2": lambda backend: MogrifierLSTMCell(IN, H, rounds=2, rank=2, backend=backend),
    "mogrifier_r5_rank3_capped": lambda backend: MogrifierLSTMCell(
        IN, H, rounds=5, rank=3, capped_input_gate=True, backend=backend
    ),
    "mogrifier_r6_full": lambda backend: MogrifierLSTMCell(IN, H, rounds=6, rank=0, backend=backend),
    "rlstm": lambda backend: RLSTMCell(IN, H, backend=backend),
}


def _run(cell, x, state, mask, weights):
    outputs, (h, c) = cell(x, state, mask)
    loss = (outputs * weights[0]).sum() + (h * weights[1]).sum() + (c * weights[2]).sum()
    grads = torch.autograd.grad(loss, [x, *state, *cell.parameters()])
    return [outputs, h, c, *grads]


@pytest.mark.parametrize("masked", [False, True], ids=["no_mask", "state_mask"])
@pytest.mark.parametrize("name", sorted(CELLS))
def test_fused_cell_equals_eager_values_and_gradients(name, masked):
    """The hand-written BPTT equals autograd through the step-by-step formulas (outputs, h_T, c_T, all grads)."""
    torch.manual_seed(0)
    fused: Any = CELLS[name]("fused").double()
    eager = copy.deepcopy(fused)
    eager.backend = "eager"
    x = torch.randn(B, T, IN, dtype=torch.float64, requires_grad=True)
    state = tuple(torch.randn(B, H, dtype=torch.float64, requires_grad=True) for _ in range(2))
    mask = (torch.rand(B, H) > 0.3).double() / 0.7 if masked else None
    weights = [torch.randn(shape, dtype=torch.float64) for shape in ((B, T, H), (B, H), (B, H))]
    got = _run(fused, x, state, mask, weights)
    want = _run(eager, x, state, mask, weights)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", ["fused", "eager"])
def test_mogrifier_with_zero_rounds_is_the_lstm(backend):
    torch.manual_seed(0)
    lstm = LSTMCell(IN, H, capped_input_gate=True, backend=backend)
    mogrifier = MogrifierLSTMCell(IN, H, rounds=0, capped_input_gate=True, backend=backend)
    mogrifier.load_state_dict(lstm.state_dict())
    x = torch.randn(B, T, IN)
    state = (torch.randn(B, H), torch.randn(B, H))
    got, want = mogrifier(x, state), lstm(x, state)
    if backend == "fused":  # same code path: bit-identical
        assert torch.equal(got[0], want[0]) and torch.equal(got[1][1], want[1][1])
    else:  # per-step vs all-steps input GEMM: equal up to rounding
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=1e-6)


def test_mogrifier_with_zero_gates_is_the_lstm():
    """2 sigma(0) = 1: with Q^i = R^i = 0 every round is the identity (Eq. 2.2's factor 2)."""
    torch.manual_seed(0)
    lstm = LSTMCell(IN, H)
    mogrifier = MogrifierLSTMCell(IN, H, rounds=5, rank=0)
    mogrifier.load_state_dict(lstm.state_dict(), strict=False)
    with torch.no_grad():
        for p in mogrifier.mogrifier:
            p.zero_()
    x = torch.randn(B, T, IN)
    torch.testing.assert_close(mogrifier(x)[0], lstm(x)[0], rtol=0, atol=1e-6)


def test_mogrify_follows_eq_2_2():
    torch.manual_seed(0)
    cell = MogrifierLSTMCell(IN, H, rounds=3, rank=0)
    q1, r2, q3 = cell.mogrifier
    h, x = torch.randn(B, H), torch.randn(B, IN)
    x1 = 2 * torch.sigmoid(h @ q1.t()) * x
    h2 = 2 * torch.sigmoid(x1 @ r2.t()) * h
    x3 = 2 * torch.sigmoid(h2 @ q3.t()) * x1
    got_h, got_x = cell.mogrify(h, x)
    torch.testing.assert_close(got_h, h2)
    torch.testing.assert_close(got_x, x3)


def test_low_rank_factorization_is_a_product():
    torch.manual_seed(0)
    low = MogrifierLSTMCell(IN, H, rounds=2, rank=3)
    full = MogrifierLSTMCell(IN, H, rounds=2, rank=0)
    full.load_state_dict({k: v for k, v in low.state_dict().items() if not k.startswith("mogrifier")}, strict=False)
    with torch.no_grad():
        for k in range(2):
            full.mogrifier[k].copy_(low.mogrifier[2 * k] @ low.mogrifier[2 * k + 1])  # Q = Q_left Q_right
    x = torch.randn(B, T, IN)
    torch.testing.assert_close(low(x)[0], full(x)[0], rtol=1e-5, atol=1e-6)


def test_capped_input_gate_formula():
    """One step of the capped LSTM: c = f c_prev + min(i, 1 - f) j, h = o tanh(c)."""
    torch.manual_seed(0)
    cell = LSTMCell(IN, H, capped_input_gate=True)
    x, h0, c0 = torch.randn(B, 1, IN), torch.randn(B, H), torch.randn(B, H)
    pre = x[:, 0] @ cell.weight_ih.t() + h0 @ cell.weight_hh.t() + cell.bias
    a_i, a_f, a_o, a_j = pre.chunk(4, 1)  # gate order i, f, o, j
    i, f, o, j = a_i.sigmoid(), a_f.sigmoid(), a_o.sigmoid(), a_j.tanh()
    c = f * c0 + torch.minimum(i, 1 - f) * j
    out, (h, c_got) = cell(x, (h0, c0))
    torch.testing.assert_close(c_got, c)
    torch.testing.assert_close(h, o * torch.tanh(c))
    torch.testing.assert_close(out[:, 0], h)


@pytest.mark.parametrize("make", [lambda: LSTMCell(IN, H, capped_input_gate=True), lambda: RLSTMCell(IN, H)])
def test_capped_cells_keep_the_cell_state_in_unit_range(make):
    """|c| <= f |c_prev| + (1 - f) <= 1 from c_0 = 0, even with huge weights (Sec. 4.1)."""
    torch.manual_seed(0)
    cell = make()
    with torch.no_grad():
        for p in cell.parameters():
            p.mul_(50)
    _, (_, c) = cell(torch.randn(B, 50, IN) * 5)
    assert c.abs().max() <= 1.0
    uncapped = LSTMCell(IN, H)
    with torch.no_grad():
        uncapped.weight_hh.zero_()
        uncapped.bias.fill_(5.0)  # i = f = j ~ 1: c grows without the cap
    _, (_, c) = uncapped(torch.zeros(B, 10, IN))
    assert c.abs().max() > 5.0


@pytest.mark.parametrize("cls", [LSTMCell, MogrifierLSTMCell, RLSTMCell])
def test_chrono_init_range(cls):
    """Sec. 4.4: b_f ~ ln U(1, T_max - 1); other biases untouched."""
    torch.manual_seed(0)
    cell = cls(IN, 2000)
    before = cell.bias.detach().clone()
    t_max = math.exp(4)
    cell.chrono_init_(t_max)
    forget = cell.forget_bias.detach()
    assert forget.min() >= 0.0 and forget.max() <= math.log(t_max - 1)
    assert forget.min() < 0.2 and forget.max() > math.log(t_max - 1) - 0.05  # spans the range
    torch.testing.assert_close(forget.exp().mean(), torch.tensor(t_max / 2), rtol=0.05, atol=0)  # E[U(1, T-1)]
    changed = (cell.bias.detach() != before).nonzero().squeeze(1)
    assert (
        changed.min() >= cell.forget_bias.storage_offset() and changed.max() < cell.forget_bias.storage_offset() + 2000
    )


@pytest.mark.parametrize("name", sorted(CELLS))
def test_cell_state_carry_over(name):
    torch.manual_seed(0)
    cell = CELLS[name]("fused")
    x = torch.randn(B, T, IN)
    mask = (torch.rand(B, H) > 0.5).float() * 2
    full, (h, c) = cell(x, None, mask)
    first, state = cell(x[:, :3], None, mask)
    second, (h2, c2) = cell(x[:, 3:], state, mask)
    torch.testing.assert_close(torch.cat([first, second], 1), full)
    torch.testing.assert_close((h2, c2), (h, c))


def test_bad_backend_and_input_fail_clearly():
    with pytest.raises(InfolmError, match="backend"):
        LSTMCell(IN, H, backend="cuda-magic")
    with pytest.raises(InfolmError, match=r"\(B, T, 5\)"):
        LSTMCell(IN, H)(torch.randn(B, T, IN + 1))


# ------------------------------------------------------------------------------------------------ the Melis LM

TINY = {"hidden": 12, "layers": 3, "rounds": 3, "rank": 4}
DROPOUTS = {"dropout_input": 0.2, "dropout_state": 0.3, "dropout_cell": 0.2, "dropout_output": 0.3}


def _melis(cell: str, **settings: Any) -> Any:
    model = MODELS.build("melis", {**TINY, "cell": cell, **settings}, vocab_size=V)
    assert isinstance(model, MelisLM)
    return model


@pytest.mark.parametrize("cell", ["lstm", "mogrifier", "rlstm", "mogrifier_rlstm"])
def test_melis_state_carry_over_in_eval(cell):
    torch.manual_seed(0)
    model = _melis(cell, **DROPOUTS).eval()
    tokens = torch.randint(0, V, (2, 10))
    full = model(tokens, model.init_state(2))
    first = model(tokens[:, :4], model.init_state(2))
    second = model(tokens[:, 4:], detach_state(first.state))
    assert isinstance(full, LMOutput) and full.logits.shape == (2, 10, V)
    torch.testing.assert_close(torch.cat([first.logits, second.logits], 1), full.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(full.logits.log_softmax(-1).exp().sum(-1), torch.ones(2, 10))
    assert full.raw_hiddens is not None
    assert all(h.shape == (2, 10, 12) for h in full.hiddens + full.raw_hiddens)
    assert all(t.shape == (2, 12) for layer in full.state for t in layer)  # batch in dim 0


@pytest.mark.parametrize("cell", ["lstm", "mogrifier", "rlstm"])
def test_melis_fused_equals_eager_in_training(cell):
    """Same seed, same masks: the fused cells give the eager model's loss and gradients."""
    torch.manual_seed(0)
    fused = _melis(cell, **DROPOUTS).train()
    eager = copy.deepcopy(fused)
    for module in eager.cells:
        module.backend = "eager"  # type: ignore[assignment]
    tokens = torch.randint(0, V, (2, 8))
    grads = []
    for model in (fused, eager):
        torch.manual_seed(1)
        loss = model(tokens).logits.log_softmax(-1).mean()
        grads.append(torch.autograd.grad(loss, list(model.parameters())))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_melis_residual_sum_and_skip_output():
    """hiddens[l] is the residual stream sum_{i<=l} x^i; without dropout x^i is the raw cell output."""
    torch.manual_seed(0)
    model = _melis("lstm").eval()
    out = model(torch.randint(0, V, (2, 5)))
    raw = out.raw_hiddens
    torch.testing.assert_close(out.hiddens[1], raw[0] + raw[1])
    torch.testing.assert_close(out.hiddens[2], raw[0] + raw[1] + raw[2])
    torch.testing.assert_close(out.logits, model.decoder(out.hiddens[-1]))
    stacked = _melis("lstm", residual=False).eval()
    out = stacked(torch.randint(0, V, (2, 5)))
    torch.testing.assert_close(out.hiddens[-1], out.raw_hiddens[-1])


def test_melis_tied_embeddings_with_projection_and_chrono():
    model = _melis("rlstm", emb=6, chrono_t_max=math.exp(3))
    assert model.decoder.weight is model.embedding.weight
    assert model.projection is not None and model.projection.weight.shape == (6, 12)
    assert model.cells[0].input_size == 6 and model.cells[1].input_size == 12
    for cell in model.cells:
        assert cell.forget_bias.min() >= 0.0 and cell.forget_bias.max() <= math.log(math.exp(3) - 1)
    out = model.train()(torch.randint(0, V, (2, 5)))
    out.logits.log_softmax(-1).mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_melis_dropout_masks_vary_over_time_by_default():
    """Sec. 4.2: M^in, M^cell, M^out depend on t (only M^state is fixed); locked_masks=true locks them."""
    torch.manual_seed(0)
    out = _melis("lstm", dropout_output=0.5).train()(torch.randint(0, V, (2, 6)))
    zeros = out.hiddens[-1] == 0  # (B, T, H)
    assert not torch.equal(zeros.all(1), zeros.any(1))
    torch.manual_seed(0)
    model = _melis("lstm", dropout_output=0.5, locked_masks=True).train()
    out = model(torch.randint(0, V, (2, 6)))
    zeros = out.hiddens[-1] == 0  # a dropped unit stays dropped at every step
    assert torch.equal(zeros.all(1), zeros.any(1))


def test_melis_config_errors_are_one_line():
    with pytest.raises(InfolmError, match="model.cell must be one of"):
        MODELS.build("melis", {"cell": "gru"}, vocab_size=V)
    with pytest.raises(InfolmError, match="chrono_t_max"):
        MelisConfig(chrono_t_max=1.5)


def test_melis_input_embedding_ratio_sets_the_embedding_size():
    """App. 2.A: m = ratio x n with a projection to the output embedding; a ratio >= 1 gives m = n, no projection."""
    half = MODELS.build("melis", {"cell": "lstm", "hidden": 8, "input_embedding_ratio": 0.5}, vocab_size=V)
    assert half.embedding.weight.shape == (V, 4) and half.projection is not None
    full = MODELS.build("melis", {"cell": "lstm", "hidden": 8, "emb": 3, "input_embedding_ratio": 1.5}, vocab_size=V)
    assert full.embedding.weight.shape == (V, 8) and full.projection is None
    assert half(torch.randint(0, V, (2, 3))).logits.shape == (2, 3, V)
    with pytest.raises(InfolmError, match="input_embedding_ratio"):
        MelisConfig(input_embedding_ratio=-0.1)


def test_the_mogrifier_sweep_tunes_every_table_2_4_parameter():
    import yaml

    sweep = yaml.safe_load(
        (Path(__file__).resolve().parents[1] / "configs/sweeps/melis-small-mogrifier.yaml").read_text()
    )
    assert sweep["params"]["model.input_embedding_ratio"] == {"type": "uniform", "low": 0.0, "high": 2.0}
    assert len(sweep["params"]) == 9  # Table 2.4's nine rows


def test_the_chapter_4_recipe_config_trains(tmp_path):
    """configs/ptb/melis-ch4-mogrifier-rlstm.yaml: RAdam, chrono init, restarts, per-step masks, D = 8."""
    from infolm.build import train
    from infolm.config import load_config
    from infolm.training.metrics import read_metrics

    root = Path(__file__).resolve().parents[1]
    shrink = [
        f"run.dir={tmp_path}",
        "run.device=cpu",
        "data.max_train_tokens=3000",
        "data.max_eval_tokens=300",
        "data.batch_size=4",
        "data.bptt=10",
        "model.hidden=16",
        "model.rank=4",
        "train.max_steps=2",
        "train.log_every=1",
        "train.progress=false",
    ]
    config = load_config(root / "configs/ptb/melis-ch4-mogrifier-rlstm.yaml", shrink)
    assert config.optim.name == "radam" and config.train.divergence == {"enabled": True}
    assert config.objective == {"multisample": {"samples": 8}} and config.model["chrono_t_max"] > 2
    assert "locked_masks" not in config.model and not MelisConfig().locked_masks  # per-step masks
    train(config, shrink)
    steps = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "loss" in r and r.get("split") != "valid"]
    assert len(steps) == 2 and all(math.isfinite(r["loss"]) for r in steps)
