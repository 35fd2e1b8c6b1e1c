"""Every registered objective satisfies the objective contract; Composite identities."""

import dataclasses

import pytest
import torch

from infolm.objectives import OBJECTIVES, Batch, Composite, build_objective
from infolm.objectives.activation_reg import activation_regularization, temporal_activation_regularization
from tests.conftest import tiny_model


def make_batch(corpus, batch_size=4, bptt=8, offset=0):
    stream = corpus.stream("train")
    n = batch_size * (bptt + 1)
    block = stream[offset : offset + n].view(batch_size, bptt + 1)
    return block[:, :-1].contiguous(), block[:, 1:].contiguous()


# Terms of language models over token batches (latent-variable terms have their own tests).
LM_TERMS = [
    n
    for n in OBJECTIVES.names()
    if "sentences" not in getattr(OBJECTIVES.get(n).factory, "needs", ())
    and "causal-lm" in getattr(OBJECTIVES.get(n).factory, "protocols", {"causal-lm"})
]


@pytest.fixture(params=LM_TERMS)
def name(request):
    return request.param


def build_setup(corpus, names, seed=0, weight=None):
    torch.manual_seed(seed)
    model = tiny_model("lstm", len(corpus.vocab))
    settings = {n: ({} if weight is None else {"weight": weight}) for n in names}
    objective = build_objective(settings)
    objective.setup(corpus, model)
    return model, objective


def run_once(corpus, names, seed=0, weight=None, batches=1):
    """Run the objective on ``batches`` consecutive batches (state carried); return the last terms."""
    model, objective = build_setup(corpus, names, seed, weight)
    torch.manual_seed(seed + 1)
    state = model.init_state(4)
    for index in range(batches):
        inputs, targets = make_batch(corpus, offset=index * 36)
        batch = Batch(inputs, targets, state, step=index)
        output = model(inputs, state)
        terms = objective(model, batch, output)
        state = tuple(tuple(t.detach() for t in layer) for layer in output.state)
        if index < batches - 1:
            model.zero_grad()
    return model, objective, terms


def test_contract(name, small_corpus):
    # two batches: terms that learn from the primary pass (IMM's state bank) act from the second one
    model, objective, terms = run_once(small_corpus, [name], batches=2)
    assert terms.losses, name
    for key, loss in terms.losses.items():
        assert loss.dim() == 0 and torch.isfinite(loss), key
    terms.total().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    config = objective.terms[name].config
    assert dataclasses.is_dataclass(config) and hasattr(config, "weight")


def test_deterministic_under_seed(name, small_corpus):
    a = run_once(small_corpus, [name])[2]
    b = run_once(small_corpus, [name])[2]
    assert {k: float(v.detach()) for k, v in a.losses.items()} == {k: float(v.detach()) for k, v in b.losses.items()}


@pytest.mark.parametrize("extra", [n for n in LM_TERMS if n != "mle"])
def test_zero_weight_term_changes_nothing(extra, small_corpus):
    """mle plus a zero-weight term gives exactly the gradients of mle alone."""
    grads = []
    for names in (["mle"], ["mle", extra]):
        torch.manual_seed(0)
        model = tiny_model("lstm", len(small_corpus.vocab))
        settings = {"mle": {}}
        if extra in names:
            settings[extra] = {"weight": 0.0}
        objective = build_objective(settings)
        objective.setup(small_corpus, model)
        inputs, targets = make_batch(small_corpus)
        state = model.init_state(4)
        torch.manual_seed(5)
        output = model(inputs, state)
        objective(model, Batch(inputs, targets, state), output).total().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_composite_weights_scale_losses(small_corpus):
    _, objective, terms = run_once(small_corpus, ["mle", "ar"], weight=None)
    assert isinstance(objective, Composite)
    assert torch.isclose(terms.losses["ar"], 2.0 * torch.tensor(terms.metrics["ar"]))


def test_mle_is_cross_entropy(small_corpus):
    model, objective, terms = run_once(small_corpus, ["mle"])
    inputs, targets = make_batch(small_corpus)
    torch.manual_seed(1)
    logits = model(inputs, model.init_state(4)).logits
    expected = -logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).mean()
    torch.testing.assert_close(terms.losses["mle"], expected)


def test_ar_tar_values():
    h = torch.tensor([[[1.0, 2.0], [3.0, 5.0]]])  # (1, 2, 2)
    assert activation_regularization(h).item() == pytest.approx((1 + 4 + 9 + 25) / 4)
    assert temporal_activation_regularization(h).item() == pytest.approx((4 + 9) / 2)
