"""BMI-full's control with the discriminator's pay-off zeroed: IW-RAML on the geometric proposal alone."""

from __future__ import annotations

import pytest
import torch

from infolm.errors import InfolmError
from infolm.objectives.base import OBJECTIVES
from infolm.objectives.bmi import BMI
from tests.test_bmi import stream_batch, tiny_lstm, topic_corpus


def phase2_terms(**settings: object) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """One Phase-II step of BMI-full from the same weights, discriminator and draws (seed 6) in every call;
    every discriminator weight is scaled up so that its rewards are far from flat."""
    corpus = topic_corpus(80)
    model = tiny_lstm(len(corpus.vocab), seed=1).eval()
    term = OBJECTIVES.build("bmi", {"batch_size": 8, "hidden": 16, "phase2_start": 0, "lam": 0.3, **settings})
    assert isinstance(term, BMI)
    torch.manual_seed(4)
    term.setup(corpus, model)
    assert term.discriminator is not None
    with torch.no_grad():
        for p in term.discriminator.parameters():
            p.mul_(8.0)
    term.on_step_end(0, {})
    torch.manual_seed(6)
    terms = term(model, stream_batch(corpus), None)
    return dict(terms.losses), dict(terms.metrics)


def test_a_zero_pay_off_is_the_flat_pay_off_limit_and_differs_from_the_discriminator_s() -> None:
    control, control_metrics = phase2_terms(reward="none")
    flat, _ = phase2_terms(beta=1e9)  # beta -> inf: exp(r / beta) = 1, the weights are 1/G normalized (Eq. 16)
    full, full_metrics = phase2_terms()
    torch.testing.assert_close(control["bmi_raml"], flat["bmi_raml"], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(control["bmi_raml"], full["bmi_raml"], atol=1e-3)
    # Phase I, its draws and the reward it scores (logged) are BMI-full's; only the weights differ
    torch.testing.assert_close(control["bmi"], full["bmi"])
    assert control_metrics["bmi_raml_reward"] == full_metrics["bmi_raml_reward"] != 0.0
    assert control_metrics["bmi_raml_ess"] == pytest.approx(control_metrics["bmi_raml_ess_proposal"], rel=1e-5)
    assert full_metrics["bmi_raml_ess"] != pytest.approx(full_metrics["bmi_raml_ess_proposal"], rel=1e-3)


def test_the_pay_off_setting_is_checked_with_one_line() -> None:
    with pytest.raises(InfolmError, match="discriminator or none"):
        OBJECTIVES.build("bmi", {"reward": "zero"})
    with pytest.raises(InfolmError, match="no Phase II"):
        OBJECTIVES.build("bmi", {"variant": "base", "reward": "none"})
