"""Tests of the IMM examples: induced-model identities, known values, and --quick end-to-end runs."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


lr = _load("imm_logistic_regression")
rl = _load("imm_pomdp_reinforce")


# ---------------------------------------------------------------- logistic regression (Sec. 1.1)


def _training_set(runs: int = 3, n: int = 9) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return lr.sample_points(gen, (runs, n), lr.LogisticIMMConfig().discriminant)


def test_soft_nn_induced_model_of_a_model_ignoring_ex_is_that_model() -> None:
    x, _ = _training_set()
    params = torch.tensor([[1.5, 0.0, 0.0, -0.2], [-0.7, 0.0, 0.0, 0.4], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    x1_query = torch.linspace(-1, 1, 7, dtype=torch.float64).expand(3, -1)
    weights = lr.soft_nn_weights(x1_query, x[..., 0], alpha=1.0)
    induced = lr.induced_model(params, x1_query, x[..., 1:], weights)
    expected = torch.sigmoid(params[:, 0:1] * x1_query + params[:, 3:4])
    torch.testing.assert_close(induced, expected, rtol=0, atol=1e-14)


def test_soft_nn_weights_normalise_and_sharp_kernel_recovers_the_model() -> None:
    x, _ = _training_set()
    weights = lr.soft_nn_weights(x[..., 0], x[..., 0], alpha=1.0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 9, dtype=torch.float64))
    # alpha -> infinity: each training point's own extended context only, i.e. Q itself
    params = torch.tensor([[0.3, -1.2, 2.0, 0.1]] * 3, dtype=torch.float64)
    sharp = lr.soft_nn_weights(x[..., 0], x[..., 0], alpha=1e6)
    induced = lr.induced_model(params, x[..., 0], x[..., 1:], sharp)
    torch.testing.assert_close(induced, torch.sigmoid(lr.full_model_logits(params, x)))


def test_restricted_bayes_matches_monte_carlo() -> None:
    discriminant = (1.0, 0.7, 1.3, 0.3)
    gen = torch.Generator().manual_seed(1)
    ex = torch.rand(200_000, 2, generator=gen, dtype=torch.float64) * 2 - 1
    for x1 in (-0.9, -0.3, 0.0, 0.5, 1.0):
        exact = float(lr.restricted_bayes(torch.tensor(x1, dtype=torch.float64), discriminant))
        a, b, c, d = discriminant
        monte_carlo = float(((a * x1 + b * ex[:, 0] + c * ex[:, 1] + d) > 0).double().mean())
        assert abs(exact - monte_carlo) < 5e-3, (x1, exact, monte_carlo)


def test_closed_form_gradient_equals_autograd_and_ratio_zero_is_plain_logistic_regression() -> None:
    x, y = _training_set(runs=4, n=7)
    config = lr.LogisticIMMConfig()
    target = lr.restricted_bayes(x[..., 0], config.discriminant)
    weights = lr.soft_nn_weights(x[..., 0], x[..., 0], config.alpha)
    ratio = torch.tensor([0.0, 0.3, 0.7, 0.9], dtype=torch.float64)
    params = torch.randn(4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).requires_grad_()
    cross_entropy = torch.nn.functional.binary_cross_entropy_with_logits(
        lr.full_model_logits(params, x), y, reduction="none"
    ).mean(-1)
    reference = (1 - ratio) * cross_entropy + ratio * lr.imm_risk(params, x, target, weights)
    (reference_grad,) = torch.autograd.grad(reference.sum(), params)
    loss, grad = lr.loss_and_grad(params.detach(), x, y, ratio, target, weights)
    torch.testing.assert_close(loss, reference.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, reference_grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(loss[0], cross_entropy[0].detach())


def test_lambda_schedule_matches_appendix_d1() -> None:
    assert lr.lambda_ratio_schedule(2) == pytest.approx(0.7958)
    assert lr.lambda_ratio_schedule(10) == pytest.approx(0.707)
    assert lr.lambda_ratio_schedule(20) == pytest.approx(0.596)
    assert lr.lambda_ratio_schedule(500) == 0.0


# ---------------------------------------------------------------- POMDP / REINFORCE (Sec. 7, App. D.3)


@pytest.fixture(scope="module")
def world() -> object:
    return rl.GridWorld(rl.ReinforceIMMConfig())


def test_induced_policy_of_a_policy_ignoring_y_is_that_policy(world) -> None:
    gen = torch.Generator().manual_seed(0)
    per_column = torch.softmax(torch.randn(2, world.width, world.num_actions, generator=gen), dim=-1)  # (R, X, A)
    probs = per_column[:, torch.as_tensor(world.col)]  # (R, S, A): same row for every y of a column
    torch.testing.assert_close(rl.induced_policy(probs, world.height, world.width), per_column)


def test_fib_is_a_fixed_point_and_equals_q_iteration_for_deterministic_moves(world) -> None:
    gamma = 0.9
    arrival = world.reward[world.next_state].T  # (A, S)
    transitions, observations = world.transition_matrices(), world.observation_matrix()
    alpha = rl.fast_informed_bound(transitions, observations, arrival, gamma)
    future = np.einsum("tz,ast,bt->azsb", observations, transitions, alpha)
    np.testing.assert_allclose(arrival + gamma * future.max(-1).sum(1), alpha, atol=1e-8)
    # x observed exactly and moves deterministic: the bound is the full-MDP Q function
    np.testing.assert_allclose(alpha.T, rl.q_value_iteration(world, gamma), atol=1e-8)


def test_pomdp_policy_heads_for_the_centre_column(world) -> None:
    target = rl.pomdp_policy(world, rl.ReinforceIMMConfig())  # (width, A)
    np.testing.assert_allclose(target.sum(-1), 1.0)
    centre = world.width // 2
    assert all(target[x, rl.RIGHT] == 1.0 for x in range(centre))
    assert all(target[x, rl.LEFT] == 1.0 for x in range(centre + 1, world.width))
    # in the centre column up and down tie exactly by symmetry of the reward in y
    np.testing.assert_allclose(target[centre], [0.5, 0.5, 0.0, 0.0])


def test_uniform_policy_keeps_uniform_occupancy_on_the_torus(world) -> None:
    probs = torch.full((1, world.num_states, world.num_actions), 0.25, dtype=torch.float64)
    total = rl.expected_total_reward(probs, world, horizon=22)
    assert float(total[0]) == pytest.approx(22 * world.reward.mean(), rel=1e-12)


def test_rewards_to_go_and_imm_kl_known_values() -> None:
    rewards = torch.tensor([[1.0, 0.0, 2.0, 3.0]], dtype=torch.float64)
    expected = [1.0 + 0.5**2 * 2 + 0.5**3 * 3, 0.5 * 2 + 0.5**2 * 3, 2 + 0.5 * 3, 3.0]
    torch.testing.assert_close(rl.discounted_rewards_to_go(rewards, 0.5), torch.tensor([expected], dtype=torch.float64))
    target = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    columns = torch.tensor([[0, 1, 1]])
    assert float(rl.imm_kl(target[None], target[None], columns)[0]) == pytest.approx(0.0, abs=1e-7)
    uniform = torch.full((1, 2, 4), 0.25)
    assert float(rl.imm_kl(target[None], uniform, columns)[0]) == pytest.approx((math.log(2) + 2 * math.log(4)) / 3)


# ---------------------------------------------------------------- --quick end-to-end runs


@pytest.mark.parametrize(
    ("script", "keys"),
    [
        ("imm_logistic_regression", ["baseline_accuracy_mean", "imm_accuracy_mean", "fig1_restricted_kl_mean"]),
        ("imm_pomdp_reinforce", ["curves.baseline.mean", "curves.imm.mean", "curves.imm.p10"]),
    ],
)
def test_quick_run_writes_png_and_finite_summary(script: str, keys: list[str], tmp_path: Path) -> None:
    png, summary_path = tmp_path / "plot.png", tmp_path / "summary.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{script}.py"), "--quick", "--out", str(png), "--json", str(summary_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads(summary_path.read_text())
    for key in keys:
        values = summary
        for part in key.split("."):
            values = values[part]
        assert values and all(math.isfinite(v) for v in values), (key, values)
    assert "IMM" in result.stdout
