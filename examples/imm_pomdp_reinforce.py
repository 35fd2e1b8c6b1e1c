"""IMM for reinforcement learning: a POMDP policy helps REINFORCE train an MDP policy (IMM Sec. 7, App. D.3).

Environment: an 11 x 11 toroidal grid, 4 actions (up, down, left, right; moves wrap around), and a
state-only "mountain" reward peaking at the centre (App. D.3, Fig. 5). The reward is collected on
arrival in the next cell.

* Restricted model: the POMDP agent observes only the column x and keeps a uniform belief over the
  row y. We solve it with the Fast Informed Bound (FIB) alpha-vector iteration in numpy (the paper
  used POMDPs.jl + FIB) and act with the maximal-utility action at belief (x known, y uniform),
  splitting exact ties evenly. Because moves are deterministic and x is observed exactly, FIB here
  coincides with QMDP (Q-value iteration of the full MDP, averaged over the belief).
* Full model: an MDP policy pi(a | x, y), a 121 -> 32 (tanh) -> 4 MLP on the one-hot state, trained
  by REINFORCE with discounted rewards-to-go (gamma = 0.9) and Adam (lr 1e-2), one 50-step episode
  per epoch from a uniform start (App. D.3: per-epoch observation length 50).
* IMM: the induced model of pi at column x averages pi over y under the POMDP's uniform belief (the
  analogue of Eq. (2) with the belief as the extended-context distribution); lambda * KL(POMDP policy
  || induced model) is added for each observed state, lambda = 0.25 (App. D.3).

The number of epochs is the dataset size. Each run is evaluated at a grid of epochs by the exact
expected total reward of a 22-step rollout from a uniform start (the paper averages 10 sampled
rollouts of 22 steps), and the 10th-90th percentile bands are taken over independent runs (30 in the
paper). Runs with and without IMM share their initial weights; all runs train at once as a batch.

    python examples/imm_pomdp_reinforce.py [--quick] [--out PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
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

UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3
ACTION_MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))  # (dy, dx) per action


@dataclass
class ReinforceIMMConfig:
    """Settings of the POMDP / REINFORCE IMM experiment (paper values where the paper gives them)."""

    height: int = 11  # rows y, unobserved by the POMDP (App. D.3: 11 x 11 grid)
    width: int = 11  # columns x, observed by the POMDP
    reward_variance: float = 0.1  # variance of the mountain reward on a [-2, 2]^2 grid (authors' code)
    gamma: float = 0.9  # discount of the rewards-to-go and of the POMDP solution (authors' code)
    hidden: int = 32  # policy MLP width (authors' code)
    lr: float = 1e-2  # Adam learning rate (authors' code)
    episode_length: int = 50  # observations per epoch (App. D.3: 50)
    epochs: int = 500  # longest training; shorter ones are checkpoints of it (Fig. 3 goes to 500)
    checkpoints: tuple[int, ...] = (10, 20, 50, 75, 100, 125, 150, 175, 200, 250, 300, 350, 400, 450, 500)  # Fig. 3
    eval_horizon: int = 22  # rollout length of the evaluation (authors' code: 22 steps)
    lam: float = 0.25  # IMM weight lambda (App. D.3: 0.25)
    # IMM targets: 0 = the POMDP's maximal-utility action (App. D.3); T > 0 = softmax(utilities / T), the
    # two extra curves of the authors' Fig. 3 code (T = 0.5, 1.0)
    pomdp_temperatures: tuple[float, ...] = (0.0, 0.5, 1.0)
    runs: int = 30  # Monte-Carlo runs per method (App. D.3: 30)
    fib_tolerance: float = 1e-10  # stop FIB when alpha vectors move less than this
    lower_percentile: float = 10.0  # band edges (App. D.3: 10th and 90th)
    upper_percentile: float = 90.0
    seed: int = 0  # torch generator seed


QUICK = dict(runs=4, epochs=20, checkpoints=(5, 10, 20))


class GridWorld:
    """The toroidal grid: state s = y * width + x, deterministic moves, reward on arrival."""

    def __init__(self, config: ReinforceIMMConfig):
        self.height, self.width = config.height, config.width
        self.num_states, self.num_actions = config.height * config.width, len(ACTION_MOVES)
        ys, xs = np.divmod(np.arange(self.num_states), self.width)
        self.row, self.col = ys, xs  # (S,) each
        self.next_state = np.stack(
            [((ys + dy) % self.height) * self.width + (xs + dx) % self.width for dy, dx in ACTION_MOVES], axis=1
        )  # (S, A)
        # mountain: isotropic Gaussian density at the centre of a [-2, 2]^2 lattice
        gy = np.linspace(-2, 2, self.height)[ys]
        gx = np.linspace(-2, 2, self.width)[xs]
        v = config.reward_variance
        self.reward = np.exp(-(gx**2 + gy**2) / (2 * v)) / (2 * np.pi * v)  # (S,)

    def transition_matrices(self) -> np.ndarray:
        """T[a, s, s'] = P(s' | s, a): (A, S, S)."""
        transitions = np.zeros((self.num_actions, self.num_states, self.num_states))
        for a in range(self.num_actions):
            transitions[a, np.arange(self.num_states), self.next_state[:, a]] = 1.0
        return transitions

    def observation_matrix(self) -> np.ndarray:
        """O[s', z] = P(z | s'): the POMDP observes the column x exactly. (S, width)."""
        return np.eye(self.width)[self.col]

    def column_beliefs(self) -> np.ndarray:
        """b[x, s]: column x known, row uniform (the POMDP belief of App. D.3). (width, S)."""
        return (self.col[None, :] == np.arange(self.width)[:, None]) / self.height


def fast_informed_bound(
    transitions: np.ndarray, observations: np.ndarray, rewards: np.ndarray, gamma: float, tolerance: float = 1e-10
) -> np.ndarray:
    """Alpha vectors of the Fast Informed Bound (Hauskrecht 2000; Kochenderfer et al. 2022, Alg. 21.3).

    alpha_a(s) = R(s, a) + gamma * sum_z max_a' sum_s' O(z | s', a) T(s' | s, a) alpha_a'(s').
    transitions (A, S, S), observations (S, Z) (independent of the action here), rewards (A, S) -> (A, S).
    """
    alpha = np.zeros_like(rewards)
    for _ in range(100_000):
        # future[a, z, s, b] = sum_s' O(z | s') T(s' | s, a) alpha_b(s')
        future = np.einsum("tz,ast,bt->azsb", observations, transitions, alpha, optimize=True)
        updated = rewards + gamma * future.max(axis=-1).sum(axis=1)
        if np.abs(updated - alpha).max() < tolerance:
            return updated
        alpha = updated
    raise RuntimeError("FIB did not converge")


def q_value_iteration(world: GridWorld, gamma: float, tolerance: float = 1e-10) -> np.ndarray:
    """Q(s, a) of the fully observed MDP: (S, A)."""
    arrival = world.reward[world.next_state]  # (S, A)
    q = np.zeros_like(arrival)
    while True:
        updated = arrival + gamma * q.max(axis=1)[world.next_state]
        if np.abs(updated - q).max() < tolerance:
            return updated
        q = updated


def tie_split_argmax(values: np.ndarray, rel_tolerance: float = 1e-9) -> np.ndarray:
    """Uniform distribution over the maximisers of each row (ties within a relative tolerance)."""
    top = values.max(axis=-1, keepdims=True)
    is_max = values >= top - rel_tolerance * np.maximum(np.abs(top), 1.0)
    return is_max / is_max.sum(axis=-1, keepdims=True)


def pomdp_policy(world: GridWorld, config: ReinforceIMMConfig, temperature: float = 0.0) -> np.ndarray:
    """The restricted model P(a | x): FIB utilities at belief (x known, y uniform), then the
    maximal-utility action (temperature 0) or a softmax of the utilities. (width, A)."""
    arrival = world.reward[world.next_state].T  # (A, S): R(s, a) = reward of the next cell
    alpha = fast_informed_bound(
        world.transition_matrices(), world.observation_matrix(), arrival, config.gamma, config.fib_tolerance
    )
    utilities = world.column_beliefs() @ alpha.T  # (width, A)
    if temperature > 0:
        z = utilities / temperature
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)
    return tie_split_argmax(utilities)


def induced_policy(probs: Tensor, height: int, width: int) -> Tensor:
    """Induced model of a full policy under the uniform row belief: Qbar(a | x) = mean_y pi(a | x, y).

    probs (R, S, A) with s = y * width + x -> (R, width, A).
    """
    return probs.reshape(probs.shape[0], height, width, probs.shape[-1]).mean(dim=1)


def expected_total_reward(probs: Tensor, world: GridWorld, horizon: int) -> Tensor:
    """Exact expected sum of rewards over `horizon` steps from a uniform start. probs (R, S, A) -> (R,)."""
    runs, num_states, _ = probs.shape
    next_state = torch.as_tensor(world.next_state)  # (S, A)
    step = torch.zeros(runs, num_states, num_states, dtype=probs.dtype)
    step.scatter_add_(2, next_state.expand(runs, -1, -1), probs)  # (R, S, S'): P(s' | s) under the policy
    reward = torch.as_tensor(world.reward, dtype=probs.dtype)
    occupancy = torch.full((runs, 1, num_states), 1.0 / num_states, dtype=probs.dtype)
    total = torch.zeros(runs, dtype=probs.dtype)
    for _ in range(horizon):
        occupancy = occupancy @ step  # (R, 1, S)
        total += occupancy[:, 0] @ reward
    return total


class BatchedPolicy(torch.nn.Module):
    """R independent MLP policies pi(a | s) = softmax(W2 tanh(W1 onehot(s) + b1) + b2), evaluated on all states."""

    def __init__(self, runs: int, num_states: int, hidden: int, num_actions: int, gen: torch.Generator):
        super().__init__()

        def uniform(shape: tuple[int, ...], fan_in: int) -> torch.nn.Parameter:
            bound = 1.0 / fan_in**0.5  # nn.Linear's default initialisation
            return torch.nn.Parameter((torch.rand(*shape, generator=gen) * 2 - 1) * bound)

        self.w1 = uniform((runs, num_states, hidden), num_states)  # one-hot input: row s of W1^T
        self.b1 = uniform((runs, 1, hidden), num_states)
        self.w2 = uniform((runs, hidden, num_actions), hidden)
        self.b2 = uniform((runs, 1, num_actions), hidden)

    def forward(self) -> Tensor:
        """Log-probabilities of every action in every state: (R, S, A)."""
        logits = torch.tanh(self.w1 + self.b1) @ self.w2 + self.b2  # (R, S, A)
        return torch.log_softmax(logits, dim=-1)


def discounted_rewards_to_go(rewards: Tensor, gamma: float) -> Tensor:
    """G_t = sum_{k >= t} gamma^(k - t) r_k along the last axis: (R, T) -> (R, T)."""
    steps = rewards.shape[-1]
    k = torch.arange(steps)
    discount = torch.where(k[:, None] >= k[None, :], gamma ** (k[:, None] - k[None, :]).double(), 0.0)  # [k, t]
    return rewards @ discount.to(rewards.dtype)


def imm_kl(targets: Tensor, induced: Tensor, columns: Tensor) -> Tensor:
    """Mean over observed states of KL(P(. | x_t) || Qbar(. | x_t)) per run (Eq. (15) with the full belief).

    targets (R, width, A) restricted policy of each run, induced (R, width, A), columns (R, T) observed x_t -> (R,).
    """
    num_actions = induced.shape[-1]
    index = columns[:, :, None].expand(-1, -1, num_actions)  # (R, T, A)
    p = targets.gather(1, index)  # (R, T, A)
    log_q = torch.log(induced.gather(1, index).clamp(min=1e-30))
    plogp = torch.where(p > 0, p * torch.log(p.clamp(min=1e-30)), 0.0)
    return (plogp - p * log_q).sum(-1).mean(-1)


@dataclass
class Method:
    """One curve: REINFORCE plus lam * IMM towards `target` (lam = 0: plain REINFORCE)."""

    key: str
    label: str
    lam: float
    target: np.ndarray  # (width, A) restricted policy P(a | x)


def train(config: ReinforceIMMConfig, world: GridWorld, methods: list[Method]) -> dict[str, np.ndarray]:
    """Train `config.runs` policies per method, all in one batch; evaluate at the checkpoints.

    Run i of every method starts from the same initial weights. Returns {method key: (runs, C)}
    expected `eval_horizon`-step rewards at the C checkpoints.
    """
    gen = torch.Generator().manual_seed(config.seed)
    k = len(methods)
    runs = k * config.runs
    policy = BatchedPolicy(config.runs, world.num_states, config.hidden, world.num_actions, gen)
    with torch.no_grad():
        for p in policy.parameters():
            p.data = p.data.repeat(k, 1, 1)
    lam = torch.tensor([m.lam for m in methods], dtype=torch.float32).repeat_interleave(config.runs)  # (R,)
    targets = torch.stack([torch.as_tensor(m.target, dtype=torch.float32) for m in methods])
    targets = targets.repeat_interleave(config.runs, dim=0)  # (R, width, A)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    next_state = torch.as_tensor(world.next_state)  # (S, A)
    reward = torch.as_tensor(world.reward, dtype=torch.float32)  # (S,)
    column = torch.as_tensor(world.col)  # (S,)
    run_index = torch.arange(runs)
    checkpoints = sorted(set(config.checkpoints))
    scores = []
    for epoch in range(1, config.epochs + 1):
        log_probs = policy()  # (R, S, A)
        # one episode of `episode_length` steps per run, sampled with the current policy
        with torch.no_grad():
            cdf = log_probs.exp().cumsum(-1)  # (R, S, A)
            state = torch.randint(world.num_states, (runs,), generator=gen)
            states, actions, rewards = [], [], []
            for _ in range(config.episode_length):
                u = torch.rand(runs, 1, generator=gen)
                action = (u > cdf[run_index, state]).sum(-1).clamp(max=world.num_actions - 1)  # inverse CDF
                states.append(state)
                actions.append(action)
                state = next_state[state, action]
                rewards.append(reward[state])
            states_t, actions_t = torch.stack(states, 1), torch.stack(actions, 1)  # (R, T)
            returns = discounted_rewards_to_go(torch.stack(rewards, 1), config.gamma)  # (R, T)
        chosen = log_probs[run_index[:, None], states_t, actions_t]  # (R, T)
        policy_loss = -(chosen * returns).mean(-1)  # REINFORCE with rewards-to-go, (R,)
        induced = induced_policy(log_probs.exp(), world.height, world.width)  # (R, width, A)
        loss = policy_loss + lam * imm_kl(targets, induced, column[states_t])
        optimizer.zero_grad()
        loss.sum().backward()  # runs are independent: each gets its own gradient
        optimizer.step()
        if epoch in checkpoints:
            with torch.no_grad():
                scores.append(expected_total_reward(policy().exp().double(), world, config.eval_horizon).numpy())
    table = np.stack(scores, axis=1).reshape(k, config.runs, len(checkpoints))  # (k, runs, C)
    return {m.key: table[i] for i, m in enumerate(methods)}


def run(config: ReinforceIMMConfig) -> dict:
    """Solve the POMDP, train every method, and summarise; raw arrays go under '_raw'."""
    world = GridWorld(config)
    methods = [Method("baseline", "REINFORCE (no IMM)", 0.0, np.full((world.width, world.num_actions), 0.25))]
    for temperature in config.pomdp_temperatures:
        target = pomdp_policy(world, config, temperature)  # (width, A)
        if temperature == 0:
            methods.append(Method("imm", "+ IMM, POMDP max-utility action", config.lam, target))
        else:
            methods.append(
                Method(f"imm_softmax_{temperature:g}", f"+ IMM, POMDP softmax T={temperature:g}", config.lam, target)
            )

    def score_of(probs_sa: np.ndarray) -> float:
        return float(expected_total_reward(torch.as_tensor(probs_sa)[None], world, config.eval_horizon)[0])

    q = q_value_iteration(world, config.gamma)
    references = {
        "optimal_mdp_policy": score_of(tie_split_argmax(q)),
        "pomdp_policy": score_of(pomdp_policy(world, config, 0.0)[world.col]),  # acts on x only
        "uniform_random_policy": score_of(np.full((world.num_states, world.num_actions), 0.25)),
    }
    scores = train(config, world, methods)
    base = scores["baseline"]
    lo, hi = config.lower_percentile, config.upper_percentile
    checkpoints = sorted(set(config.checkpoints))
    curves = {
        m.key: {
            "label": m.label,
            "lam": m.lam,
            "mean": scores[m.key].mean(0).tolist(),
            "p10": np.percentile(scores[m.key], lo, axis=0).tolist(),
            "p90": np.percentile(scores[m.key], hi, axis=0).tolist(),
            "better_than_baseline": (scores[m.key] > base).mean(0).tolist(),
        }
        for m in methods
    }
    return {
        "config": asdict(config),
        "pomdp_targets": {m.key: m.target.round(4).tolist() for m in methods[1:]},
        "references": references,
        "epochs": checkpoints,
        "observations": [e * config.episode_length for e in checkpoints],
        "curves": curves,
        "policy_parameters": sum(
            p.numel()
            for p in BatchedPolicy(
                1, world.num_states, config.hidden, world.num_actions, torch.Generator()
            ).parameters()
        ),
        "_raw": scores,
    }


def plot(summary: dict, path: str | Path) -> Path:
    """Average reward vs epochs with percentile bands (cf. Fig. 3), reference policies as lines."""
    config, raw = summary["config"], summary["_raw"]
    lo, hi = config["lower_percentile"], config["upper_percentile"]
    fig, (ax,) = new_figure(ncols=1, width_per_panel=7.0, height=4.8)
    colors = {"baseline": "darkred", "imm": "seagreen"}
    others = iter(["darkblue", "#e28e1f", "purple", "brown"])
    for key, curve in summary["curves"].items():
        color = colors.get(key) or next(others)
        label = curve["label"] + (f" (lambda={curve['lam']:g})" if curve["lam"] else "")
        marker = "x" if key == "baseline" else "o"
        percentile_band(ax, summary["epochs"], raw[key], label, color, lo, hi, marker=marker)
    styles = {
        "optimal_mdp_policy": ("black", "optimal MDP policy"),
        "pomdp_policy": ("gray", "POMDP policy (x only)"),
    }
    for key, (color, label) in styles.items():
        ax.axhline(summary["references"][key], color=color, linestyle=":", label=label)
    ax.set_xlabel(f"epochs ({config['episode_length']} observations each)")
    ax.set_ylabel(f"expected total reward, {config['eval_horizon']}-step rollout")
    ax.set_title(f"11x11 toroidal grid, {config['runs']} runs, {lo:g}th-{hi:g}th percentiles (cf. Fig. 3)")
    ax.legend(loc="lower right", fontsize=8)
    return save_figure(fig, path)


def format_summary(summary: dict) -> str:
    """Plain-text table of the measured numbers."""
    refs = summary["references"]
    curves = summary["curves"]
    lines = [
        "reference policies, expected total reward of a "
        f"{summary['config']['eval_horizon']}-step rollout from a uniform start:",
        *(f"  {name:<22} {value:8.3f}" for name, value in refs.items()),
        f"policy parameters: {summary['policy_parameters']}",
        "",
        "average reward, mean [p10, p90] over runs; (x%) = share of runs beating their no-IMM twin",
        f"{'epochs':>6} {'obs':>6} " + " ".join(f"{key:>28}" for key in curves),
    ]
    for i, epoch in enumerate(summary["epochs"]):
        cells = []
        for key, c in curves.items():
            cell = f"{c['mean'][i]:.2f} [{c['p10'][i]:.2f}, {c['p90'][i]:.2f}]"
            if key != "baseline":
                cell += f" ({c['better_than_baseline'][i]:.0%})"
            cells.append(f"{cell:>28}")
        lines.append(f"{epoch:>6} {summary['observations'][i]:>6} " + " ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny settings for tests (seconds)")
    parser.add_argument("--out", default="imm_pomdp_reinforce.png", help="PNG path")
    parser.add_argument("--json", default=None, help="also write the summary as JSON here")
    parser.add_argument("--runs", type=int, default=None, help="Monte-Carlo runs per method")
    parser.add_argument("--epochs", type=int, default=None, help="training epochs (checkpoints beyond are dropped)")
    parser.add_argument("--lam", type=float, default=None, help="IMM weight lambda")
    parser.add_argument(
        "--pomdp-temperatures", default=None, help="comma-separated IMM targets, 0 = max-utility action (0,0.5,1)"
    )
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)

    config = ReinforceIMMConfig()
    if args.quick:
        config = replace(config, **QUICK)  # type: ignore[arg-type]
    overrides = {
        "runs": args.runs,
        "epochs": args.epochs,
        "lam": args.lam,
        "pomdp_temperatures": None
        if args.pomdp_temperatures is None
        else tuple(float(t) for t in args.pomdp_temperatures.split(",") if t.strip()),
        "seed": args.seed,
    }
    config = replace(config, **{k: v for k, v in overrides.items() if v is not None})
    config = replace(config, checkpoints=tuple(c for c in config.checkpoints if c <= config.epochs) or (config.epochs,))

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
