"""IMM for encoders (Muneeb & Ohannessian, Sec. 6 and App. D.2): induced model matching through the
reintroduced MLM task while fine-tuning a BERT-style encoder.

At a location t of a training sentence, the short context is the previous subword x_{t-1}; the
encoder is made to act as a next-word predictor by masking the word at t *and every later word*
(App. D.2), so Q(y | x_{<t}) is its MLM distribution at t. The induced model averages Q over k
extended contexts sampled from the training sentences where the short context occurs (Eq. 15,
k = 5 for BERT, every minibatch); the target is a modified Kneser-Ney bigram of the pretraining text
(App. D.2), restricted to the real subwords (``real_subword_target``); the loss is the cross-entropy of
Eq. 12, in its own gradient-clip group (App. D.2).

Choices where the paper is silent: an extended context of an occurrence at position q of training
sentence i is that sentence's [CLS] x_1..x_q, followed by [MASK] up to its own length and its [SEP]
(the masked future keeps the sentence's length); the IMM passes run without dropout (as the LSTM
IMM of this package); positions can be subsampled per batch (``positions_per_batch``; the paper uses
every location).

Under ``torchrun`` the loss is the mean over every rank's locations (``across_ranks.mean_of_rank_sums``);
``positions_per_batch`` is the whole batch's budget, each rank drawing its share
(``across_ranks.rank_share``) from its own rows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from infolm.data.subwords import SEP_ID, EncoderData, SubwordSentences
from infolm.data.wordpiece import MASK, SPECIALS
from infolm.errors import InfolmError
from infolm.models.base import eval_mode
from infolm.objectives.across_ranks import mean_of_rank_sums, rank_share, world
from infolm.objectives.base import Batch, Objective, Terms, register_objective
from infolm.objectives.imm import crosstalk_induced_cross_entropy, induced_cross_entropy

MASK_ID = SPECIALS.index(MASK)


@dataclasses.dataclass
class IMMMLMConfig:
    weight: float = 0.2  # λ (IMM App. D.2: 0.2 in all language-modelling experiments)
    k: int = 5  # extended contexts per location, every minibatch (App. D.2: k = 5 for BERT)
    method: str = "modified-kn"  # smoothing of the restricted bigram (App. D.2: Kneser-Ney bigram)
    clip: float = 1.0  # norm clip of ∇IMM apart from the main gradient, before λ scales it (App. D.2; BERT clips at 1)
    positions_per_batch: int = 0  # locations per batch, drawn uniformly (0: every location, as App. D.2)
    sample_chunk: int = 5  # samples per crosstalk pass (App. C.2): memory grows with this; >= k: plain autograd

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise InfolmError(f"objective.imm-mlm.weight must be non-negative, got {self.weight}")
        for key in ("k", "sample_chunk"):
            if getattr(self, key) < 1:
                raise InfolmError(f"objective.imm-mlm.{key} must be at least 1, got {getattr(self, key)}")
        if self.positions_per_batch < 0 or self.clip < 0:
            raise InfolmError("objective.imm-mlm.positions_per_batch and clip must be non-negative")


class FollowerIndex:
    """Where each subword occurs with a real subword after it, in a set of [CLS] s [SEP] rows."""

    def __init__(self, sentences: SubwordSentences, vocab_size: int) -> None:
        positions = torch.arange(sentences.rows.size(1))
        valid = positions[None, :] <= sentences.lengths[:, None] - 3  # q + 1 <= len - 2: a real subword follows
        rows, places = torch.nonzero(valid, as_tuple=True)
        keys = sentences.rows[rows, places]
        order = torch.argsort(keys, stable=True)
        self.rows, self.places = rows[order], places[order]  # occurrences grouped by subword
        self.counts = torch.bincount(keys, minlength=vocab_size)  # (V,)
        self.offsets = self.counts.cumsum(0) - self.counts  # (V,)
        self.sentences = sentences

    def sample(self, contexts: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """(P,) short contexts (each with an occurrence) -> (k, P) sentence rows and places, uniformly."""
        counts = self.counts[contexts].double()
        draws = (torch.rand(k, len(contexts), dtype=torch.float64) * counts).long()
        picked = self.offsets[contexts] + draws
        return self.rows[picked], self.places[picked]


def real_subword_target(bigram: Tensor) -> Tensor:
    """P̂(y | x_{t-1}) restricted to the real subwords and renormalised. (P, V) -> (P, V).

    Where the paper is silent: a location is always a real subword between [CLS] and [SEP], so the
    specials are impossible there, yet the bigram of the [CLS] s [SEP] stream gives [SEP] the mass of a
    sentence's end and smoothing gives every type some; that mass goes, in proportion, to the real
    subwords. [UNK] counts among the impossible: in a corpus cut to a fixed vocabulary (PTB's <unk>)
    it stands for words that WordPiece spells as subwords in the fine-tuning text."""
    target = bigram.clone()
    target[:, : len(SPECIALS)] = 0.0  # [PAD] [UNK] [CLS] [SEP] [MASK]: ids 0..4 of every WordPiece vocabulary
    return target / target.sum(-1, keepdim=True)


def future_masked(sentences: SubwordSentences, rows: Tensor, places: Tensor) -> Tensor:
    """Rows of ``sentences`` with every subword after ``places`` replaced by [MASK] (App. D.2). (N, L)."""
    tokens = sentences.rows[rows]  # (N, L)
    positions = torch.arange(tokens.size(1))[None, :]
    future = (positions > places[:, None]) & (positions < sentences.lengths[rows][:, None] - 1)
    return tokens.masked_fill(future, MASK_ID)


@register_objective("imm-mlm", config=IMMMLMConfig)
class IMMMLM(Objective):
    """IMM through the MLM task of an encoder (IMM App. D.2), against a Kneser-Ney bigram."""

    needs = frozenset({"sentences"})
    protocols = frozenset({"encoder"})

    def __init__(self, config: IMMMLMConfig) -> None:
        super().__init__()
        self.config = config
        self.index: FollowerIndex | None = None
        self.restricted: Any = None

    def setup(self, corpus: Any, model: nn.Module) -> None:
        if not isinstance(corpus, EncoderData):
            raise InfolmError("objective imm-mlm needs a task over WordPiece sentences (classification, masked-lm)")
        from infolm.ngram import build_ngram

        self.index = FollowerIndex(corpus.train, corpus.vocab_size)
        stream = corpus.restricted_text().stream()
        self.restricted = build_ngram(stream, corpus.vocab_size, 2, method=self.config.method, history_id=SEP_ID)

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        if self.index is None:
            raise RuntimeError("IMMMLM.setup(data, model) must run before training")
        device = batch.inputs.device
        contexts = self._locations(batch)  # (P,) the subword before each chosen location
        terms = Terms(clip_groups={"imm-mlm": self.config.clip}, metrics={"imm_positions": float(len(contexts))})
        distributed = world()[1] > 1
        if len(contexts) == 0:
            nothing = output.sentence.sum() * 0.0
            terms.losses["imm-mlm"] = mean_of_rank_sums(nothing, 0, empty=0.0) if distributed else nothing
            return terms
        bigram = self.restricted.next_token_distribution(contexts[:, None])  # (P, V) P̂(y | x_{t-1})
        target = real_subword_target(bigram).to(device)  # (P, V) no mass on the specials
        rows, places = self.index.sample(contexts, self.config.k)  # (k, P)
        inputs = future_masked(self.index.sentences, rows.reshape(-1), places.reshape(-1)).to(device)  # (k*P, L)
        read = (places.reshape(-1) + 1).to(device)
        lengths = self.index.sentences.lengths[rows.reshape(-1)]  # (k*P,) on the CPU: each chunk's width
        chunk = min(self.config.sample_chunk, self.config.k)
        num_chunks = -(-self.config.k // chunk)
        num_positions = len(contexts)

        def sample_fn(index: int) -> Tensor:
            part = slice(index * chunk * num_positions, min((index + 1) * chunk, self.config.k) * num_positions)
            # rows cut after the chunk's longest sentence: the cut columns are [PAD] only, keys that get
            # no attention, so the states are those of the full-width rows (and cost less)
            width = int(lengths[part].max())
            with eval_mode(model):
                states = model(inputs[part, :width]).states  # (c*P, width, D)
                picked = states[torch.arange(states.size(0), device=device), read[part]]  # (c*P, D)
                logits = model.mlm_logits(model.mlm_features(picked)).float()  # type: ignore[operator]
            return torch.log_softmax(logits, -1).view(-1, num_positions, logits.size(-1))  # (c, P, V)

        # under torchrun: this rank's sum over its locations (weights of one), divided by every rank's
        # count, so that each location weighs the same whichever rank holds it (one process: the mean)
        weights = torch.ones(num_positions, device=device) if distributed else None
        if num_chunks == 1:
            loss = induced_cross_entropy(target, sample_fn(0), weights)
        else:
            params = [p for p in model.parameters() if p.requires_grad]
            loss = crosstalk_induced_cross_entropy(sample_fn, num_chunks, target, params, weights)
        terms.losses["imm-mlm"] = mean_of_rank_sums(loss, num_positions, empty=0.0) if distributed else loss
        return terms

    def _locations(self, batch: Batch) -> Tensor:
        """The short contexts (previous subwords) of the batch's locations that occur in training."""
        assert self.index is not None
        inputs = batch.inputs.cpu()
        lengths = (inputs != 0).sum(1) if batch.padding_mask is None else batch.padding_mask.cpu().sum(1)
        positions = torch.arange(inputs.size(1))[None, :]
        location = (positions >= 1) & (positions <= lengths[:, None] - 2)  # real subwords after [CLS]
        rows, places = torch.nonzero(location, as_tuple=True)
        contexts = inputs[rows, places - 1]
        contexts = contexts[self.index.counts[contexts] > 0]
        limit = rank_share(self.config.positions_per_batch)  # the batch's budget, split over the ranks
        if self.config.positions_per_batch and len(contexts) > limit:
            contexts = contexts[torch.randperm(len(contexts))[:limit]]
        return contexts
