"""Latent-variable model contract: every registered latent model, batched draws equal separate passes."""

from __future__ import annotations

import pytest
import torch

from infolm.errors import InfolmError
from infolm.latent import LatentVariableModel, latent_bounds, objective_surrogate
from infolm.latent.estimators import kl_objective
from infolm.models import MODELS

LATENT_MODELS = [
    ("latent-synthetic", {"latent": "gaussian", "latent_size": 6, "hidden": 16, "embedding": 8}),
    ("latent-synthetic", {"latent": "categorical", "variables": 3, "categories": 4, "hidden": 16, "embedding": 8}),
]
SENTENCE = {"embedding": 8, "hidden": 12, "latent_embedding": 6}
LATENT_MODELS += [
    ("latent-sentence-lstm", {"latent": "gaussian", "latent_size": 5, **SENTENCE}),
    ("latent-sentence-lstm", {"latent": "categorical", "variables": 2, "categories": 3, **SENTENCE}),
]
IDS = ["synthetic-gaussian", "synthetic-categorical", "sentence-gaussian", "sentence-categorical"]


def build(name: str, settings: dict, vocab: int = 30) -> LatentVariableModel:
    torch.manual_seed(0)
    model = MODELS.build(name, settings, vocab_size=vocab, where="model")
    assert isinstance(model, LatentVariableModel)
    return model


def batch(name: str = "latent-synthetic", vocab: int = 30, B: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """One symbol per row for the synthetic model, right-padded sentences of different lengths otherwise."""
    g = torch.Generator().manual_seed(1)
    if name == "latent-synthetic":
        return torch.randint(0, vocab, (B, 1), generator=g), torch.ones(B, dtype=torch.long)
    lengths = torch.tensor([7, 3, 5, 1, 6])[:B]
    tokens = torch.randint(0, vocab, (B, 7), generator=g)
    return tokens.masked_fill(torch.arange(7) >= lengths.unsqueeze(1), 0), lengths


@pytest.mark.parametrize("name,settings", LATENT_MODELS, ids=IDS)
def test_batched_draws_equal_separate_passes(name, settings) -> None:
    model = build(name, settings).eval()
    tokens, lengths = batch(name)
    z = model.posterior(tokens, lengths).sample((4,))  # (K, B, *event)
    together = model.log_likelihood(tokens, lengths, z)
    apart = torch.cat([model.log_likelihood(tokens, lengths, z[k : k + 1]) for k in range(4)])
    torch.testing.assert_close(together, apart)
    # and each example on its own, without padding: padding changes neither q(z|x) nor ln p(x|z)
    single, means = [], []
    for b in range(5):
        row, length = tokens[b : b + 1, : int(lengths[b])], lengths[b : b + 1]
        single.append(model.log_likelihood(row, length, z[:, b : b + 1])[:, 0])
        means.append(model.posterior(row, length).mean[0])
    torch.testing.assert_close(together, torch.stack(single, 1))
    torch.testing.assert_close(model.posterior(tokens, lengths).mean, torch.stack(means))


@pytest.mark.parametrize("name,settings", LATENT_MODELS[:2], ids=IDS[:2])
def test_probabilities_and_priors(name, settings) -> None:
    model = build(name, settings).eval()
    tokens, lengths = batch(name)
    z = model.posterior(tokens, lengths).sample((2,))
    # p(x|z) sums to one over the vocabulary for a fixed z (one-symbol data)
    everything = torch.arange(30).view(30, 1)
    zs = z[:, :1].expand(2, 30, *z.shape[2:])
    total = model.log_likelihood(everything, torch.ones(30), zs).exp().sum(1)
    torch.testing.assert_close(total, torch.ones(2))
    log_prior = model.prior().log_prob(z)
    assert log_prior.shape == (2, 5)
    if settings["latent"] == "categorical":  # uniform prior: ln p(z) = -n ln C
        torch.testing.assert_close(log_prior, torch.full((2, 5), -3 * torch.log(torch.tensor(4.0)).item()))


@pytest.mark.parametrize("name,settings", LATENT_MODELS, ids=IDS)
def test_estimators_give_every_parameter_a_gradient(name, settings) -> None:
    model = build(name, settings)
    tokens, lengths = batch(name)
    estimators = ("iwae", "stl", "dreg", "elbo") if model.reparameterized else ("reinforce", "vimco")
    for estimator in estimators:
        model.zero_grad()
        base = "elbo" if estimator == "elbo" else "iwae"
        out = objective_surrogate(model, tokens, lengths, kl_objective(0.5, 3, 3, base), estimator)
        out.surrogate.mean().backward()
        for pname, p in model.named_parameters():
            assert p.grad is not None and bool(p.grad.abs().sum() > 0), (estimator, pname)
    bounds = latent_bounds(model, tokens, lengths, samples=6, chunk=4)  # chunked decoding
    torch.testing.assert_close(bounds.elbo, -bounds.distortion - bounds.rate)


def test_pathwise_estimators_refuse_categorical_latents() -> None:
    model = build(*LATENT_MODELS[1])
    tokens, lengths = batch()
    with pytest.raises(ValueError, match="reparameterized"):
        objective_surrogate(model, tokens, lengths, kl_objective(0.5, 2, 2), "dreg")


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"latent": "mixture"}, "gaussian or categorical"),
        ({"latent_size": 0}, "latent_size"),
        ({"categories": 1}, "categories"),
    ],
)
def test_bad_latent_settings_are_refused(settings, message) -> None:
    with pytest.raises(InfolmError, match=message):
        MODELS.build("latent-synthetic", settings, vocab_size=10, where="model")


@pytest.mark.parametrize("shared", [True, False])
def test_dropout_mask_shared_across_latent_draws(shared) -> None:
    """With one mask per sentence, K copies of the same z score identically in training mode."""
    settings = {**LATENT_MODELS[2][1], "dropout_input": 0.5, "dropout_output": 0.5, "shared_dropout_mask": shared}
    model = build("latent-sentence-lstm", settings).train()
    tokens, lengths = batch("latent-sentence-lstm")
    z = model.posterior(tokens, lengths).sample().expand(4, -1, -1)  # the same draw 4 times
    scores = model.log_likelihood(tokens, lengths, z)
    spread = float((scores - scores[:1]).abs().max().detach())
    assert (spread < 1e-5) if shared else (spread > 1e-3)


def test_step_by_step_decoder_equals_fused_with_gradients() -> None:
    """The state-dropout path (the cell of models/cells.py on nn.LSTM's weights) under an all-ones
    mask is the fused nn.LSTM: same ln p(x|z) and the same gradient for every parameter."""
    model = build("latent-sentence-lstm", {**LATENT_MODELS[2][1], "dropout_state": 0.5}).eval()
    tokens, lengths = batch("latent-sentence-lstm")
    z = model.posterior(tokens, lengths).sample((3,)).detach()
    inputs = torch.randn(15, 7, model.decoder.input_size)
    fused = model.decode(inputs)
    stepped = model.decode(inputs, torch.ones(15, model.config.hidden))
    torch.testing.assert_close(stepped, fused)
    (grad_fused,) = torch.autograd.grad(fused.square().sum(), model.decoder.weight_hh_l0)
    (grad_stepped,) = torch.autograd.grad(stepped.square().sum(), model.decoder.weight_hh_l0)
    torch.testing.assert_close(grad_stepped, grad_fused)
    # in evaluation the model with dropout_state > 0 scores exactly as the one without
    plain = build("latent-sentence-lstm", LATENT_MODELS[2][1]).eval()
    plain.load_state_dict(model.state_dict())  # same parameter names: checkpoints load across settings
    torch.testing.assert_close(model.log_likelihood(tokens, lengths, z), plain.log_likelihood(tokens, lengths, z))


def test_state_dropout_path_equals_the_eager_reference() -> None:
    """In training the step path equals the cells' autograd reference (eager LSTM) with h_{t-1} * M^state."""
    from infolm.models.cells import lstm_sequence, torch_lstm_weights

    model = build("latent-sentence-lstm", {**LATENT_MODELS[2][1], "dropout_state": 0.5})
    inputs = torch.randn(4, 6, model.decoder.input_size)
    mask = torch.bernoulli(torch.full((4, model.config.hidden), 0.5)) / 0.5
    zeros = torch.zeros(4, model.config.hidden)
    reference, _ = lstm_sequence(inputs, (zeros, zeros), mask, *torch_lstm_weights(model.decoder), backend="eager")
    torch.testing.assert_close(model.decode(inputs, mask), reference)
    assert not torch.allclose(model.decode(inputs, mask), model.decode(inputs))  # the mask acts


@pytest.mark.parametrize("shared", [True, False])
def test_state_dropout_mask_shared_across_latent_draws(shared) -> None:
    """Only state dropout on: K copies of the same z score identically with a shared mask, differently without."""
    settings = {**LATENT_MODELS[2][1], "dropout_state": 0.5, "shared_dropout_mask": shared}
    model = build("latent-sentence-lstm", settings).train()
    tokens, lengths = batch("latent-sentence-lstm")
    z = model.posterior(tokens, lengths).sample().expand(4, -1, -1)  # the same draw 4 times
    scores = model.log_likelihood(tokens, lengths, z).detach()
    spread = float((scores - scores[:1]).abs().max())
    assert (spread < 1e-5) if shared else (spread > 1e-3)
    model.eval()  # no mask in evaluation: deterministic
    torch.testing.assert_close(model.log_likelihood(tokens, lengths, z), model.log_likelihood(tokens, lengths, z))


@pytest.mark.parametrize("latent", ["gaussian", "categorical"])
def test_state_dropout_gives_every_parameter_a_gradient(latent) -> None:
    settings = LATENT_MODELS[2 if latent == "gaussian" else 3][1]
    model = build("latent-sentence-lstm", {**settings, "dropout_state": 0.3, "dropout_input": 0.2}).train()
    tokens, lengths = batch("latent-sentence-lstm")
    estimator = "dreg" if latent == "gaussian" else "vimco"
    out = objective_surrogate(model, tokens, lengths, kl_objective(0.5, 3, 3), estimator)
    out.surrogate.mean().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and bool(p.grad.abs().sum() > 0), pname
        assert bool(p.grad.isfinite().all()), pname


@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5])
def test_invalid_state_dropout_is_refused(rate) -> None:
    with pytest.raises(InfolmError, match=r"model.dropout_state must be in \[0, 1\)"):
        MODELS.build("latent-sentence-lstm", {"dropout_state": rate}, vocab_size=10, where="model")


def test_blocked_softmax_equals_one_block_with_gradients() -> None:
    from infolm.latent.softmax import token_log_likelihood

    torch.manual_seed(0)
    layer = torch.nn.Linear(6, 11)
    hidden = torch.randn(23, 6, requires_grad=True)
    targets = torch.randint(0, 11, (23,))
    whole = token_log_likelihood(hidden, layer, targets)
    (grad_whole,) = torch.autograd.grad(whole.sum(), hidden)
    blocked = token_log_likelihood(hidden, layer, targets, block_elements=11 * 4)  # blocks of 4 rows
    (grad_blocked,) = torch.autograd.grad(blocked.sum(), hidden)
    torch.testing.assert_close(blocked, whole)
    torch.testing.assert_close(grad_blocked, grad_whole)
    torch.testing.assert_close(whole, torch.log_softmax(layer(hidden), -1).gather(1, targets[:, None])[:, 0])


def test_tied_decoder_softmax_is_the_decoder_embedding(tmp_path) -> None:
    """tie_weights: one (V, E) matrix for the decoder's input embedding and its softmax, saved once and
    loaded back tied; a mismatched hidden size is refused with one line."""
    from infolm.training.checkpoint import load_weights_file, save_weights

    settings = {"latent": "gaussian", "latent_size": 5, "embedding": 8, "hidden": 8}
    untied, tied = (
        build("latent-sentence-lstm", settings),
        build("latent-sentence-lstm", {**settings, "tie_weights": True}),
    )
    assert tied.softmax.weight is tied.decoder_embedding.weight
    count = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731
    assert count(untied) - count(tied) == 30 * 8
    tokens, lengths = batch("latent-sentence-lstm")
    z = tied.posterior(tokens, lengths).rsample((2,))
    tied.log_likelihood(tokens, lengths, z).sum().backward()
    assert tied.decoder_embedding.weight.grad is not None and tied.decoder_embedding.weight.grad.abs().sum() > 0
    save_weights(tied, tmp_path / "model.safetensors")
    loaded = build("latent-sentence-lstm", {**settings, "tie_weights": True})
    torch.nn.init.zeros_(loaded.decoder_embedding.weight)
    assert load_weights_file(loaded, tmp_path / "model.safetensors") == []
    assert loaded.softmax.weight is loaded.decoder_embedding.weight
    torch.testing.assert_close(loaded.decoder_embedding.weight, tied.decoder_embedding.weight)
    with pytest.raises(InfolmError, match="tie_weights needs model.hidden == model.embedding, got 12 and 8"):
        build("latent-sentence-lstm", {**settings, "hidden": 12, "tie_weights": True})


def test_sentence_lstm_init_range_bounds_every_parameter() -> None:
    """init_range r draws every parameter from U(-r, r), tied softmax included; 0 keeps PyTorch's defaults."""
    for settings in (LATENT_MODELS[2][1], {**LATENT_MODELS[2][1], "hidden": 8, "tie_weights": True}):
        model = build("latent-sentence-lstm", {**settings, "init_range": 0.05})
        for name, parameter in model.named_parameters():
            assert float(parameter.detach().abs().max()) <= 0.05, name
            assert float(parameter.detach().abs().max()) > 0.02, name  # drawn, not zeroed (start included)
    default = build("latent-sentence-lstm", LATENT_MODELS[2][1])
    assert float(default.decoder_embedding.weight.detach().std()) > 0.5  # nn.Embedding's N(0, 1)
    assert float(default.start.detach().abs().max()) == 0.0
    with pytest.raises(InfolmError, match="model.init_range must be a finite number >= 0, got -0.1"):
        build("latent-sentence-lstm", {**LATENT_MODELS[2][1], "init_range": -0.1})


@pytest.mark.parametrize("name,settings", LATENT_MODELS, ids=IDS)
def test_mi_estimate_is_bounded_by_the_nll_estimate_not_by_the_data_entropy(name, settings) -> None:
    """Sec. 5.7.1's MI, the data average of Û^K - Ŝ^K, is I over p_D(x) p(z|x), not over the model's own
    joint: nothing bounds it by H(X) of the data. For text every ln p(x|z_i) ≤ 0, so Û^K ≤ 0 (a convex
    combination of them, Eq. 5.9) and Û^K - Ŝ^K ≤ -Ŝ^K: per example, with the same draws, the MI estimate
    never exceeds the IWAE NLL estimate. A model whose NLL is far above the entropy can thus show an MI
    above it too (the synthetic REINFORCE runs at large λ do)."""
    model = build(name, settings)
    tokens, lengths = batch(name)
    bounds = latent_bounds(model, tokens, lengths, samples=8)
    assert bool((bounds.mutual_information <= -bounds.log_likelihood_bound + 1e-5).all())
