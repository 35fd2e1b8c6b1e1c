"""BMI's placebo arm (the discriminator trains, the LM gets nothing) and one fixed averaging start for every arm."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from infolm.errors import InfolmError
from infolm.objectives.base import OBJECTIVES
from infolm.objectives.bmi import BMI
from tests.test_bmi import stream_batch, tiny_lstm, topic_corpus


def bmi_gradients(lm_gradient: bool) -> tuple[list[torch.Tensor | None], list[torch.Tensor]]:
    """The gradients of the Phase-I loss alone, w.r.t. the LM and D_theta, on one batch drawn with seed 5
    (the same pairs and dropout masks for both settings), from the same initial weights."""
    corpus = topic_corpus(80)
    model = tiny_lstm(len(corpus.vocab), seed=1).train()
    term = OBJECTIVES.build("bmi", {"batch_size": 8, "hidden": 16, "variant": "base", "lm_gradient": lm_gradient})
    assert isinstance(term, BMI)
    torch.manual_seed(4)
    term.setup(corpus, model)
    assert term.discriminator is not None
    torch.manual_seed(5)
    loss = term(model, stream_batch(corpus), None).losses["bmi"]
    lm = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True, allow_unused=True)
    theta = torch.autograd.grad(loss, list(term.discriminator.parameters()))
    return list(lm), list(theta)


def test_the_placebo_trains_the_discriminator_alike_and_gives_the_lm_no_gradient() -> None:
    lm_real, theta_real = bmi_gradients(lm_gradient=True)
    lm_placebo, theta_placebo = bmi_gradients(lm_gradient=False)
    assert all(g is None or not g.any() for g in lm_placebo)  # exactly zero
    assert any(g is not None and g.abs().sum() > 0 for g in lm_real)
    for a, b in zip(theta_real, theta_placebo, strict=True):
        assert torch.equal(a, b)
    assert any(g.abs().sum() > 0 for g in theta_placebo)


def test_the_placebo_of_phase2_is_refused_with_one_line() -> None:
    with pytest.raises(InfolmError, match="variant base"):
        OBJECTIVES.build("bmi", {"variant": "full", "lm_gradient": False})


def test_a_fixed_start_averages_and_switches_to_phase2_at_the_same_step_whatever_the_validation_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``optim.average: {name: tail, start: N + 1}`` (no nonmono) with ``objective.bmi.phase2_start: N``:
    averaging's first iterate is that of Phase II's first step, N + 1, as at an NT-ASGD switch, and
    validation losses that would fire the trigger (nonmono 2) move neither."""
    from infolm.build import train
    from infolm.config import load_config
    from infolm.tasks.base import Metrics
    from infolm.tasks.stream_lm import StreamLM
    from infolm.training.metrics import read_metrics
    from tests.conftest import ROOT

    losses = iter([5.0, 4.0, 3.0, 4.0, 4.5, 4.6, 4.7])  # would fire a nonmono-2 trigger at step 10

    def scripted(self: StreamLM, model: object, split: str, device: object = "cpu") -> Metrics:
        return Metrics({"loss": next(losses)}, selection="loss")

    monkeypatch.setattr(StreamLM, "evaluate", scripted)
    overrides = [
        f"run.dir={tmp_path}",
        "train.max_steps=13",
        "train.eval_every=2",
        "train.log_every=1",
        "model={name: awd-lstm-mos, emb: 8, hidden: 12, last_hidden: 8, n_experts: 2}",
        "optim.average={name: tail, start: 6}",
        "objective.bmi={variant: full, nonmono: 2, phase2_start: 5, batch_size: 4, hidden: 16}",
    ]
    train(load_config(ROOT / "configs/tiny.yaml", overrides), overrides)
    records = read_metrics(tmp_path / "metrics.jsonl")
    steps = {r["step"]: r for r in records if "bmi_phase" in r}
    assert [s for s, r in steps.items() if r["bmi_phase"] == 2.0] == list(range(6, 14))
    assert [s for s, r in steps.items() if r["averaged"] > 0] == list(range(6, 14))
    assert all(r["started_at"] == 6 for r in steps.values())
    assert steps[13]["averaged"] == 8  # the iterates of steps 6..13
