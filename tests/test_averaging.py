"""Weight averagers hold the averages they claim; Two-Tailed Averaging follows Alg. 1 and 2;
the NT-ASGD trigger and the divergence policy follow their papers."""

from __future__ import annotations

import io
import math

import pytest
import torch
from torch import nn

from infolm.errors import InfolmError
from infolm.optim.averaging import AVERAGERS, TailAverager, TailConfig, TwoTailedAverager
from infolm.optim.divergence import DivergenceConfig, DivergencePolicy, loss_bound, loss_diverged
from infolm.optim.ntasgd import NonMonotoneTrigger


def scalar_param(value: float = 0.0) -> nn.Parameter:
    return nn.Parameter(torch.tensor([value], dtype=torch.float64))


def set_value(param: nn.Parameter, value: float) -> None:
    with torch.no_grad():
        param.fill_(value)


def averaged_value(averager, param: nn.Parameter) -> float:
    with averager.averaged():
        return float(param.item())


def test_registry_names_and_config_errors() -> None:
    assert {"two-tailed", "tail", "ema", "none"} <= set(AVERAGERS.names())
    with pytest.raises(InfolmError, match="unknown config key"):
        AVERAGERS.build("ema", {"decay_rate": 0.9}, [scalar_param()])
    with pytest.raises(InfolmError, match="decay"):
        AVERAGERS.build("ema", {"decay": 1.5}, [scalar_param()])
    with pytest.raises(InfolmError, match="unknown averager"):
        AVERAGERS.build("swa", {}, [scalar_param()])


def test_tail_average_is_mean_of_iterates_since_start() -> None:
    torch.manual_seed(0)
    params = [nn.Parameter(torch.zeros(3, 2)), nn.Parameter(torch.zeros(5))]
    averager = AVERAGERS.build("tail", {"start": 3}, params)
    iterates = []
    for step in range(1, 8):
        values = [torch.randn_like(p) for p in params]
        with torch.no_grad():
            for p, v in zip(params, values):
                p.copy_(v)
        iterates.append(values)
        averager.update(step)
        if step < 3:  # Eq. 3.2, t < s: the iterate itself
            with averager.averaged():
                assert all(torch.equal(p, v) for p, v in zip(params, values))
    with averager.averaged():
        for i, p in enumerate(params):
            expected = torch.stack([it[i] for it in iterates[2:]]).mean(0)  # steps 3..7
            torch.testing.assert_close(p.detach(), expected)
    # swap_out restored the raw iterate
    assert all(torch.equal(p, v) for p, v in zip(params, iterates[-1]))


def test_ema_matches_eq_3_1() -> None:
    param = scalar_param(1.0)  # theta_0
    averager = AVERAGERS.build("ema", {"decay": 0.8}, [param])
    expected = 1.0
    for step, value in enumerate([3.0, -2.0, 5.0, 0.5], start=1):
        set_value(param, value)
        averager.update(step)
        expected = 0.2 * value + 0.8 * expected
        assert averaged_value(averager, param) == pytest.approx(expected, abs=1e-12)
    assert param.item() == 0.5


def test_observe_evaluates_the_average_and_restores_raw() -> None:
    param = scalar_param()
    averager = AVERAGERS.build("tail", {}, [param])
    for step, value in enumerate([1.0, 2.0, 6.0], start=1):
        set_value(param, value)
        averager.update(step)
    assert averager.observe(lambda: float(param.item()) ** 2) == pytest.approx(9.0)
    assert param.item() == 6.0
    averager.swap_in()
    with pytest.raises(RuntimeError):
        averager.update(4)
    averager.swap_out()


def run_script(averager: TwoTailedAverager, param: nn.Parameter, iterates: list[float], loss, start: int = 1) -> float:
    for step, value in enumerate(iterates, start=start):
        set_value(param, value)
        averager.update(step)
    return averager.observe(lambda: loss(float(param.item())))


def test_two_tailed_core_algorithm_1() -> None:
    """f(theta) = theta, E = 2: switch exactly when F^S <= F^L."""
    param = scalar_param()
    tta = AVERAGERS.build("two-tailed", {"patience": 0, "defer_to_raw": False}, [param])
    identity = lambda x: x  # noqa: E731
    # first evaluation: S = L = 2, identical averages -> switch
    assert run_script(tta, param, [10, 8], identity) == pytest.approx(9.0)
    assert (tta.S, tta.L) == (0, 2)
    # short mean 5 <= long mean 7 -> switch; the long average continues from the short one
    assert run_script(tta, param, [6, 4], identity, 3) == pytest.approx(5.0)
    assert (tta.S, tta.L) == (0, 2)
    assert averaged_value(tta, param) == pytest.approx(5.0)
    # short mean 6 > long mean 5.5 -> no switch
    assert run_script(tta, param, [6, 6], identity, 5) == pytest.approx(5.5)
    assert (tta.S, tta.L) == (2, 4)
    assert run_script(tta, param, [5, 5], identity, 7) == pytest.approx(32 / 6)
    assert (tta.S, tta.L) == (4, 6)
    assert averaged_value(tta, param) == pytest.approx(32 / 6)
    # short mean 28/6 <= long mean 38/8 -> switch
    assert run_script(tta, param, [3, 3], identity, 9) == pytest.approx(28 / 6)
    assert (tta.S, tta.L) == (0, 6)
    assert averaged_value(tta, param) == pytest.approx(28 / 6)
    assert tta.metrics()["L"] == 6.0 and tta.metrics()["S"] == 0.0
    assert param.item() == 3.0


def test_two_tailed_reset_heuristic_algorithm_2() -> None:
    param = scalar_param()
    identity = lambda x: x  # noqa: E731
    tta = AVERAGERS.build("two-tailed", {"patience": 2, "defer_to_raw": False}, [param])
    run_script(tta, param, [0, 0], identity)
    assert run_script(tta, param, [2, 2], identity, 3) == pytest.approx(1.0)  # long 1 (best), short 2
    # long mean 4/3 has not improved for 2 evaluations -> stagnating -> switch although F^S > F^L
    assert run_script(tta, param, [2, 2], identity, 5) == pytest.approx(2.0)
    assert (tta.S, tta.L) == (0, 4)
    assert averaged_value(tta, param) == pytest.approx(2.0)

    # a stagnating short average is restarted (scripted losses of the averaged values)
    table = {0.0: 10.0, 6.0: 9.0, 3.0: 8.0, 4.0: 7.0, 4.5: 6.5, 4.8: 6.0}
    scripted = lambda x: table[round(x, 6)]  # noqa: E731
    param = scalar_param()
    tta = AVERAGERS.build("two-tailed", {"patience": 2, "defer_to_raw": False}, [param])
    assert run_script(tta, param, [0, 0], scripted) == 10.0
    assert run_script(tta, param, [6, 6], scripted, 3) == 8.0  # short 6 (9) > long 3 (8)
    assert run_script(tta, param, [6, 6], scripted, 5) == 7.0  # short bad 1, long 4 improves
    assert run_script(tta, param, [6, 6], scripted, 7) == 6.5  # short bad 2 -> S <- 0
    assert (tta.S, tta.L) == (0, 8)
    assert run_script(tta, param, [6, 6], scripted, 9) == 6.0  # the restarted short holds 2 iterates
    assert (tta.S, tta.L) == (2, 10)
    torch.testing.assert_close(tta.short[0], torch.tensor([6.0], dtype=torch.float64))


def test_two_tailed_early_deferral_algorithm_2() -> None:
    param = scalar_param()
    identity = lambda x: x  # noqa: E731
    tta = AVERAGERS.build("two-tailed", {"patience": 0, "defer_to_raw": True}, [param])
    # raw (8) better than the average (9) at every evaluation so far: use raw and reinitialize
    assert run_script(tta, param, [10, 8], identity) == 8.0
    assert (tta.S, tta.L) == (0, 0) and averaged_value(tta, param) == 8.0
    assert run_script(tta, param, [6, 4], identity, 3) == 4.0
    assert (tta.S, tta.L) == (0, 0)
    # the average (5) beats raw (6)
    assert run_script(tta, param, [4, 6], identity, 5) == pytest.approx(5.0)
    assert (tta.S, tta.L) == (0, 2) and averaged_value(tta, param) == pytest.approx(5.0)
    assert run_script(tta, param, [3, 5], identity, 7) == pytest.approx(4.0)  # switch: short 4 <= long 4.5
    assert run_script(tta, param, [5, 5], identity, 9) == pytest.approx(4.5)  # no switch, average better
    assert (tta.S, tta.L) == (2, 4)
    # raw (1) better but the long average is longer than E: defer to raw, keep the averages
    assert run_script(tta, param, [4, 0], identity, 11) == 0.0  # switch: short 3.5 <= long 22/6
    assert (tta.S, tta.L) == (0, 4)
    assert averaged_value(tta, param) == 0.0 and tta.metrics()["raw"] == 1.0
    torch.testing.assert_close(tta.long[0], torch.tensor([3.5], dtype=torch.float64))


@pytest.mark.parametrize(
    "name, settings", [("two-tailed", {}), ("tail", {"start": 2}), ("tail", {"nonmono": 1}), ("ema", {"decay": 0.5})]
)
def test_state_dict_roundtrip_weights_only(name: str, settings: dict) -> None:
    torch.manual_seed(1)

    def make():
        param = nn.Parameter(torch.zeros(4))
        return param, AVERAGERS.build(name, settings, [param])

    def drive(param, averager, steps):
        for step in steps:
            with torch.no_grad():
                param.copy_(torch.randn(4))
            averager.update(step)
            if step % 2 == 0:
                averager.observe(lambda: float(param.detach().sum()) ** 2)

    param, averager = make()
    drive(param, averager, range(1, 7))
    buffer = io.BytesIO()
    torch.save(averager.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    param2, averager2 = make()
    with torch.no_grad():
        param2.copy_(param)
    averager2.load_state_dict(state)
    assert {k: averager2.metrics()[k] for k in ("S", "L", "averaged", "ema_updates") if k in averager.metrics()} == {
        k: averager.metrics()[k] for k in ("S", "L", "averaged", "ema_updates") if k in averager.metrics()
    }
    for p, a in ((param, averager), (param2, averager2)):
        with torch.no_grad():
            p.copy_(torch.arange(4.0))
        a.update(7)
    with averager.averaged(), averager2.averaged():
        assert torch.equal(param, param2)
    with pytest.raises(InfolmError):
        AVERAGERS.build(name, settings, [nn.Parameter(torch.zeros(5))]).load_state_dict(state)


def test_tail_with_nt_trigger_starts_averaging_after_trigger() -> None:
    param = scalar_param()
    averager = TailAverager(TailConfig(nonmono=2), [param])
    losses = [4.0, 5.0, 4.5, 4.6]  # fires at the 4th evaluation: 4.6 > min(logs[:-2]) = 4.0
    step = 0
    for loss in losses:
        step += 1
        set_value(param, float(step))
        averager.update(step)
        assert averager.observe(lambda loss=loss: loss) == loss
    assert averager.started_at == step + 1 and averager.count == 0
    for value in (10.0, 20.0):
        step += 1
        set_value(param, value)
        averager.update(step)
    assert averaged_value(averager, param) == pytest.approx(15.0)


def test_tail_with_nt_trigger_starts_at_80_percent_of_training_at_the_latest() -> None:
    """Thesis Sec. 2.2.2: averaging starts on the trigger "or at 80% of the training time at the latest"."""
    param = scalar_param()
    averager = TailAverager(TailConfig(nonmono=2), [param])
    averager.set_horizon(10)
    for step in range(1, 11):
        set_value(param, float(step))
        averager.update(step)
        if step % 2 == 0:
            averager.observe(lambda step=step: 10.0 - step)  # improving: the trigger never fires
    assert averager.started_at == 8 and averager.count == 3
    assert averaged_value(averager, param) == pytest.approx(9.0)  # steps 8, 9, 10
    off = TailAverager(TailConfig(nonmono=2, latest=0.0), [scalar_param()])
    off.set_horizon(10)
    for step in range(1, 11):
        off.update(step)
    assert off.started_at == -1 and off.count == 0


def test_nt_trigger_condition_of_merity_et_al() -> None:
    trigger = NonMonotoneTrigger(nonmono=5)
    fired = [trigger.observe(v) for v in [3.0, 4.0, 4.0, 4.0, 4.0, 2.9, 3.5, 2.0, 5.0]]
    # k = 6: 3.5 > min(logs[:-5]) = min(3.0, 4.0) = 3.0 -> fires once; later losses never fire again
    assert fired == [False] * 6 + [True, False, False]
    assert trigger.triggered_at == 6
    quiet = NonMonotoneTrigger(nonmono=2)
    assert not any(quiet.observe(v) for v in [5.0, 4.0, 3.0, 2.0, 1.0])  # monotone: never fires
    assert not quiet.would_trigger(3.0) and quiet.would_trigger(3.01)


def test_divergence_rule() -> None:
    """Non-finite diverges at once; above loss_factor x the loss scale (here ln|V|) diverges after
    ``patience`` steps in a row."""
    bound = loss_bound(math.log(10000), 2.0)
    assert bound == pytest.approx(2 * math.log(10000))
    assert loss_diverged([5.0, math.nan], bound, 3) and loss_diverged([math.inf], bound, 3)
    assert not loss_diverged([19.0, 19.0], bound, 3)  # not yet patience steps
    assert loss_diverged([1.0, 19.0, 19.0, 1e29], bound, 3)
    assert not loss_diverged([19.0, 19.0, 9.0], bound, 3)
    assert not loss_diverged([bound, bound, bound], bound, 3)  # at the bound is not above it


def test_divergence_policy() -> None:
    policy = DivergencePolicy(
        DivergenceConfig(enabled=True, lr_factor=0.9, patience=3, max_restarts=2), math.log(10000)
    )
    assert not policy.check(9.2) and not policy.suspect
    assert not policy.check(25.0) and policy.suspect and not policy.check(30.0)
    assert not policy.check(9.0) and not policy.suspect  # the run above the bound ended
    assert not policy.check(25.0) and not policy.check(26.0) and policy.check(1e29)
    assert not policy.suspect  # a declared divergence starts a new count
    assert policy.check(math.nan) and policy.check(math.inf)
    state = policy.state_dict()
    assert not policy.check(25.0)
    resumed = DivergencePolicy(policy.config, math.log(10000))
    resumed.load_state_dict(policy.state_dict())
    assert not resumed.check(25.0) and resumed.check(25.0)  # the count survives a resume
    assert state["recent"] == []
    assert policy.restart() == pytest.approx(0.9)
    assert policy.restart() == pytest.approx(0.81) and policy.lr_scale == pytest.approx(0.81)
    with pytest.raises(InfolmError, match="diverged"):
        policy.restart()
    assert "above 2 x 9.21 (the objective's loss scale) = 18.42 for 3 steps" in policy.describe(7, 1e29)
    for bad in ({"lr_factor": 1.5}, {"loss_factor": 1.0}, {"patience": 0}, {"max_restarts": -1}):
        with pytest.raises(InfolmError, match="train.divergence"):
            DivergenceConfig(**bad)
