"""Every registered model satisfies the LM contract."""

import pytest
import torch

from infolm.models import MODELS, LMOutput, detach_state
from tests.conftest import tiny_model

V = 50


LANGUAGE_MODELS = [n for n in MODELS.names() if getattr(MODELS.get(n).factory, "protocol", "causal-lm") == "causal-lm"]


@pytest.fixture(params=LANGUAGE_MODELS)
def name(request):
    return request.param


def test_output_is_typed_and_normalizable(name):
    torch.manual_seed(0)
    model = tiny_model(name, V).eval()
    tokens = torch.randint(0, V, (3, 7))
    out = model(tokens, model.init_state(3))
    assert isinstance(out, LMOutput)
    assert out.logits.shape == (3, 7, V)
    assert all(h.shape[:2] == (3, 7) for h in out.hiddens)
    probs = out.logits.log_softmax(-1).exp().sum(-1)
    torch.testing.assert_close(probs, torch.ones(3, 7))


def test_deterministic_under_seed(name):
    outs = []
    for _ in range(2):
        torch.manual_seed(1)
        model = tiny_model(name, V).train()
        outs.append(model(torch.arange(12).view(2, 6) % V).logits)
    assert torch.equal(outs[0], outs[1])


def test_gradient_reaches_every_parameter(name):
    torch.manual_seed(0)
    model = tiny_model(name, V).train()
    out = model(torch.randint(0, V, (2, 5)), None)
    out.logits.log_softmax(-1).mean().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname


def test_state_carry_over_equals_one_pass(name):
    """Two halves with the state carried equal one pass (causality for stateless models)."""
    torch.manual_seed(0)
    model = tiny_model(name, V).eval()
    tokens = torch.randint(0, V, (2, 10))
    full = model(tokens, model.init_state(2))
    first = model(tokens[:, :5], model.init_state(2))
    if first.state is None:  # stateless: a prefix sees only itself, like the full pass's prefix
        torch.testing.assert_close(first.logits, full.logits[:, :5])
        return
    second = model(tokens[:, 5:], detach_state(first.state))
    torch.testing.assert_close(torch.cat([first.logits, second.logits], 1), full.logits, rtol=1e-5, atol=1e-5)


def test_state_after_equals_the_forward_state(name):
    """``state_after`` (no softmax layer) gives the state of a full forward pass, in evaluation mode."""
    from torch.utils._pytree import tree_flatten

    torch.manual_seed(0)
    model = tiny_model(name, V).eval()
    tokens = torch.randint(0, V, (2, 7))
    expected, _ = tree_flatten(model(tokens, model.init_state(2)).state)
    got, _ = tree_flatten(model.state_after(tokens, model.init_state(2)))
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_unknown_model_lists_known_ones():
    from infolm.errors import InfolmError

    with pytest.raises(InfolmError, match="unknown model 'gpt5'; known: .*lstm"):
        MODELS.build("gpt5", {}, vocab_size=V)


def test_lstm_tied_and_uniform_init():
    model = tiny_model("lstm", V, init_range=0.05)
    assert model.decoder.weight is model.embedding.weight
    assert max(p.abs().max().item() for p in model.parameters()) <= 0.05


def test_lstm_per_step_dropout_varies_the_mask_over_time() -> None:
    """locked_dropout=False (Xie et al.'s setup): a new mask at each step; locked: one per sequence."""
    from infolm.models.dropout import sequence_dropout

    x = torch.ones(2, 50, 30)
    torch.manual_seed(14)
    locked = sequence_dropout(x, 0.5, True, locked=True)
    per_step = sequence_dropout(x, 0.5, True, locked=False)
    assert torch.equal(locked, locked[:, :1].expand_as(locked))
    assert not torch.equal(per_step, per_step[:, :1].expand_as(per_step))
    assert set(per_step.unique().tolist()) == {0.0, 2.0}
    assert torch.equal(sequence_dropout(x, 0.5, False, locked=False), x)
