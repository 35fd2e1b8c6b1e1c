"""IMM on logistic regression: the toy example of Muneeb & Ohannessian, Sec. 1.1, Figs. 1, 2 and 4.

Features x = (x1, x2, x3) are uniform on the cube [-1, 1]^3 and the label is y = 1{g(x) > 0} with
g(x) = a x1 + b x2 + c x3 + d. The short context is sh(x) = x1, the extended context ex(x) = (x2, x3).

* Restricted model P(y | x1): the restricted Bayes predictor, computed exactly (the paper assumes
  "ample" (x1, y) data, i.e. the true conditional probability).
* Full model Q(y | x1, x2, x3) = sigmoid(w . x + w0), trained on n points by full-batch gradient
  descent on (1 - r) * CrossEntropy(Q) + r * IMM(Q), r = lambda / (1 + lambda) (Eq. 4, App. D).
* Induced model of Q: soft nearest-neighbour marginalisation over the training extended contexts
  with weights exp(-alpha |x1_t - x1|) (Eq. 2), alpha = 1.
* lambda schedule (App. D.1): r(n) = -0.0111 n + 0.818.

Outputs: a PNG with three panels (Fig. 1: restricted-task risk vs r at n = 10; Fig. 2: test accuracy
vs n with and without IMM, 10th-90th percentile bands; Fig. 4: accuracy vs r for a few n) and a
summary table (`--json` writes it as JSON). All Monte-Carlo runs of one setting are fitted at once
as a batch of independent models; the default run takes about 25 s of CPU time.

    python examples/imm_logistic_regression.py [--quick] [--out PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

try:
    from infolm.evaluation.plots import new_figure, percentile_band, save_figure
except ImportError:  # running from a source checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from infolm.evaluation.plots import new_figure, percentile_band, save_figure

Tensor = torch.Tensor


@dataclass
class LogisticIMMConfig:
    """Settings of the logistic-regression IMM experiment (paper values where the paper gives them)."""

    discriminant: tuple[float, float, float, float] = (
        1.0,
        1.0,
        1.0,
        0.3,
    )  # (a, b, c, d) of g(x); not given in the paper
    alpha: float = 1.0  # soft nearest-neighbour kernel sharpness, 1 / bandwidth (Sec. 1.1, App. D.1: alpha = 1)
    lr: float = 1.0  # full-batch gradient-descent step size (App. D.1: 1.0 beat 0.1)
    steps: int = 100  # gradient steps per fit (not stated in the paper)
    sizes: tuple[int, ...] = (2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 35, 40, 45, 50)  # n swept in Fig. 2 (2..50)
    runs: int = 300  # Monte-Carlo runs per dataset size (Fig. 2: 300)
    fig1_size: int = 10  # n of the restricted-task sweep (Fig. 1: n = 10)
    fig1_runs: int = 300  # runs per ratio in Fig. 1 (paper: 30; more runs are cheap here)
    ratios: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # r = lambda/(1+lambda) (Figs. 1, 4)
    fig4_sizes: tuple[int, ...] = (2, 10, 20)  # n of the lambda-tuning sweep (App. D.1, Fig. 4)
    test_points: int = 20000  # held-out points for test accuracy
    restricted_grid: int = 100  # midpoints in x1 for the held-out restricted-task risk (Fig. 1)
    ex_grid: int = 20  # midpoints per extended feature (x2, x3) marginalised in that risk
    lower_percentile: float = 10.0  # band edges (Figs. 1, 2, 4: 10th and 90th)
    upper_percentile: float = 90.0
    seed: int = 0  # torch generator seed for data and test sets


QUICK = dict(
    sizes=(2, 10, 30),
    runs=16,
    steps=30,
    fig1_runs=8,
    ratios=(0.0, 0.5, 0.9),
    fig4_sizes=(2,),
    test_points=2000,
    restricted_grid=32,
    ex_grid=8,
)


def lambda_ratio_schedule(n: int) -> float:
    """r = lambda / (1 + lambda) as a function of the dataset size n (App. D.1), clipped to [0, 0.9]."""
    return float(min(max(-0.0111 * n + 0.818, 0.0), 0.9))


def _box_area_below(s: Tensor, p: float, q: float) -> Tensor:
    """Area of {(u, v) in [-p, p] x [-q, q] : u + v <= s}, by inclusion-exclusion of quadrants."""

    def h(z: Tensor) -> Tensor:
        return z.clamp(min=0.0) ** 2 / 2

    return h(s + p + q) - h(s + p - q) - h(s - p + q) + h(s - p - q)


def restricted_bayes(x1: Tensor, discriminant: tuple[float, float, float, float]) -> Tensor:
    """P(y = 1 | x1) for x uniform on [-1, 1]^3 and y = 1{a x1 + b x2 + c x3 + d > 0} (the target of Sec. 1.1)."""
    a, b, c, d = discriminant
    p, q = abs(b), abs(c)
    if p == 0 or q == 0:
        raise ValueError("b and c must be non-zero (the extended context must matter)")
    # y = 1  <=>  S = b x2 + c x3 > -(a x1 + d), with b x2 ~ U[-p, p] and c x3 ~ U[-q, q] independent
    cdf = _box_area_below(-(a * x1 + d), p, q) / (4 * p * q)
    return (1 - cdf).clamp(0.0, 1.0)


def sample_points(
    gen: torch.Generator, shape: tuple[int, ...], discriminant: tuple[float, ...]
) -> tuple[Tensor, Tensor]:
    """Points x uniform on [-1, 1]^3 with labels y = 1{g(x) > 0}: x (*shape, 3), y (*shape,)."""
    x = torch.rand(*shape, 3, generator=gen, dtype=torch.float64) * 2 - 1
    a, b, c, d = discriminant
    y = ((a * x[..., 0] + b * x[..., 1] + c * x[..., 2] + d) > 0).to(torch.float64)
    return x, y


def soft_nn_weights(x1_query: Tensor, x1_data: Tensor, alpha: float) -> Tensor:
    """Normalised kernel weights w_t(x1) / sum_t w_t(x1), w_t = exp(-alpha |x1_t - x1|) (Eq. 2).

    x1_query (R, m), x1_data (R, n) -> (R, m, n); each row sums to 1.
    """
    distance = (x1_query[:, :, None] - x1_data[:, None, :]).abs()  # (R, m, n)
    return torch.softmax(-alpha * distance, dim=-1)


def full_model_logits(params: Tensor, x: Tensor) -> Tensor:
    """Logit of Q(y = 1 | x) for a batch of models: params (R, 4) = (w1, w2, w3, w0), x (R, m, 3) -> (R, m)."""
    return torch.einsum("rmk,rk->rm", x, params[:, :3]) + params[:, 3:4]


def induced_model(params: Tensor, x1_query: Tensor, ex_data: Tensor, weights: Tensor) -> Tensor:
    """Induced model Q(y = 1 | x1) = sum_t weights[t] Q(y = 1 | x1, ex_t) (Eq. 2).

    params (R, 4), x1_query (R, m), ex_data (R, n, 2), weights (R, m, n) -> (R, m).
    """
    short_part = params[:, 0:1] * x1_query + params[:, 3:4]  # (R, m): w1 x1 + w0
    extended_part = torch.einsum("rnk,rk->rn", ex_data, params[:, 1:3])  # (R, n): w2 x2_t + w3 x3_t
    q = torch.sigmoid(short_part[:, :, None] + extended_part[:, None, :])  # (R, m, n)
    return (weights * q).sum(dim=-1)


def binary_cross_entropy(target: Tensor, prob: Tensor, eps: float = 1e-12) -> Tensor:
    """sum_y target(y) log 1/prob(y) for binary distributions given by their y = 1 mass; elementwise."""
    return -(target * torch.log(prob.clamp(min=eps)) + (1 - target) * torch.log((1 - prob).clamp(min=eps)))


def imm_risk(params: Tensor, x: Tensor, target: Tensor, weights: Tensor) -> Tensor:
    """IMM(Q) of Eq. (3), averaged over the n training points: (R,).

    x (R, n, 3) training features, target (R, n) = P(y = 1 | x1_t) from the restricted model,
    weights (R, n, n) = soft_nn_weights(x1, x1, alpha) (they do not depend on Q).
    """
    q_bar = induced_model(params, x[..., 0], x[..., 1:], weights)  # (R, n)
    return binary_cross_entropy(target, q_bar).mean(dim=-1)


def loss_and_grad(
    params: Tensor,
    x: Tensor,
    y: Tensor,
    ratio: Tensor,
    target: Tensor,
    weights: Tensor,
    workspace: tuple[Tensor, Tensor] | None = None,
    eps: float = 1e-12,
) -> tuple[Tensor, Tensor]:
    """(1 - r) CE(Q) + r IMM(Q) per run and its gradient w.r.t. params, in closed form.

    Same value as the autograd graph of `binary_cross_entropy_with_logits` + `imm_risk` (a test checks
    this), but it reuses two (R, n, n) buffers instead of allocating fresh ones at every step: for the
    larger sweeps the page faults of those allocations otherwise cost more than the arithmetic.
    params (R, 4), x (R, n, 3), y (R, n), ratio (R,), target (R, n), weights (R, n, n) -> loss (R,), grad (R, 4).
    """
    n = x.shape[1]
    x1, ex = x[..., 0], x[..., 1:]
    logits = full_model_logits(params, x)  # (R, n)
    cross_entropy = torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none").mean(-1)
    d_logits = (torch.sigmoid(logits) - y) * ((1 - ratio) / n)[:, None]  # (R, n)
    grad_w = torch.einsum("rn,rnk->rk", d_logits, x)  # (R, 3)
    grad_b = d_logits.sum(-1)  # (R,)
    loss = (1 - ratio) * cross_entropy
    if bool((ratio > 0).any()):
        sig, tmp = workspace if workspace is not None else (torch.empty_like(weights), torch.empty_like(weights))
        short_part = params[:, 0:1] * x1 + params[:, 3:4]  # (R, n)
        extended_part = torch.einsum("rnk,rk->rn", ex, params[:, 1:3])  # (R, n)
        torch.add(short_part[:, :, None], extended_part[:, None, :], out=sig)  # (R, t, s): logit of Q(y | x1_t, ex_s)
        torch.sigmoid(sig, out=sig)
        q_bar = torch.mul(weights, sig, out=tmp).sum(-1).clamp(eps, 1 - eps)  # (R, t), Eq. (2)
        loss = loss + ratio * binary_cross_entropy(target, q_bar).mean(-1)
        # d/dQbar of -(p log Qbar + (1-p) log(1-Qbar)) = (Qbar - p) / (Qbar (1 - Qbar)); d sigma = sigma (1 - sigma)
        d_q_bar = (q_bar - target) / (q_bar * (1 - q_bar)) * (ratio / n)[:, None]  # (R, t)
        torch.mul(sig, sig, out=tmp)
        torch.sub(sig, tmp, out=tmp)  # sigma (1 - sigma)
        tmp.mul_(weights).mul_(d_q_bar[:, :, None])  # (R, t, s): dLoss/dz_ts
        grad_w[:, 0] += (tmp.sum(-1) * x1).sum(-1)
        grad_w[:, 1:] += torch.einsum("rs,rsk->rk", tmp.sum(1), ex)
        grad_b += tmp.sum((1, 2))
    return loss, torch.cat([grad_w, grad_b[:, None]], dim=-1)


def fit(x: Tensor, y: Tensor, ratio: Tensor, config: LogisticIMMConfig) -> Tensor:
    """Fit R independent logistic regressions by full-batch gradient descent on Eq. (4) in its
    interpolated form (1 - r) CE + r IMM (App. D). x (R, n, 3), y (R, n), ratio (R,) -> params (R, 4).
    Zero initialisation; runs are independent, so each gets its own gradient."""
    target = restricted_bayes(x[..., 0], config.discriminant)  # (R, n)
    weights = soft_nn_weights(x[..., 0], x[..., 0], config.alpha)  # (R, n, n), fixed during the fit
    workspace = (torch.empty_like(weights), torch.empty_like(weights))
    params = torch.zeros(x.shape[0], 4, dtype=torch.float64)
    for _ in range(config.steps):
        _, grad = loss_and_grad(params, x, y, ratio, target, weights, workspace)
        params -= config.lr * grad
    return params


def accuracy(params: Tensor, x_test: Tensor, y_test: Tensor, chunk: int = 64) -> Tensor:
    """Test accuracy of each model: params (R, 4), x_test (m, 3), y_test (m,) -> (R,)."""
    out = []
    for part in params.split(chunk):  # chunks keep the (m, c) logits small
        logits = x_test @ part[:, :3].T + part[:, 3]  # (m, c)
        out.append(((logits > 0) == (y_test[:, None] > 0.5)).to(torch.float64).mean(dim=0))
    return torch.cat(out)


def restricted_task_kl(params: Tensor, config: LogisticIMMConfig, chunk: int = 64) -> Tensor:
    """Held-out restricted-task risk: mean over x1 of KL(P(.|x1) || Qbar(.|x1)), where Qbar marginalises
    Q over (x2, x3) under their true (uniform) distribution (Eq. 1). params (R, 4) -> (R,).

    Both integrals use the midpoint rule on regular grids, so the number is deterministic. This is the
    held-out IMM(Q) of Fig. 1 minus the entropy of P, which does not depend on Q.
    """

    def midpoints(k: int) -> Tensor:
        return (torch.arange(k, dtype=torch.float64) + 0.5) * (2.0 / k) - 1  # (k,) on [-1, 1]

    x1 = midpoints(config.restricted_grid)  # (m,)
    e = midpoints(config.ex_grid)
    ex = torch.cartesian_prod(e, e)  # (k*k, 2)
    p_bar = restricted_bayes(x1, config.discriminant)  # (m,)
    entropy = binary_cross_entropy(p_bar, p_bar)
    out = []
    for part in params.split(chunk):  # (c, 4); chunks keep the (c, m, k*k) intermediate small
        runs = part.shape[0]
        weights = torch.full((runs, x1.shape[0], ex.shape[0]), 1.0 / ex.shape[0], dtype=torch.float64)
        q_bar = induced_model(part, x1.expand(runs, -1), ex.expand(runs, -1, -1), weights)  # (c, m)
        out.append((binary_cross_entropy(p_bar, q_bar) - entropy).mean(dim=-1))
    return torch.cat(out)


def extra_data_equivalent(sizes: np.ndarray, baseline_mean: np.ndarray, imm_mean: np.ndarray) -> float:
    """Average relative extra data the baseline needs to match IMM's mean accuracy (the '30%' of Sec. 1.1).

    For each n, n' is where the baseline's (running-max) mean-accuracy curve reaches IMM's accuracy at n,
    by linear interpolation in n; sizes where the baseline never reaches it inside the sweep are skipped.
    Returns mean over n of n'/n - 1 (NaN if no size qualifies).
    """
    curve = np.maximum.accumulate(baseline_mean)
    gains = []
    for n, target in zip(sizes, imm_mean, strict=True):
        if target <= curve[0] or target > curve[-1]:
            continue
        j = int(np.searchsorted(curve, target))  # first index with curve >= target
        lo_n, hi_n, lo_a, hi_a = sizes[j - 1], sizes[j], curve[j - 1], curve[j]
        n_equiv = lo_n + (hi_n - lo_n) * (target - lo_a) / max(hi_a - lo_a, 1e-12)
        gains.append(n_equiv / n - 1)
    return float(np.mean(gains)) if gains else math.nan


def run(config: LogisticIMMConfig) -> dict:
    """All three sweeps; returns the summary (plain floats and lists) plus raw per-run arrays under '_raw'."""
    gen = torch.Generator().manual_seed(config.seed)
    x_test, y_test = sample_points(gen, (config.test_points,), config.discriminant)
    x1_test = x_test[:, 0]
    p_test = restricted_bayes(x1_test, config.discriminant)
    restricted_accuracy = float(((p_test > 0.5).to(torch.float64) == y_test).to(torch.float64).mean())

    # Fig. 2: accuracy vs n, with and without IMM on the same data; both fitted in one batch
    baseline_acc, imm_acc, ratios_used = [], [], []
    for n in config.sizes:
        x, y = sample_points(gen, (config.runs, n), config.discriminant)
        ratio = lambda_ratio_schedule(n)
        ratios_used.append(ratio)
        ratio_per_run = torch.cat([torch.zeros(config.runs), torch.full((config.runs,), ratio)]).double()
        params = fit(x.repeat(2, 1, 1), y.repeat(2, 1), ratio_per_run, config)
        acc = accuracy(params, x_test, y_test).numpy()
        baseline_acc.append(acc[: config.runs])
        imm_acc.append(acc[config.runs :])
    baseline = np.stack(baseline_acc, axis=1)  # (runs, len(sizes))
    imm = np.stack(imm_acc, axis=1)

    # Fig. 1: restricted-task risk vs r at one n; Fig. 4: accuracy vs r at a few n.
    # All ratios are fitted in one batch on the same data sets.
    def ratio_sweep(n: int, runs: int) -> tuple[np.ndarray, np.ndarray]:
        x, y = sample_points(gen, (runs, n), config.discriminant)
        k = len(config.ratios)
        ratio_per_run = torch.tensor(config.ratios, dtype=torch.float64).repeat_interleave(runs)  # (k * runs,)
        params = fit(x.repeat(k, 1, 1), y.repeat(k, 1), ratio_per_run, config)
        kl = restricted_task_kl(params, config).numpy()
        acc = accuracy(params, x_test, y_test).numpy()
        return kl.reshape(k, runs).T, acc.reshape(k, runs).T  # (runs, k) each

    fig1_kl, fig1_acc = ratio_sweep(config.fig1_size, config.fig1_runs)
    fig4_acc = {
        n: fig1_acc if n == config.fig1_size else ratio_sweep(n, config.fig1_runs)[1] for n in config.fig4_sizes
    }

    sizes = np.asarray(config.sizes, dtype=float)
    lo, hi = config.lower_percentile, config.upper_percentile
    summary = {
        "config": asdict(config),
        "restricted_bayes_accuracy": restricted_accuracy,
        "sizes": list(config.sizes),
        "lambda_ratio": ratios_used,
        "baseline_accuracy_mean": baseline.mean(0).tolist(),
        "baseline_accuracy_p10": np.percentile(baseline, lo, axis=0).tolist(),
        "baseline_accuracy_p90": np.percentile(baseline, hi, axis=0).tolist(),
        "imm_accuracy_mean": imm.mean(0).tolist(),
        "imm_accuracy_p10": np.percentile(imm, lo, axis=0).tolist(),
        "imm_accuracy_p90": np.percentile(imm, hi, axis=0).tolist(),
        "imm_wins_fraction": ((imm > baseline).mean(0)).tolist(),
        "extra_data_equivalent": extra_data_equivalent(sizes, baseline.mean(0), imm.mean(0)),
        "fig1_size": config.fig1_size,
        "ratios": list(config.ratios),
        "fig1_restricted_kl_mean": fig1_kl.mean(0).tolist(),
        "fig1_restricted_kl_p10": np.percentile(fig1_kl, lo, axis=0).tolist(),
        "fig1_restricted_kl_p90": np.percentile(fig1_kl, hi, axis=0).tolist(),
        "fig1_accuracy_mean": fig1_acc.mean(0).tolist(),
        "fig4_accuracy_mean": {str(n): a.mean(0).tolist() for n, a in fig4_acc.items()},
        "_raw": {"baseline": baseline, "imm": imm, "fig1_kl": fig1_kl, "fig4": fig4_acc},
    }
    return summary


def plot(summary: dict, path: str | Path) -> Path:
    """Three panels: Fig. 1 (restricted-task KL vs r), Fig. 2 (accuracy vs n), Fig. 4 (accuracy vs r)."""
    config, raw = summary["config"], summary["_raw"]
    lo, hi = config["lower_percentile"], config["upper_percentile"]
    fig, (ax1, ax2, ax4) = new_figure(ncols=3)

    percentile_band(ax1, summary["ratios"], raw["fig1_kl"], "induced model of Q", "seagreen", lo, hi)
    ax1.set_xlabel(r"$\lambda / (1 + \lambda)$")
    ax1.set_ylabel(r"held-out KL($\bar P\,\|\,\bar Q$) (nats)")
    ax1.set_title(f"restricted task, n = {summary['fig1_size']} (cf. Fig. 1)")

    percentile_band(ax2, summary["sizes"], raw["baseline"], "without IMM", "darkred", lo, hi, marker="x")
    percentile_band(ax2, summary["sizes"], raw["imm"], "with IMM", "seagreen", lo, hi)
    ax2.axhline(summary["restricted_bayes_accuracy"], color="gray", linestyle=":", label="restricted Bayes (x1 only)")
    ax2.set_xlabel("dataset size n")
    ax2.set_ylabel("test accuracy")
    ax2.set_title(f"full task, {lo:g}th-{hi:g}th percentiles (cf. Fig. 2)")
    ax2.legend(loc="lower right")

    colors = ["darkblue", "seagreen", "darkorange", "purple", "brown"]
    for i, (n, acc) in enumerate(raw["fig4"].items()):
        percentile_band(ax4, summary["ratios"], acc, f"n = {n}", colors[i % len(colors)], lo, hi)
    ax4.set_xlabel(r"$\lambda / (1 + \lambda)$")
    ax4.set_ylabel("test accuracy")
    ax4.set_title("lambda tuning (cf. Fig. 4)")
    ax4.legend(loc="lower left")
    return save_figure(fig, path)


def _mean_band(summary: dict, key: str, i: int, mean_fmt: str, band_fmt: str) -> str:
    """'mean [p10, p90]' of summary[key + '_mean'|'_p10'|'_p90'][i]."""
    mean, lo, hi = (summary[f"{key}_{part}"][i] for part in ("mean", "p10", "p90"))
    return f"{mean:{mean_fmt}} [{lo:{band_fmt}}, {hi:{band_fmt}}]"


def format_summary(summary: dict) -> str:
    """Plain-text table of the measured numbers."""
    lines = [
        f"restricted Bayes predictor (x1 only) test accuracy: {summary['restricted_bayes_accuracy']:.4f}",
        "",
        "Fig. 2 - test accuracy, mean [p10, p90] over runs",
        f"{'n':>4} {'r':>6} {'without IMM':>26} {'with IMM':>26} {'IMM better':>11}",
    ]
    for i, n in enumerate(summary["sizes"]):
        base = _mean_band(summary, "baseline_accuracy", i, ".4f", ".3f")
        imm = _mean_band(summary, "imm_accuracy", i, ".4f", ".3f")
        lines.append(
            f"{n:>4} {summary['lambda_ratio'][i]:>6.3f} {base:>26} {imm:>26} {summary['imm_wins_fraction'][i]:>10.0%}"
        )
    lines.append(f"baseline needs on average {summary['extra_data_equivalent']:+.0%} data to match IMM (paper: ~30%)")
    lines += ["", f"Fig. 1 - n = {summary['fig1_size']}: held-out restricted-task KL and test accuracy vs r"]
    lines.append(f"{'r':>5} {'KL mean':>9} {'KL p10':>8} {'KL p90':>8} {'accuracy':>9}")
    for i, r in enumerate(summary["ratios"]):
        lines.append(
            f"{r:>5.2f} {summary['fig1_restricted_kl_mean'][i]:>9.4f} {summary['fig1_restricted_kl_p10'][i]:>8.4f} "
            f"{summary['fig1_restricted_kl_p90'][i]:>8.4f} {summary['fig1_accuracy_mean'][i]:>9.4f}"
        )
    lines += ["", "Fig. 4 - mean test accuracy vs r"]
    lines.append(f"{'n':>4} " + " ".join(f"{r:>6.2f}" for r in summary["ratios"]))
    for n, accs in summary["fig4_accuracy_mean"].items():
        lines.append(f"{n:>4} " + " ".join(f"{a:>6.3f}" for a in accs))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny settings for tests (seconds)")
    parser.add_argument("--out", default="imm_logistic_regression.png", help="PNG path")
    parser.add_argument("--json", default=None, help="also write the summary as JSON here")
    parser.add_argument("--runs", type=int, default=None, help="Monte-Carlo runs per dataset size")
    parser.add_argument("--steps", type=int, default=None, help="gradient steps per fit")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)

    config = LogisticIMMConfig()
    if args.quick:
        config = replace(config, **QUICK)  # type: ignore[arg-type]
    overrides = {k: v for k, v in (("runs", args.runs), ("steps", args.steps), ("seed", args.seed)) if v is not None}
    config = replace(config, **overrides)

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    start = time.perf_counter()
    summary = run(config)
    summary["wall_seconds"] = time.perf_counter() - start
    path = plot(summary, args.out)
    print(format_summary(summary))
    print(f"\nwrote {path}  ({summary['wall_seconds']:.1f} s)")
    public = {k: v for k, v in summary.items() if not k.startswith("_")}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(public, indent=2))
    return public


if __name__ == "__main__":
    main()
