"""What BMI's discriminator and IW-RAML weights do, measured (Cao & Xu, Eqs. 4, 6, 14-16).

Pure functions of scores and weights, so that they are checked on hand-made inputs; the BMI term
(``objectives/bmi.py``) feeds them its training minibatches and, at every evaluation, a fixed sample
of held-out pairs (``HeldOutPairs``) from the valid split.

* ``discriminator_accuracy``: the share of pairs D_theta classifies right, positives (consecutive
  sentences, score > 0) and negatives (random pairs, score < 0) counted alike (chance 0.5).
* ``effective_sample_size``: 1 / sum_i w_i^2 of self-normalized weights (sum 1): M for uniform
  weights over M candidates, 1 when one candidate takes all the weight.
* ``weight_on``: the weight that lands on the candidates a mask marks. For IW-RAML the mark is
  "the candidate is Y* itself": Y~ is drawn from G(. | Y* = S_m) over S_m, S_m+1, ... (Eq. 15), so
  offset 0 draws Y* (probability lambda); a candidate counts as Y* when it is the same sentence of the
  corpus (index m), not merely an equal string elsewhere.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from infolm.data.pairs import SentenceIndex
from infolm.evaluation.mi import dv_mi_lower_bound, jsd_mi_lower_bound


def discriminator_accuracy(pos: Tensor, neg: Tensor) -> Tensor:
    """Balanced accuracy of D_theta: (mean[pos > 0] + mean[neg < 0]) / 2. pos, neg: scores (N,)."""
    return ((pos > 0).float().mean() + (neg < 0).float().mean()) / 2


def effective_sample_size(weights: Tensor) -> Tensor:
    """1 / sum w^2 over the last dim of self-normalized weights (..., M) -> (...)."""
    return 1.0 / (weights.double() ** 2).sum(dim=-1)


def weight_on(weights: Tensor, marked: Tensor) -> Tensor:
    """The weight on the marked candidates: sum_i w_i [marked_i] over the last dim. (..., M) -> (...)."""
    return (weights.double() * marked.double()).sum(dim=-1)


def raml_weight_diagnostics(weights: Tensor, log_proposal: Tensor, is_true: Tensor, prefix: str) -> dict[str, float]:
    """ESS and weight on Y* of Eq. 16's self-normalized weights (C, M), each the mean over C minibatches, and
    the same of the proposal weights alone (1/G, normalized: what Eq. 16 gives when the reward is flat)."""
    proposal = torch.softmax(-log_proposal.double(), dim=-1)  # 1/G normalized over each minibatch
    return {
        f"{prefix}ess": float(effective_sample_size(weights).mean()),
        f"{prefix}ess_proposal": float(effective_sample_size(proposal).mean()),
        f"{prefix}weight_on_true": float(weight_on(weights, is_true).mean()),
        f"{prefix}weight_on_true_proposal": float(weight_on(proposal, is_true).mean()),
    }


@dataclasses.dataclass
class HeldOutPairs:
    """A fixed draw of n held-out pairs: X = S_l, Y* = S_l+1 (positives), S_k uniform (negatives, the same
    X) and Y~ ~ G(. | Y*) (Eq. 15), as sentence indices of ``index`` with log G of each Y~."""

    index: SentenceIndex
    x: Tensor  # (n,) anchors l
    y: Tensor  # (n,) l + 1: Y*
    neg: Tensor  # (n,) k, uniform over the split
    tilde: Tensor  # (n,) Y~ ~ G(. | Y*)
    log_g: Tensor  # (n,) log G(Y~ | Y*)

    @classmethod
    def draw(cls, index: SentenceIndex, n: int, lam: float, seed: int) -> HeldOutPairs:
        """The pairs from a generator of their own seeded with ``seed``: the same at every call, and the
        global random state is left alone (the training run does not change when they are drawn)."""
        generator = torch.Generator().manual_seed(seed)
        x, y = index.sample_positive(n, generator)
        neg = index.sample_negative(n, generator)
        tilde, log_g = index.sample_geometric(y, lam, generator)
        return cls(index, x, y, neg, tilde, log_g)

    def scores_diagnostics(
        self, pos: Tensor, neg: Tensor, tilde: Tensor, batch_size: int, beta: float
    ) -> dict[str, float]:
        """The held-out diagnostics from D_theta's scores of (X, Y*), (X, S_k) and (X, Y~), each (n,).

        IW-RAML's weights are self-normalized over minibatches of ``batch_size`` pairs (Eq. 16, as in
        training): the first n // batch_size minibatches of the pairs, in order, the rest left out."""
        out = {
            "bmi_disc_valid_acc": float(discriminator_accuracy(pos, neg)),
            "bmi_disc_valid_eq6": float(jsd_mi_lower_bound(pos, neg)),  # Eq. 6 proxy, -2 ln 2 at chance
            "bmi_disc_valid_mine": float(dv_mi_lower_bound(pos, neg)),  # Eq. 4, a lower bound on I(X; Y)
        }
        batches = pos.numel() // batch_size
        if batches == 0:
            return out
        used = batches * batch_size
        reward = (tilde - pos)[:used].view(batches, batch_size)  # Eq. 14
        log_g = self.log_g[:used].view(batches, batch_size).to(reward.device)
        weights = torch.softmax(reward.double() / beta - log_g.double(), dim=-1)  # Eq. 16, self-normalized
        is_true = (self.tilde == self.y)[:used].view(batches, batch_size).to(reward.device)
        out.update(raml_weight_diagnostics(weights, log_g, is_true, prefix="bmi_"))
        out["bmi_true_drawn"] = float(is_true.double().mean())  # share of Y~ that are Y* (expected ~lambda)
        return out
