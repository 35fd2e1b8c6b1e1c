"""The multi-dropout-sample objective (Melis thesis Sec. 4.3)."""

import math

import pytest
import torch
import torch.nn.functional as F

from infolm.data.batching import IGNORE_INDEX
from infolm.errors import InfolmError
from infolm.models.base import MODELS
from infolm.objectives.base import OBJECTIVES, Batch, build_objective
from infolm.objectives.multisample import multisample_nll

V = 30
TINY = {"cell": "mogrifier", "hidden": 10, "layers": 2, "rounds": 2, "rank": 3}
DROPOUTS = {"dropout_input": 0.3, "dropout_state": 0.3, "dropout_cell": 0.3, "dropout_output": 0.4}


def _setup(dropouts, batch=3, steps=6):
    torch.manual_seed(0)
    model = MODELS.build("melis", {**TINY, **dropouts}, vocab_size=V).train()
    inputs = torch.randint(0, V, (batch, steps))
    targets = torch.randint(0, V, (batch, steps))
    with torch.no_grad():  # a non-trivial carried state
        state = model.eval()(torch.randint(0, V, (batch, 4))).state
    model.train()
    return model, Batch(inputs=inputs, targets=targets, state=state)


def _plain_ce(model, batch, seed):
    torch.manual_seed(seed)
    logits = model(batch.inputs, batch.state).logits
    return F.cross_entropy(logits.reshape(-1, V), batch.targets.reshape(-1), ignore_index=IGNORE_INDEX)


def test_known_value_is_minus_log_mean_probability():
    log_probs = torch.log(torch.tensor([[[0.2, 0.5]], [[0.6, 0.1]]]))  # (D=2, B=1, T=2)
    want = -(math.log(0.4) + math.log(0.3)) / 2
    torch.testing.assert_close(multisample_nll(log_probs, torch.zeros(1, 2, dtype=torch.long)), torch.tensor(want))


def test_one_sample_equals_cross_entropy_of_one_pass_under_the_same_seed():
    model, batch = _setup(DROPOUTS)
    objective = build_objective({"multisample": {"samples": 1}})
    torch.manual_seed(5)
    terms = objective(model, batch, model(batch.inputs, batch.state))
    torch.testing.assert_close(terms.losses["multisample"], _plain_ce(model, batch, seed=5))
    assert terms.tokens == batch.targets.numel()


@pytest.mark.parametrize("batched", [False, True])
def test_without_dropout_equals_mle_for_any_number_of_samples(batched):
    model, batch = _setup({})
    objective = build_objective({"multisample": {"samples": 4, "batched": batched}})
    output = model(batch.inputs, batch.state)
    loss = objective(model, batch, output).losses["multisample"]
    torch.testing.assert_close(loss, _plain_ce(model, batch, seed=0), rtol=1e-5, atol=1e-6)


def test_more_samples_give_a_tighter_bound():
    """-ln mean_d p_d <= mean_d -ln p_d (Jensen); equality only without dropout."""
    model, batch = _setup(DROPOUTS)
    objective = build_objective({"multisample": {"samples": 4}})
    torch.manual_seed(3)
    loss = objective(model, batch, model(batch.inputs, batch.state)).losses["multisample"]
    single = torch.stack([_plain_ce(model, batch, seed=s) for s in range(8)]).mean()
    torch.manual_seed(3)
    samples = []
    for _ in range(4):
        samples.append(model(batch.inputs, batch.state).logits.log_softmax(-1))
    per_sample = torch.stack([F.nll_loss(s.reshape(-1, V), batch.targets.reshape(-1)) for s in samples])
    assert loss < per_sample.mean()  # same masks as the objective drew (same seed, same order)
    assert abs(per_sample.mean().item() - single.item()) < 0.5


def test_padding_is_ignored_and_gradients_flow():
    model, batch = _setup(DROPOUTS)
    batch.targets[:, -2:] = IGNORE_INDEX
    objective = build_objective({"multisample": {"samples": 3, "batched": True}})
    terms = objective(model, batch, model(batch.inputs, batch.state))
    assert terms.tokens == batch.targets.size(0) * (batch.targets.size(1) - 2)
    assert torch.isfinite(terms.losses["multisample"])
    terms.total().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_config_is_validated():
    with pytest.raises(InfolmError, match="samples must be at least 1"):
        OBJECTIVES.build("multisample", {"samples": 0})
