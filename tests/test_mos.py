"""AWD-LSTM-MoS: the mixture is a distribution, state carries over, the regularizers behave."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from infolm.errors import InfolmError
from infolm.models.base import MODELS, detach_state
from infolm.models.mos import AWDLSTMMoS, MoSConfig

V = 23


def tiny(**overrides: object) -> AWDLSTMMoS:
    settings = {"emb": 8, "hidden": 12, "last_hidden": 10, "n_experts": 3, **overrides}
    model = MODELS.build("awd-lstm-mos", settings, vocab_size=V)
    assert isinstance(model, AWDLSTMMoS)
    return model


def test_output_log_probs_sum_to_one_train_and_eval() -> None:
    torch.manual_seed(0)
    model = tiny()
    tokens = torch.randint(V, (3, 7))
    for training in (True, False):
        model.train(training)
        out = model(tokens)
        total = out.logits.exp().sum(-1)  # (B, T)
        torch.testing.assert_close(total, torch.ones_like(total), atol=1e-5, rtol=0)
        torch.testing.assert_close(F.log_softmax(out.logits, -1), out.logits, atol=1e-5, rtol=0)
        assert [h.shape[-1] for h in out.hiddens] == [12, 12, 10]
        assert out.raw_hiddens is not None and len(out.raw_hiddens) == 3


def test_mixture_equals_explicit_sum_of_softmaxes() -> None:
    torch.manual_seed(1)
    model = tiny().eval()
    g = torch.randn(2, 4, 10)
    prior = F.softmax(model.prior(g), -1)  # (B, T, K)
    latent = torch.tanh(model.latent(g)).view(2, 4, 3, 8)
    experts = F.softmax(latent @ model.encoder.weight.T + model.decoder.bias, -1)  # (B, T, K, V)
    expected = (prior.unsqueeze(-1) * experts).sum(2).log()
    torch.testing.assert_close(model.output_log_probs(g), expected, atol=1e-5, rtol=1e-5)


def test_single_expert_is_a_plain_softmax() -> None:
    torch.manual_seed(2)
    model = tiny(n_experts=1).eval()
    g = torch.randn(2, 5, 10)
    plain = F.log_softmax(model.decoder(torch.tanh(model.latent(g))), -1)
    torch.testing.assert_close(model.output_log_probs(g), plain, atol=1e-5, rtol=1e-5)


def test_without_latent_bias_the_experts_are_tanh_of_a_linear_map() -> None:
    """``latent_bias=false``: h_{t,k} = tanh(P_k g_t) with no bias parameter; still a distribution."""
    torch.manual_seed(5)
    model = tiny(latent_bias=False).eval()
    assert model.latent.bias is None
    assert not any(name.startswith("latent.bias") for name, _ in model.named_parameters())
    g = torch.randn(2, 4, 10)
    prior = F.softmax(g @ model.prior.weight.T, -1)  # (B, T, K)
    latent = torch.tanh(g @ model.latent.weight.T).view(2, 4, 3, 8)
    experts = F.softmax(latent @ model.encoder.weight.T + model.decoder.bias, -1)  # (B, T, K, V)
    expected = (prior.unsqueeze(-1) * experts).sum(2).log()
    torch.testing.assert_close(model.output_log_probs(g), expected, atol=1e-5, rtol=1e-5)
    with_bias = tiny()
    assert sum(p.numel() for p in with_bias.parameters()) - sum(p.numel() for p in model.parameters()) == 3 * 8


def test_state_carry_over_equals_full_pass() -> None:
    torch.manual_seed(3)
    model = tiny().eval()
    tokens = torch.randint(V, (2, 10))
    full = model(tokens)
    first = model(tokens[:, :6])
    second = model(tokens[:, 6:], detach_state(first.state))
    torch.testing.assert_close(torch.cat([first.logits, second.logits], 1), full.logits, atol=1e-5, rtol=1e-5)


def test_tied_weights_and_weight_drop_gradient_reaches_raw_weight() -> None:
    torch.manual_seed(4)
    model = tiny().train()
    assert model.decoder.weight is model.encoder.weight
    out = model(torch.randint(V, (2, 5)))
    out.logits.sum().backward()
    recurrent = [p for name, p in model.named_parameters() if name.endswith("weight_hh_l0")]
    assert len(recurrent) == 3
    for weight in recurrent:
        assert weight.grad is not None and weight.grad.abs().sum() > 0


def test_dropout_off_in_eval_and_deterministic_under_seed() -> None:
    model = tiny()
    tokens = torch.randint(V, (2, 6), generator=torch.Generator().manual_seed(0))
    model.eval()
    torch.testing.assert_close(model(tokens).logits, model(tokens).logits)
    model.train()
    torch.manual_seed(5)
    a = model(tokens).logits
    torch.manual_seed(5)
    b = model(tokens).logits
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, model(tokens).logits)


def test_bad_config_is_a_user_error() -> None:
    with pytest.raises(InfolmError):
        MoSConfig(dropout=1.0)
    with pytest.raises(InfolmError):
        MODELS.build("awd-lstm-mos", {"n_experts": 0}, vocab_size=V)


def test_hidden_states_match_the_full_pass() -> None:
    model = tiny()
    tokens = torch.randint(V, (2, 6))
    torch.manual_seed(8)
    full = model(tokens)
    torch.manual_seed(8)
    partial = model.hidden_states(tokens)
    assert partial.logits.shape == (2, 6, 0)
    for a, b in zip(full.hiddens, partial.hiddens, strict=True):
        torch.testing.assert_close(a, b)
