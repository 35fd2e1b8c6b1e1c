"""Sentence and segment pairs for mutual-information terms and estimators (BMI, Cao & Xu Sec. 3).

:class:`SentenceIndex` indexes the lines of one split and samples, vectorized over a minibatch,
positive pairs ``(S_l, S_{l+1})`` from P_XY, negatives ``(S_l, S_k)`` with S_k drawn uniformly from
the corpus (P_X x P_Y), and the geometric proposal G of IW-RAML (Eq. 15). :func:`segment_pairs`
cuts fixed-length segment pairs out of any id stream (Sec. 5.2). Batches are right-padded
``(B, L)`` id tensors plus ``(B,)`` lengths.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from infolm.errors import InfolmError


class SentenceIndex:
    """Sentences of one stream: ``offsets`` (S+1,) start positions into ``stream`` (N,)."""

    def __init__(self, stream: Tensor, offsets: np.ndarray | Tensor, max_len: int | None = None, pad_id: int = 0):
        offsets_t = torch.as_tensor(np.asarray(offsets), dtype=torch.long)
        if offsets_t.dim() != 1 or offsets_t.numel() < 3:
            raise InfolmError("a sentence index needs at least two sentences")
        if max_len is not None and max_len < 1:
            raise InfolmError(f"max sentence length must be positive, got {max_len}")
        self.stream = stream.long()
        self.starts = offsets_t[:-1]  # (S,)
        lengths = offsets_t[1:] - offsets_t[:-1]  # (S,)
        self.lengths = lengths.clamp(max=max_len) if max_len is not None else lengths
        self.pad_id = pad_id

    @classmethod
    def from_corpus(cls, corpus: Any, split: str = "train", max_len: int | None = None) -> SentenceIndex:
        """Index the lines of ``corpus``'s ``split`` (each ends with ``<eos>``), longer ones cut at ``max_len``."""
        return cls(corpus.stream(split), corpus.sentence_offsets(split), max_len=max_len)

    def __len__(self) -> int:
        return int(self.starts.numel())

    def to(self, device: torch.device | str) -> SentenceIndex:
        """The index with its tensors on ``device`` (batches are then gathered there)."""
        moved = object.__new__(SentenceIndex)
        moved.stream, moved.starts = self.stream.to(device), self.starts.to(device)
        moved.lengths, moved.pad_id = self.lengths.to(device), self.pad_id
        return moved

    def batch(self, indices: Tensor) -> tuple[Tensor, Tensor]:
        """Sentences ``indices`` (B,) as right-padded ids (B, L) and lengths (B,)."""
        indices = indices.to(self.starts.device)
        lengths = self.lengths[indices]  # (B,)
        width = int(lengths.max())
        positions = self.starts[indices, None] + torch.arange(width, device=indices.device)  # (B, L)
        valid = torch.arange(width, device=indices.device) < lengths[:, None]  # (B, L)
        tokens = self.stream[positions.clamp(max=self.stream.numel() - 1)]
        return tokens.masked_fill(~valid, self.pad_id), lengths

    # --- samplers (all draw from the global torch RNG unless a generator is given) ---

    def sample_positive(self, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """n indices (l, l+1) of consecutive sentences: samples of P_XY (Sec. 3.1)."""
        anchors = torch.randint(len(self) - 1, (n,), generator=generator)
        return anchors, anchors + 1

    def sample_negative(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """n sentence indices k drawn uniformly from the corpus: Y of P_X x P_Y (Sec. 3.1)."""
        return torch.randint(len(self), (n,), generator=generator)

    def sample_geometric(
        self, targets: Tensor, lam: float, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        """Proposal G (Eq. 15): k = m + j with P(j) = (1 - lam)^j lam, cut at the corpus end.

        Returns the sampled indices k (B,) and log G(k | m) (B,), renormalized over the
        admissible offsets j in [0, S - m) so the importance weights stay exact near the end.
        """
        return truncated_geometric(targets, len(self), lam, generator)


def truncated_geometric(
    targets: Tensor, size: int, lam: float, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """Sample k = m + j, j ~ Geometric(lam) on {0, ..., size - m - 1}, by inverting the CDF; with log-probs."""
    if not 0.0 < lam <= 1.0:
        raise InfolmError(f"geometric proposal lambda must be in (0, 1], got {lam}")
    admissible = (size - targets).double()  # (B,) offsets 0..n-1 are inside the corpus
    if (admissible < 1).any():
        raise InfolmError("geometric proposal: target index outside the corpus")
    if lam == 1.0:
        return targets.clone(), torch.zeros(targets.shape, dtype=torch.float32)
    log_keep = math.log1p(-lam)  # log(1 - lam)
    mass = -torch.expm1(admissible * log_keep)  # P(j < n) = 1 - (1 - lam)^n
    u = torch.rand(targets.shape, generator=generator, dtype=torch.float64).to(targets.device)
    offsets = torch.floor(torch.log1p(-u * mass) / log_keep).long()
    offsets = torch.minimum(offsets, admissible.long() - 1)  # guards u*mass rounding to the edge
    log_prob = offsets.double() * log_keep + math.log(lam) - torch.log(mass)
    return targets + offsets, log_prob.float()


def concat_padded(a: Tensor, a_len: Tensor, b: Tensor, b_len: Tensor, pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """Row-wise concatenation of two right-padded batches: [a_i[:a_len_i], b_i[:b_len_i]] (B, La+Lb), lengths."""
    total = a_len + b_len  # (B,)
    width = int(total.max())
    t = torch.arange(width, device=a.device)[None, :]  # (1, L)
    from_a = t < a_len[:, None]  # (B, L)
    tok_a = a.gather(1, t.clamp(max=a.size(1) - 1).expand(a.size(0), -1))
    tok_b = b.gather(1, (t - a_len[:, None]).clamp(0, b.size(1) - 1))
    tokens = torch.where(from_a, tok_a, tok_b)
    return tokens.masked_fill(t >= total[:, None], pad_id), total


def segment_pairs(stream: Tensor, seg_len: int = 40, gap: int = 10, stride: int | None = None) -> tuple[Tensor, Tensor]:
    """Pairs of segments X = s[i : i+seg_len], Y = s[i+seg_len+gap : i+2*seg_len+gap] (Sec. 5.2).

    ``stride`` between pair starts defaults to ``2*seg_len + gap`` (disjoint pairs). Returns X, Y: (P, seg_len).
    """
    span = 2 * seg_len + gap
    stride = span if stride is None else stride
    if seg_len < 1 or gap < 0 or stride < 1:
        raise InfolmError(f"bad segment pair layout: seg_len={seg_len}, gap={gap}, stride={stride}")
    if stream.numel() < span:
        raise InfolmError(f"stream of {stream.numel()} tokens is shorter than one segment pair ({span})")
    starts = torch.arange(0, stream.numel() - span + 1, stride, device=stream.device)  # (P,)
    offsets = torch.arange(seg_len, device=stream.device)  # (L,)
    x = stream[starts[:, None] + offsets]
    y = stream[starts[:, None] + seg_len + gap + offsets]
    return x, y
