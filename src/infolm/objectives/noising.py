"""Data noising as smoothing (Xie et al. 2017), the baseline of the IMM paper (App. B, Table 2).

Each position t of a batch is noised with probability ``gamma(x_t)``, where ``x_t`` is the input
token (the context of target ``t``), on one of three schedules (``schedule``):

* ``absolute`` (Xie et al. Sec. 3.3): ``gamma0 * N1+(x, .) / c(x)``, with ``N1+(x, .)`` the number of
  distinct tokens that follow ``x`` in the training stream and ``c(x)`` the number of tokens that do;
* ``kneser-ney``: ``gamma0 * nu(x)`` with ``nu(x) = (D1 N1(x, .) + D2 N2(x, .) + D3+ N3+(x, .)) / c(x)``,
  the missing mass of the modified Kneser-Ney bigram (IMM App. B: ``gamma(y_-) = lambda nu(y_-)``);
* ``constant``: ``gamma0`` everywhere.

A noised position has its input and/or its target replaced by

* ``blank``: the placeholder ``<_>`` (inputs only), a token of its own as in Xie et al.: add it to the
  vocabulary with ``data.extra_tokens: ["<_>"]`` (it never occurs in the text);
* ``unigram``: a sample from the unigram distribution ``c(x) / N``;
* ``bigram-kn``: a sample from the Kneser-Ney continuation distribution ``N1+(., x) / N1+(., .)``
  (Xie et al.'s "bigram Kneser-Ney noising", which replaces input and target alike).

Input and target replacements of one position share the Bernoulli draw and are sampled
independently, as in Xie et al.'s code. The noising happens in ``transform_batch``, before the
trainer's one forward pass: the model runs once, on the noised batch, and the recurrent state carried
to the next batch is that of the noised pass. The term is the cross-entropy of that pass against the
(noised) targets, named ``noising``; it replaces ``mle``: ``objective: {noising: {weight: 1.0}}``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from infolm.data.batching import IGNORE_INDEX
from infolm.errors import InfolmError
from infolm.objectives.base import Batch, Objective, Terms, register_objective
from infolm.objectives.mle import token_cross_entropy

MODES = ("blank", "unigram", "bigram-kn")
SCHEDULES = ("absolute", "kneser-ney", "constant")
BLANK = "<_>"  # the placeholder of blank noising (Xie et al. 2017)


@dataclasses.dataclass
class NoisingConfig:
    weight: float = 1.0  # multiplier in the Composite (noising replaces mle: use it alone)
    gamma0: float = 0.2  # base noising probability (Xie et al. 2017; IMM App. B quotes 0.2 and 0.6)
    mode: str = "bigram-kn"  # blank | unigram | bigram-kn (proposal distribution q, Xie et al. Sec. 3)
    noise_inputs: bool = True  # replace the input token of a noised position
    noise_targets: bool | None = None  # replace the target too; None: as Xie et al. (only for bigram-kn)
    schedule: str = "absolute"  # gamma(x): absolute (Xie et al. Sec. 3.3) | kneser-ney (IMM App. B) | constant

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InfolmError(f"objective.noising.mode must be one of {', '.join(MODES)}; got {self.mode!r}")
        if not 0.0 <= self.gamma0 <= 1.0:
            raise InfolmError(f"objective.noising.gamma0 must be in [0, 1], got {self.gamma0}")
        if self.weight < 0:
            raise InfolmError(f"objective.noising.weight must be non-negative, got {self.weight}")
        if self.schedule not in SCHEDULES:
            raise InfolmError(
                f"objective.noising.schedule must be one of {', '.join(SCHEDULES)}; got {self.schedule!r}"
            )
        if self.noise_targets is None:
            self.noise_targets = self.mode == "bigram-kn"
        if self.mode == "blank" and self.noise_targets:
            raise InfolmError("objective.noising.noise_targets cannot be true with mode=blank (a blank is not a word)")
        if not (self.noise_inputs or self.noise_targets):
            raise InfolmError("objective.noising must noise inputs, targets or both")


def noising_probabilities(context_counts: Tensor, distinct_continuations: Tensor, gamma0: float) -> Tensor:
    """gamma(x) = gamma0 * N1+(x, .) / c(x); 0 for tokens never followed by another. (V,) float."""
    counts = context_counts.double()
    return torch.where(counts > 0, gamma0 * distinct_continuations.double() / counts.clamp(min=1), 0.0).float()


def kneser_ney_missing_mass(
    prefix: Tensor, count: Tensor, discounts: tuple[float, float, float], vocab_size: int
) -> Tensor:
    """nu(x) = (D1 N1(x, .) + D2 N2(x, .) + D3+ N3+(x, .)) / c(x) of a modified-KN bigram, (V,) float.

    ``prefix`` (M,) and ``count`` (M,): the context token and the count of each distinct bigram;
    ``discounts``: (D1, D2, D3+). 0 for tokens never followed by another.
    """
    table = torch.tensor(discounts, dtype=torch.float64)
    discount = table[count.clamp(max=3) - 1]  # (M,) D_min(c, 3)
    mass = torch.zeros(vocab_size, dtype=torch.float64).index_add_(0, prefix, discount)
    total = torch.zeros(vocab_size, dtype=torch.float64).index_add_(0, prefix, count.double())
    return torch.where(total > 0, mass / total.clamp(min=1), 0.0).float()


@register_objective("noising", config=NoisingConfig)
class Noising(Objective):
    """Cross-entropy of the model on a noised copy of the batch (Xie et al. 2017)."""

    gamma: Tensor
    proposal: Tensor

    def __init__(self, config: NoisingConfig) -> None:
        super().__init__()
        self.config = config
        self.blank_id: int | None = None
        self._noised_fraction = 0.0
        self.register_buffer("gamma", torch.zeros(0), persistent=False)  # (V,) noising probability per token
        self.register_buffer("proposal", torch.zeros(0), persistent=False)  # (V,) q, the replacement distribution

    def setup(self, corpus: Any, model: nn.Module) -> None:
        from infolm.ngram import count_ngrams

        vocab_size = len(corpus.vocab)
        if getattr(model, "vocab_size", vocab_size) != vocab_size:
            raise InfolmError(f"objective.noising: the model has {model.vocab_size} tokens, the corpus {vocab_size}")
        counts = count_ngrams(corpus.stream("train"), vocab_size, 2)
        config = self.config
        if config.schedule == "absolute":
            gamma = noising_probabilities(
                torch.from_numpy(counts.context_counts()),
                torch.from_numpy(counts.distinct_continuations()),
                config.gamma0,
            )
        elif config.schedule == "kneser-ney":
            from infolm.ngram.smoothing import estimate_discounts

            bigram_counts = counts.raw(2)
            discounts, _ = estimate_discounts(bigram_counts, "modified-kn")
            prefix = torch.from_numpy(counts.orders[0].prefix)
            nu = kneser_ney_missing_mass(prefix, torch.from_numpy(bigram_counts), discounts, vocab_size)
            gamma = config.gamma0 * nu
        else:
            gamma = torch.full((vocab_size,), config.gamma0)
        if config.mode == "unigram":
            weights = torch.from_numpy(counts.raw(1)).double()  # c(x)
        else:
            weights = torch.from_numpy(counts.distinct_histories()).double()  # N1+(., x)
        if config.mode == "blank":
            if BLANK not in corpus.vocab:
                raise InfolmError(
                    f"objective.noising.mode=blank needs the placeholder {BLANK} in the vocabulary: "
                    f'add data.extra_tokens=["{BLANK}"]'
                )
            self.blank_id = corpus.vocab.stoi[BLANK]
        device = self.gamma.device
        self.gamma = gamma.to(device)
        self.proposal = (weights / weights.sum()).float().to(device)

    def _sample(self, count: int, device: torch.device) -> Tensor:
        if self.config.mode == "blank":
            assert self.blank_id is not None
            return torch.full((count,), self.blank_id, dtype=torch.long, device=device)
        return torch.multinomial(self.proposal.to(device), count, replacement=True)

    def noise(self, inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Noised copies of ``inputs`` and ``targets`` (B, T) and the (B, T) mask of noised positions."""
        if self.gamma.numel() == 0:
            raise RuntimeError("Noising.setup(corpus, model) must run before training")
        valid = targets != IGNORE_INDEX
        drawn = torch.rand(inputs.shape, device=inputs.device) < self.gamma.to(inputs.device)[inputs]  # gamma(x_t)
        drawn &= valid
        count = int(drawn.sum())
        if count:
            if self.config.noise_inputs:
                inputs = inputs.masked_scatter(drawn, self._sample(count, inputs.device))
            if self.config.noise_targets:
                targets = targets.masked_scatter(drawn, self._sample(count, targets.device))
        return inputs, targets, drawn

    def transform_batch(self, batch: Batch) -> Batch:
        """The noised batch, which the trainer's single forward pass then reads (training only)."""
        self._noised_fraction = 0.0
        if self.config.gamma0 == 0 or not self.training:
            return batch
        inputs, targets, drawn = self.noise(batch.inputs, batch.targets)
        self._noised_fraction = float(drawn.sum()) / max(int((targets != IGNORE_INDEX).sum()), 1)
        return dataclasses.replace(batch, inputs=inputs, targets=targets)

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        """Cross-entropy of the shared pass, which ran on ``transform_batch``'s noised batch."""
        loss = token_cross_entropy(output.logits, batch.targets)
        tokens = int((batch.targets != IGNORE_INDEX).sum())
        metrics = {"noised_fraction": self._noised_fraction}
        return Terms(losses={"noising": loss}, metrics=metrics, tokens=tokens)
