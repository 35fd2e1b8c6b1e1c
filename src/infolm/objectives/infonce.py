"""InfoNCE and local NCE as pure functions (Kong et al., "A Mutual Information Maximization
Perspective of Language Representation Learning"): the math that mlm-nce, dim, nsp and skipgram-nce
call.

InfoNCE (Eq. 1): I(A, B) >= E_p(a,b)[ f(a, b) - E_q(B) log Σ_{b'∈B} exp f(a, b') ] + log |B|, with B
the positive b and |B| - 1 negatives drawn from q. The loss is the negative of the bracket. The
candidate set is given as the positive's score plus a *multiset* of negative candidates: columns of
scores with a count each (a type drawn twice counts twice; count 0 leaves a column out). With every
vocabulary type once as B and uniform q the loss is softmax cross-entropy (Eq. 2).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def info_nce(scores: Tensor, positive: Tensor, negative_counts: Tensor | None = None) -> Tensor:
    """Per-row InfoNCE loss  log Σ_{b∈B_n} exp f(a_n, b) - f(a_n, b_n)  (Eq. 1 without log|B|).

    ``scores`` (N, K) f(a_n, c_k) for candidate columns c_k; ``positive`` (N,) the column of b_n;
    ``negative_counts`` (N, K) how often c_k is a negative of row n (None: every column but the
    positive, once). Returns (N,) losses.
    """
    rows = torch.arange(scores.size(0), device=scores.device)
    if negative_counts is None:
        negative_counts = torch.ones_like(scores)
        negative_counts[rows, positive] = 0
    positive_scores = scores[rows, positive]  # (N,)
    negative_logits = scores + torch.log(negative_counts.to(scores.dtype))  # log 0 = -inf leaves a column out
    log_partition = torch.logsumexp(torch.cat([positive_scores[:, None], negative_logits], dim=1), dim=1)
    return log_partition - positive_scores


def info_nce_bound(scores: Tensor, positive: Tensor, negative_counts: Tensor | None = None) -> Tensor:
    """The InfoNCE lower bound on I(A, B) of each row (Eq. 1): log|B_n| minus the loss. (N,)."""
    if negative_counts is None:
        size = torch.full_like(scores[:, 0], float(scores.size(1)))
    else:
        size = negative_counts.sum(1).to(scores.dtype) + 1.0
    return torch.log(size) - info_nce(scores, positive, negative_counts)


def local_nce(positive_scores: Tensor, negative_scores: Tensor) -> Tensor:
    """Binary ("local") NCE (Kong et al. App. A; word2vec negative sampling): a logistic discriminator
    d = σ(score) told real pairs from noise, -[log d(pos) + log(1 - d(neg))], summed over a row's
    negatives. ``positive_scores`` (N,), ``negative_scores`` (N, K) or (N,). Returns (N,)."""
    negatives = negative_scores if negative_scores.dim() > 1 else negative_scores[:, None]
    return F.softplus(-positive_scores) + F.softplus(negatives).sum(1)


def in_batch_negative_counts(
    owner: Tensor, candidate_of: Tensor, num_candidates: int, num_owners: int, query_owner: Tensor | None = None
) -> Tensor:
    """Negatives "from other sequences in the same batch" (Sec. 5.2) as counts (Q, K).

    Item n (a masked word or n-gram) belongs to sequence ``owner[n]`` and is candidate column
    ``candidate_of[n]``. Query q, an item of sequence ``query_owner[q]`` (None: the items themselves,
    Q = N), counts each column's occurrences in the *other* sequences.
    """
    per_owner = torch.zeros(num_owners, num_candidates, device=owner.device)
    per_owner.index_put_((owner, candidate_of), torch.ones_like(owner, dtype=per_owner.dtype), accumulate=True)
    total = per_owner.sum(0, keepdim=True)  # (1, K)
    return total - per_owner[owner if query_owner is None else query_owner]  # (Q, K)
