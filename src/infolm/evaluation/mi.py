"""Mutual-information lower bounds from critic scores, and an estimator of MI between text segments.

Pure functions on the scores of positive pairs (from P_XY) and negative pairs (from P_X x P_Y):
:func:`jsd_mi_lower_bound` (the softplus proxy of Cao & Xu Eq. 6, Hjelm et al.'s JSD estimator) and
:func:`dv_mi_lower_bound` (MINE / Donsker-Varadhan, Eq. 4). :class:`PairDiscriminator` is the test
function D(phi_x, phi_y) on ``[phi_x, phi_y, phi_x - phi_y, |phi_x - phi_y|, phi_x * phi_y]`` (Sec. 5).

:func:`estimate_segment_mi` is the evaluation of Sec. 5.2: pairs of 40-token segments 10 tokens
apart, a small critic D_eval trained with the Eq. 6 proxy and early-stopped on the MINE bound of
held-out pairs, the MINE bound reported on test pairs, 10-fold cross-validation, mean +- std.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from infolm.data.pairs import segment_pairs
from infolm.errors import InfolmError


def jsd_mi_lower_bound(pos: Tensor, neg: Tensor) -> Tensor:
    """Eq. 6: E_P[-SP(-T)] - E_{PxP}[SP(T)], SP = softplus. Maximize it to train a critic."""
    return -F.softplus(-pos).mean() - F.softplus(neg).mean()


def dv_mi_lower_bound(pos: Tensor, neg: Tensor) -> Tensor:
    """Eq. 4 (MINE, Donsker-Varadhan): E_P[T] - log E_{PxP}[exp T], the mean over all negative scores."""
    return pos.mean() - (torch.logsumexp(neg.reshape(-1), 0) - math.log(neg.numel()))


mine_lower_bound = dv_mi_lower_bound


class PairDiscriminator(nn.Module):
    """D_theta(phi_x, phi_y): one hidden layer on the matching features of Cao & Xu Sec. 5."""

    def __init__(self, features: int, hidden: int = 500) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5 * features, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, fx: Tensor, fy: Tensor) -> Tensor:
        """fx, fy: (B, F) -> scores (B,)."""
        diff = fx - fy
        return self.net(torch.cat([fx, fy, diff, diff.abs(), fx * fy], dim=-1)).squeeze(-1)


class Critic(Protocol):
    """A test function T(x, y) = head(encode(x), encode(y)), so negatives reuse the encodings."""

    def encode(self, x: Tensor) -> Tensor: ...

    def head(self, fx: Tensor, fy: Tensor) -> Tensor: ...


class SegmentCritic(nn.Module):
    """D_eval for token segments: an embedding, an encoder, and a PairDiscriminator on the two encodings.

    ``encoder="conv"``: one convolution, ReLU, max-pooling over time; ``"bag"``: the mean embedding.
    """

    def __init__(
        self,
        vocab_size: int,
        emb: int = 32,
        channels: int = 64,
        kernel: int = 3,
        hidden: int = 64,
        encoder: str = "conv",
    ) -> None:
        super().__init__()
        if encoder not in ("conv", "bag"):
            raise InfolmError(f"MI critic encoder must be conv or bag, got {encoder!r}")
        self.embedding = nn.Embedding(vocab_size, emb)
        self.conv = nn.Conv1d(emb, channels, kernel, padding=kernel // 2) if encoder == "conv" else None
        self.discriminator = PairDiscriminator(channels if encoder == "conv" else emb, hidden)

    def encode(self, tokens: Tensor) -> Tensor:
        e = self.embedding(tokens)  # (B, L, E)
        if self.conv is None:
            return e.mean(dim=1)  # (B, E)
        return torch.relu(self.conv(e.transpose(1, 2))).amax(dim=2)  # (B, C)

    def head(self, fx: Tensor, fy: Tensor) -> Tensor:
        return self.discriminator(fx, fy)


@dataclasses.dataclass
class MIEstimatorConfig:
    seg_len: int = 40  # tokens per segment; paper 40
    gap: int = 10  # tokens between X and Y; paper 10
    folds: int = 10  # cross-validation folds: one tests, the next validates, the rest train; paper 10
    steps: int = 2000  # maximum critic updates per fold
    batch_size: int = 64  # positive pairs per update (negatives: the batch's Ys shifted)
    lr: float = 1e-3  # Adam learning rate of the critic
    eval_every: int = 50  # updates between validation MINE bounds
    patience: int = 6  # validations without improvement before early stopping
    neg_shifts: int = 64  # negatives per positive when evaluating the MINE bound (cyclic shifts of Y)
    emb: int = 32  # critic embedding size
    channels: int = 64  # critic convolution channels
    hidden: int = 64  # critic discriminator hidden units
    encoder: str = "conv"  # conv (convolution + max-pool) | bag (mean embedding): the segment encoder
    seed: int = 0  # data split and critic initialization

    def __post_init__(self) -> None:
        if self.encoder not in ("conv", "bag"):
            raise InfolmError(f"MI critic encoder must be conv or bag, got {self.encoder!r}")
        if self.folds < 3:
            raise InfolmError(f"MI estimation needs at least 3 folds (train, valid, test), got {self.folds}")
        for key in ("seg_len", "steps", "batch_size", "eval_every", "patience", "neg_shifts"):
            if getattr(self, key) < 1:
                raise InfolmError(f"MI estimator {key} must be positive, got {getattr(self, key)}")


@dataclasses.dataclass
class MIEstimate:
    mean: float  # mean over folds of the test MINE bound (nats)
    std: float  # standard deviation over folds
    folds: list[float]  # test MINE bound of each fold

    def __str__(self) -> str:
        return f"{self.mean:.3f} ± {self.std:.3f} nats ({len(self.folds)} folds)"


def row_segment_pairs(rows: Tensor, seg_len: int, gap: int) -> tuple[Tensor, Tensor]:
    """Disjoint segment pairs inside each row of ``rows`` (S, L), none crossing from one row to the next."""
    span = 2 * seg_len + gap
    if rows.size(1) < span:
        raise InfolmError(f"texts of {rows.size(1)} tokens are shorter than one segment pair ({span})")
    pairs = [segment_pairs(row, seg_len, gap) for row in rows]
    return torch.cat([x for x, _ in pairs]), torch.cat([y for _, y in pairs])


def generate_texts(
    model: nn.Module,
    num_tokens: int,
    eos_id: int,
    seg_len: int,
    gap: int,
    texts: int = 64,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> Tensor:
    """(S, L) independent generations of about ``num_tokens`` tokens in all, each started after ``<eos>``
    and a whole number of segment-pair spans long (so that no pair crosses two texts and none is lost)."""
    from infolm.evaluation.generation import sample

    span = 2 * seg_len + gap
    texts = max(1, min(texts, num_tokens // span))
    length = max(1, math.ceil(num_tokens / (texts * span))) * span
    prompt = torch.full((texts, 1), eos_id, dtype=torch.long, device=device)
    return sample(model, prompt, length, generator=generator).cpu()  # type: ignore[arg-type]


@torch.no_grad()
def critic_mine_bound(critic: Critic, x: Tensor, y: Tensor, neg_shifts: int = 64) -> float:
    """MINE bound (Eq. 4) of ``critic`` on pairs (x_i, y_i); negatives (x_i, y_{i+s}) for cyclic shifts s."""
    fx, fy = critic.encode(x), critic.encode(y)
    pos = critic.head(fx, fy)
    shifts = range(1, min(neg_shifts, x.size(0) - 1) + 1)
    neg = torch.stack([critic.head(fx, fy.roll(s, dims=0)) for s in shifts])  # (S, N)
    return float(dv_mi_lower_bound(pos, neg))


def fit_critic(
    critic: nn.Module,
    train: tuple[Tensor, Tensor],
    valid: tuple[Tensor, Tensor],
    config: MIEstimatorConfig,
    generator: torch.Generator | None = None,
) -> float:
    """Train ``critic`` with the Eq. 6 proxy; keep the parameters with the best validation MINE bound.

    Returns that best validation bound. Negatives pair each x with the y of another batch row.
    """
    x, y = train
    n = x.size(0)
    if n < 2:
        raise InfolmError("MI estimation needs at least two training pairs per fold")
    optimizer = torch.optim.Adam(critic.parameters(), lr=config.lr)
    best, best_state, bad = -math.inf, copy.deepcopy(critic.state_dict()), 0
    batch_size = min(config.batch_size, n)
    for step in range(1, config.steps + 1):
        critic.train()
        rows = torch.randint(n, (batch_size,), generator=generator)
        fx, fy = critic.encode(x[rows]), critic.encode(y[rows])  # type: ignore[operator]
        shift = int(torch.randint(1, batch_size, (1,), generator=generator)) if batch_size > 1 else 0
        pos, neg = critic.head(fx, fy), critic.head(fx, fy.roll(shift, dims=0))  # type: ignore[operator]
        loss = -jsd_mi_lower_bound(pos, neg)  # Eq. 6 proxy: better gradients than Eq. 4
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % config.eval_every == 0 or step == config.steps:
            critic.eval()
            bound = critic_mine_bound(critic, *valid, neg_shifts=config.neg_shifts)  # type: ignore[arg-type]
            if bound > best:
                best, best_state, bad = bound, copy.deepcopy(critic.state_dict()), 0
            else:
                bad += 1
                if bad >= config.patience:
                    break
    critic.load_state_dict(best_state)
    critic.eval()
    return best


def cross_validated_mi(
    x: Tensor, y: Tensor, make_critic: Callable[[], nn.Module], config: MIEstimatorConfig
) -> MIEstimate:
    """k-fold estimate of I(X; Y) from aligned samples x[i], y[i]: per fold, fold k tests, fold k+1 validates."""
    n = x.size(0)
    if n < 3 * config.folds:
        raise InfolmError(f"MI estimation: {n} pairs are too few for {config.folds} folds")
    generator = torch.Generator().manual_seed(config.seed)
    order = torch.randperm(n, generator=generator)
    folds = order.chunk(config.folds)
    if len(folds) < config.folds:  # chunk can give fewer (32 pairs in 10: 8 chunks of 4); tensor_split never does
        folds = order.tensor_split(config.folds)
    results = []
    for k in range(config.folds):
        test, valid = folds[k], folds[(k + 1) % config.folds]
        train = torch.cat([folds[j] for j in range(config.folds) if j not in (k, (k + 1) % config.folds)])
        torch.manual_seed(config.seed + k)
        critic = make_critic()
        fit_critic(critic, (x[train], y[train]), (x[valid], y[valid]), config, generator)
        results.append(critic_mine_bound(critic, x[test], y[test], config.neg_shifts))  # type: ignore[arg-type]
    values = torch.tensor(results, dtype=torch.float64)
    std = float(values.std()) if len(results) > 1 else 0.0
    return MIEstimate(mean=float(values.mean()), std=std, folds=results)


def estimate_segment_mi(stream: Tensor, vocab_size: int, config: MIEstimatorConfig | None = None) -> MIEstimate:
    """Lower bound on the MI of two segments (``seg_len`` tokens, ``gap`` apart) of an id stream (Sec. 5.2).

    Works on any stream: real text (``corpus.stream("test")``) or a model's generations. A 2-D
    ``stream`` (S, L) holds S independent texts (e.g. parallel generations): pairs are taken within a
    row only, never across two texts.
    """
    config = config or MIEstimatorConfig()
    if stream.numel() and int(stream.max()) >= vocab_size:
        raise InfolmError(f"stream has id {int(stream.max())} outside the vocabulary of {vocab_size}")
    if stream.dim() == 2:
        x, y = row_segment_pairs(stream.long().cpu(), config.seg_len, config.gap)
    else:
        x, y = segment_pairs(stream.long().cpu(), config.seg_len, config.gap)
    return cross_validated_mi(
        x, y, lambda: SegmentCritic(vocab_size, config.emb, config.channels, 3, config.hidden, config.encoder), config
    )
