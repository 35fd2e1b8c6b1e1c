"""Data noising as smoothing (Xie et al. 2017), the baseline of the IMM paper (App. B, Table 2).

Each position t of a batch is noised with probability ``gamma(x_t) = gamma0 * N1+(x_t, .) / c(x_t)``,
where ``x_t`` is the input token (the context of target ``t``), ``N1+(x, .)`` the number of distinct
tokens that follow ``x`` in the training stream and ``c(x)`` the number of tokens that follow it:
the absolute-discounting schedule of Xie et al. Sec. 3.3 (IMM App. B: ``gamma(y_-)``). A noised
position has its input and/or its target replaced by

* ``blank``: a placeholder token (inputs only). Xie et al. add an extra ``<_>`` embedding row;
  infolm models have a fixed vocabulary, so the vocabulary's ``<_>`` is used if it has one, else
  ``<unk>``;
* ``unigram``: a sample from the unigram distribution ``c(x) / N``;
* ``bigram-kn``: a sample from the Kneser-Ney continuation distribution ``N1+(., x) / N1+(., .)``
  (Xie et al.'s "bigram Kneser-Ney noising", which replaces input and target alike).

Input and target replacements of one position share the Bernoulli draw and are sampled
independently, as in Xie et al.'s code. The term runs the model on the noised batch (from
``batch.state``; the shared clean output is not used) and returns its cross-entropy, named
``noising``; it replaces ``mle``: ``objective: {noising: {weight: 1.0, gamma0: 0.2}}``.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import torch
from torch import Tensor, nn

from infolm.data.batching import IGNORE_INDEX
from infolm.errors import InfolmError
from infolm.objectives.base import Batch, Objective, Terms, register_objective
from infolm.objectives.mle import token_cross_entropy

log = logging.getLogger(__name__)

MODES = ("blank", "unigram", "bigram-kn")
BLANK_TOKENS = ("<_>", "<unk>")  # placeholder for blank noising, in order of preference


@dataclasses.dataclass
class NoisingConfig:
    weight: float = 1.0  # multiplier in the Composite (noising replaces mle: use it alone)
    gamma0: float = 0.2  # base noising probability (Xie et al. 2017; IMM App. B quotes 0.2 and 0.6)
    mode: str = "bigram-kn"  # blank | unigram | bigram-kn (proposal distribution q, Xie et al. Sec. 3)
    noise_inputs: bool = True  # replace the input token of a noised position
    noise_targets: bool | None = None  # replace the target too; None: as Xie et al. (only for bigram-kn)
    discount: bool = True  # gamma(x) = gamma0 N1+(x, .) / c(x) (Xie et al. Sec. 3.3); false: gamma0 everywhere

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InfolmError(f"objective.noising.mode must be one of {', '.join(MODES)}; got {self.mode!r}")
        if not 0.0 <= self.gamma0 <= 1.0:
            raise InfolmError(f"objective.noising.gamma0 must be in [0, 1], got {self.gamma0}")
        if self.weight < 0:
            raise InfolmError(f"objective.noising.weight must be non-negative, got {self.weight}")
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


@register_objective("noising", config=NoisingConfig)
class Noising(Objective):
    """Cross-entropy of the model on a noised copy of the batch (Xie et al. 2017)."""

    gamma: Tensor
    proposal: Tensor

    def __init__(self, config: NoisingConfig) -> None:
        super().__init__()
        self.config = config
        self.blank_id: int | None = None
        self.register_buffer("gamma", torch.zeros(0), persistent=False)  # (V,) noising probability per token
        self.register_buffer("proposal", torch.zeros(0), persistent=False)  # (V,) q, the replacement distribution

    def setup(self, corpus: Any, model: nn.Module) -> None:
        from infolm.ngram import count_ngrams

        vocab_size = len(corpus.vocab)
        if getattr(model, "vocab_size", vocab_size) != vocab_size:
            raise InfolmError(f"objective.noising: the model has {model.vocab_size} tokens, the corpus {vocab_size}")
        counts = count_ngrams(corpus.stream("train"), vocab_size, 2)
        config = self.config
        if config.discount:
            gamma = noising_probabilities(
                torch.from_numpy(counts.context_counts()),
                torch.from_numpy(counts.distinct_continuations()),
                config.gamma0,
            )
        else:
            gamma = torch.full((vocab_size,), config.gamma0)
        if config.mode == "unigram":
            weights = torch.from_numpy(counts.raw(1)).double()  # c(x)
        else:
            weights = torch.from_numpy(counts.distinct_histories()).double()  # N1+(., x)
        if config.mode == "blank":
            blank = next((t for t in BLANK_TOKENS if t in corpus.vocab), None)
            if blank is None:
                raise InfolmError("objective.noising.mode=blank needs a <_> or <unk> token in the vocabulary")
            if blank != BLANK_TOKENS[0]:
                log.info("noising: the vocabulary has no <_>; blank noising uses %s", blank)
            self.blank_id = corpus.vocab.stoi[blank]
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

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        inputs, targets = batch.inputs, batch.targets
        noised_fraction = 0.0
        if self.config.gamma0 > 0:
            inputs, targets, drawn = self.noise(inputs, targets)
            noised_fraction = float(drawn.sum()) / max(int((targets != IGNORE_INDEX).sum()), 1)
        noised_output = model(inputs, batch.state)  # the main pass on the noised data
        loss = token_cross_entropy(noised_output.logits, targets)
        tokens = int((targets != IGNORE_INDEX).sum())
        return Terms(losses={"noising": loss}, metrics={"noised_fraction": noised_fraction}, tokens=tokens)
