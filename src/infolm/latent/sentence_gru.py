"""The SentenceMIM / sentence-VAE architecture (Livne et al. Sec. 2.1 and 4.2, after Bowman et al. 2015).

Encoder: word embeddings -> 1-layer GRU reading the sentence right to left -> linear heads for the
mean and the log-variance of a diagonal Gaussian q(z|x) (Eq. 3), the log-variance clamped from below.
Decoder: a 1-layer GRU whose initial state is a linear map of z and whose every input is the
previous word's embedding concatenated with z; a linear softmax layer over the vocabulary (Eq. 1).
Prior p(z) = N(0, I), the anchor P(z) of A-MIM. One embedding matrix serves encoder and decoder,
which gives the paper's parameter counts (11M / 11M / 12M for latent 16 / 128 / 512 on PTB).

Sentences are ``tokens`` (B, T): the words of each sentence followed by ``<eos>``, right-padded;
``lengths`` (B,) count the words and the ``<eos>``. The encoder reads the words (not ``<eos>``).
The decoder starts from a learned ``<sos>`` embedding (the paper's x^0) and predicts the words and
``<eos>``, which ends the sentence. With ``length_prior`` the decoder is Eq. 2 instead:
p(x|z) = p_seq(x|z) p(T), where p_seq never emits ``<eos>`` (its softmax excludes it, so it sums to
one over the sentences of each length) and p(T) is the training sentences' length distribution.
The paper's p(T) stops at T_max (Sec. 2); ours gives the lengths from ``max_length`` on the mass of its
last bin, spread geometrically (``length_tail``), so that a test sentence longer than any training
sentence keeps a finite likelihood and p(x|z) still sums to one over all lengths.

Word dropout (Bowman et al. 2015; SentenceMIM App. D.4): in training, each input word of the encoder
and of the decoder is replaced by ``<unk>`` with its own rate; ``<sos>``, ``<eos>`` and the padding
are never replaced, and the targets the decoder scores are the true words.

K latent samples per sentence are folded into the batch: ``log_likelihood`` scores z (K, B, D) in
one decoder pass of K * B rows.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributions import Distribution, Independent, Normal

from infolm.errors import InfolmError
from infolm.latent.base import LatentVariableModel
from infolm.latent.softmax import token_log_likelihood
from infolm.models.base import register_model


@dataclasses.dataclass
class SentenceGRUConfig:
    emb: int = 300  # word embedding size (Sec. 4.2, PTB: 300)
    hidden: int = 512  # GRU hidden size of the encoder and the decoder (Sec. 4.2, PTB: 512)
    latent: int = 16  # latent dimension d (Sec. 4.2, PTB: 16 / 128 / 512)
    dropout_embedding: float = 0.5  # dropout on the decoder's input embeddings (Sec. 4.2: "50% embedding dropout")
    # dropout on the encoder's input embeddings: the paper does not say; the authors' code applies the
    # embedding dropout to the decoder's inputs only
    dropout_encoder: float = 0.0
    min_log_var: float = -10.0  # lower clamp of the posterior log-variance (the authors' public code: -10)
    reverse_encoder: bool = True  # the encoder reads the sentence right to left (Sec. 4.2, after Sutskever et al.)
    length_prior: bool = False  # Eq. 2: p(x|z) = p_seq(x|z) p(T), <eos> not modelled; off: <eos> ends sentences
    max_length: int = 200  # longest sentence (words) the length prior p(T) has a bin of its own for
    # ratio ρ of the geometric tail of p(T) (ours; the paper's p(T) ends at T_max): the last bin holds
    # P(T >= max_length), and p(T = t) = P(T >= max_length) (1 - ρ) ρ^(t - max_length) for t >= max_length
    length_tail: float = 0.5
    # word dropout (<unk> replacement) of the encoder's input words: App. D.4 uses 0.2 for the Yahoo
    # Answers model of its question answering; the PTB recipe (Sec. 4.2) names none, so 0 here
    word_dropout_encoder: float = 0.0
    # word dropout of the decoder's input words (Bowman et al. 2015); SentenceMIM names none: 0
    word_dropout_decoder: float = 0.0

    def __post_init__(self) -> None:
        for key in ("emb", "hidden", "latent", "max_length"):
            if getattr(self, key) < 1:
                raise InfolmError(f"model.{key} must be positive, got {getattr(self, key)}")
        for key in ("dropout_embedding", "dropout_encoder", "word_dropout_encoder", "word_dropout_decoder"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise InfolmError(f"model.{key} must be in [0, 1), got {getattr(self, key)}")
        if not 0.0 < self.length_tail < 1.0:
            raise InfolmError(f"model.length_tail must be in (0, 1), got {self.length_tail}")


def reverse_padded(tokens: Tensor, lengths: Tensor, pad: int) -> Tensor:
    """Reverse the first ``lengths[b]`` entries of each row, keep the padding on the right. (B, T)."""
    positions = torch.arange(tokens.size(1), device=tokens.device)  # (T,)
    index = (lengths.unsqueeze(1) - 1 - positions).clamp(min=0)  # (B, T)
    reversed_tokens = tokens.gather(1, index)
    return torch.where(positions < lengths.unsqueeze(1), reversed_tokens, torch.full_like(tokens, pad))


def replace_words(tokens: Tensor, words: Tensor, rate: float, unk_id: int) -> Tensor:
    """Word dropout: each position where ``words`` (B, T) is true becomes ``unk_id`` with probability
    ``rate``, independently (torch's global generator, as dropout). (B, T)."""
    if rate == 0.0:
        return tokens
    dropped = words & (torch.rand(tokens.shape, device=tokens.device) < rate)
    return tokens.masked_fill(dropped, unk_id)


@register_model("sentence-gru", config=SentenceGRUConfig)  # type: ignore[arg-type]
class SentenceGRU(LatentVariableModel):
    """Bowman et al.'s sentence auto-encoder: GRU encoder -> Gaussian z -> GRU decoder fed z at every step."""

    log_length_prior: Tensor  # (max_length + 1,) ln p(T), a buffer (Eq. 2)

    def __init__(self, config: SentenceGRUConfig, vocab_size: int, eos_id: int = 0, unk_id: int | None = None) -> None:
        """``eos_id``: the id of ``<eos>``, the vocabulary's (``build_model`` passes it; 0 in infolm's ``Vocab``);
        ``unk_id``: the id of ``<unk>`` (``build_model`` passes the vocabulary's), needed by word dropout."""
        super().__init__()
        if unk_id is None and (config.word_dropout_encoder > 0 or config.word_dropout_decoder > 0):
            raise InfolmError("model.word_dropout_encoder / word_dropout_decoder need a vocabulary with <unk>")
        self.config = config
        self.vocab_size = vocab_size
        self.eos_id = eos_id
        self.unk_id = unk_id
        self.latent_dim = config.latent
        self.embedding = nn.Embedding(vocab_size, config.emb)
        self.sos = nn.Parameter(torch.empty(config.emb).normal_())  # x^0 = <SOS> (Eq. 1)
        self.dropout = nn.Dropout(config.dropout_embedding)  # the decoder's inputs
        self.encoder_dropout = nn.Dropout(config.dropout_encoder)
        self.encoder = nn.GRU(config.emb, config.hidden, batch_first=True)
        self.to_mean = nn.Linear(config.hidden, config.latent)
        self.to_log_var = nn.Linear(config.hidden, config.latent)
        self.latent_to_hidden = nn.Linear(config.latent, config.hidden)
        self.decoder = nn.GRU(config.emb + config.latent, config.hidden, batch_first=True)
        self.output = nn.Linear(config.hidden, vocab_size)
        # log p(T) for T = 0..max_length (Eq. 2); uniform until fit_length_prior sees the training lengths
        uniform = torch.full((config.max_length + 1,), -float("inf"))
        uniform[1:] = -torch.log(torch.tensor(float(config.max_length)))
        self.register_buffer("log_length_prior", uniform)

    # -- encoder -------------------------------------------------------------------------------
    def encode(self, tokens: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """Posterior mean and log-variance (B, D) of the sentences ``tokens`` (B, T)."""
        words = (lengths - 1).clamp(min=0)  # the encoder reads the words, not <eos>
        if self.training and self.config.word_dropout_encoder > 0:
            assert self.unk_id is not None
            is_word = torch.arange(tokens.size(1), device=tokens.device) < words.unsqueeze(1)  # (B, T)
            tokens = replace_words(tokens, is_word, self.config.word_dropout_encoder, self.unk_id)
        inputs = reverse_padded(tokens, words, self.eos_id) if self.config.reverse_encoder else tokens
        x = self.encoder_dropout(self.embedding(inputs))  # (B, T, E)
        out, _ = self.encoder(x)  # (B, T, H)
        last = (words - 1).clamp(min=0)
        h = out.gather(1, last.view(-1, 1, 1).expand(-1, 1, out.size(2))).squeeze(1)  # (B, H)
        h = torch.where((words > 0).unsqueeze(1), h, torch.zeros_like(h))  # no words: the initial state
        mean = self.to_mean(h)
        log_var = self.to_log_var(h).clamp(min=self.config.min_log_var)  # (B, D), clamp as the authors' code
        return mean, log_var

    def posterior(self, tokens: Tensor, lengths: Tensor) -> Distribution:
        """q(z|x) = N(mu(x), diag sigma^2(x)) (Eq. 3), batch shape (B,), event shape (D,)."""
        mean, log_var = self.encode(tokens, lengths)
        # parameters valid by construction (exp > 0): no per-call argument checks on the hot path
        return Independent(Normal(mean, torch.exp(0.5 * log_var), validate_args=False), 1, validate_args=False)

    def prior(self) -> Distribution:
        """p(z) = N(0, I): the A-MIM anchor P(z) and the sVAE prior; event shape (D,)."""
        zeros = self.to_mean.bias.new_zeros(self.latent_dim)
        return Independent(Normal(zeros, torch.ones_like(zeros), validate_args=False), 1, validate_args=False)

    # -- decoder -------------------------------------------------------------------------------
    def decoder_inputs(self, tokens: Tensor) -> Tensor:
        """Embeddings of x^0..x^{T-1}: <sos> then every token but the last; in training, the input words
        replaced by ``<unk>`` at ``word_dropout_decoder`` (the padding is ``<eos>``: never replaced). (B, T, E)."""
        previous = tokens[:, :-1]  # (B, T-1)
        if self.training and self.config.word_dropout_decoder > 0:
            assert self.unk_id is not None
            previous = replace_words(previous, previous != self.eos_id, self.config.word_dropout_decoder, self.unk_id)
        emb = self.embedding(previous)  # (B, T-1, E)
        sos = self.sos.view(1, 1, -1).expand(tokens.size(0), 1, -1)
        return self.dropout(torch.cat([sos, emb], dim=1))

    def decode_hidden(self, inputs: Tensor, z: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Decoder outputs (N, T, H) and last state (1, N, H) on input embeddings (N, T, E) conditioned
        on z (N, D): every input is concatenated with z; the initial state is a linear map of z
        unless ``state`` is given."""
        if state is None:
            state = self.latent_to_hidden(z).unsqueeze(0)  # (1, N, H)
        x = torch.cat([inputs, z.unsqueeze(1).expand(-1, inputs.size(1), -1)], dim=2)  # (N, T, E + D)
        return self.decoder(x, state)

    def _logits(self, hidden: Tensor) -> Tensor:
        """Softmax scores over the vocabulary; ``<eos>`` excluded under the length prior (Eq. 2)."""
        logits = self.output(hidden)
        if self.config.length_prior:
            logits = logits.index_fill(-1, torch.tensor([self.eos_id], device=logits.device), -float("inf"))
        return logits

    def decode_logits(self, inputs: Tensor, z: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Logits (N, T, V) and the last state (1, N, H) of the decoder (see ``decode_hidden``)."""
        out, state = self.decode_hidden(inputs, z, state)
        return self._logits(out), state

    def log_likelihood(self, tokens: Tensor, lengths: Tensor, z: Tensor) -> Tensor:
        """ln p(x|z) for z (K, B, D) -> (K, B): Eq. 1 (with ``<eos>``), or Eq. 2 with ``length_prior``."""
        return self.log_likelihood_terms(tokens, lengths, z)[0]

    def log_likelihood_terms(self, tokens: Tensor, lengths: Tensor, z: Tensor) -> tuple[Tensor, Tensor | None]:
        """ln p(x|z) (K, B) and the term of each sentence's ``<eos>`` (K, B) (None with ``length_prior``,
        which scores the words and p(T) instead): Sec. 4.3 removes ``<eos>`` when it evaluates.

        The K samples are folded into the batch: one decoder pass over K * B rows; the softmax
        scores the real positions only, in blocks (``latent/softmax.py``)."""
        k, b, d = z.shape
        inputs = self.decoder_inputs(tokens)  # (B, T, E), computed once for the K samples
        inputs = inputs.unsqueeze(0).expand(k, -1, -1, -1).reshape(k * b, inputs.size(1), inputs.size(2))
        hidden, _ = self.decode_hidden(inputs, z.reshape(k * b, d))  # (K*B, T, H)
        scored = self.scored_tokens(lengths)  # Eq. 2 scores the words only
        where = (torch.arange(tokens.size(1), device=tokens.device) < scored.unsqueeze(1)).repeat(k, 1)  # (K*B, T)
        targets = tokens.repeat(k, 1)[where]  # (N,)
        if self.config.length_prior:
            scores = F.log_softmax(self._logits(hidden[where]).float(), dim=-1).gather(1, targets.unsqueeze(1))[:, 0]
        else:
            scores = token_log_likelihood(hidden[where], self.output, targets)
        # per-token scores kept and summed in float32 whatever the decoder's dtype (bf16 would round a
        # sentence's sum of ~20 terms of a few nats to ~0.1 nats)
        per_token = hidden.new_zeros(k * b, tokens.size(1), dtype=torch.float32).masked_scatter(where, scores.float())
        lp = per_token.sum(1).view(k, b)
        if self.config.length_prior:
            return lp + self.log_length_probability(scored), None  # + ln p(T) (B,) on every draw, Eq. 2
        last = (lengths - 1).clamp(min=0).repeat(k).unsqueeze(1)  # (K*B, 1): the <eos> of each row
        return lp, per_token.gather(1, last).view(k, b)

    def scored_tokens(self, lengths: Tensor) -> Tensor:
        """Positions ln p(x|z) scores per sentence: words and ``<eos>``, or the words alone with p(T)."""
        return lengths - 1 if self.config.length_prior else lengths

    def log_length_probability(self, words: Tensor) -> Tensor:
        """ln p(T) of word counts ``words`` (B,): the bin of T below ``max_length``; from ``max_length`` on,
        the last bin's mass P(T >= max_length) times the geometric tail (1 - ρ) ρ^(T - max_length), so
        that p(T) sums to one over all T >= 1 (the length prior of Eq. 2, extended; ρ = ``length_tail``)."""
        last = self.config.max_length
        rho = self.config.length_tail
        binned = self.log_length_prior[words.clamp(max=last)]
        excess = (words - last).clamp(min=0).to(binned.dtype)
        tail = math.log1p(-rho) + excess * math.log(rho)
        return torch.where(words >= last, binned + tail, binned)

    def fit_corpus(self, corpus: Any) -> None:
        """Before training: p(T) from the training sentences' word counts, when the length prior is on."""
        if self.config.length_prior:
            offsets = torch.from_numpy(corpus.sentence_offsets("train"))
            self.fit_length_prior(offsets.diff() - 1)  # words per line (its <eos> not counted)

    def fit_length_prior(self, word_counts: Tensor) -> None:
        """Set p(T) to the empirical distribution of the training sentences' word counts (Eq. 2),
        with add-one smoothing over 1..max_length so unseen lengths keep a finite likelihood; the last
        bin counts the sentences of ``max_length`` words or more (``log_length_probability``)."""
        counts = torch.bincount(word_counts.clamp(max=self.config.max_length), minlength=self.config.max_length + 1)
        counts = counts[: self.config.max_length + 1].double()
        counts[1:] += 1.0
        counts[0] = 0.0
        self.log_length_prior.copy_(torch.log(counts / counts.sum()).float())

    # -- generation ----------------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self,
        z: Tensor,
        max_length: int | None = None,
        greedy: bool = True,
        generator: torch.Generator | None = None,
        banned: list[int] | None = None,
        lengths: Tensor | None = None,
    ) -> list[list[int]]:
        """Sentences (token ids, no ``<eos>``) decoded from z (N, D): greedy (argmax) or sampled.

        Without the length prior a sentence ends at ``<eos>`` or after ``max_length`` words; with it,
        T words are produced: ``lengths`` (N,) when given (a reconstruction at the observed length),
        else T drawn from p(T)'s bins (its mode when greedy; the top bin gives ``max_length`` words),
        capped at ``max_length`` when that is given. ``banned`` token ids are never produced (the paper
        bans ``<unk>`` when generating answers, Sec. 4.6)."""
        limit = max_length or self.config.max_length
        n = z.size(0)
        if self.config.length_prior:
            if lengths is not None:
                targets = lengths.to(z.device)
            else:
                probs = self.log_length_prior.exp()
                if greedy:
                    targets = torch.full((n,), int(probs.argmax()), device=z.device)
                else:
                    targets = torch.multinomial(probs.expand(n, -1), 1, generator=generator).squeeze(1)
                targets = targets.clamp(max=limit)
            limit = int(targets.max()) if n else 0
        inputs = self.sos.view(1, 1, -1).expand(n, 1, -1)
        state: Tensor | None = None
        out = torch.empty(n, 0, dtype=torch.long, device=z.device)
        ended = torch.zeros(n, dtype=torch.bool, device=z.device)
        for _ in range(limit):
            logits, state = self.decode_logits(inputs, z, state)
            logits = logits[:, -1].float()  # (N, V)
            if banned:
                logits[:, banned] = -float("inf")
            if greedy:
                nxt = logits.argmax(dim=1)
            else:
                nxt = torch.multinomial(torch.softmax(logits, dim=1), 1, generator=generator).squeeze(1)
            out = torch.cat([out, nxt.unsqueeze(1)], dim=1)
            ended |= nxt == self.eos_id
            if not self.config.length_prior and bool(ended.all()):
                break
            inputs = self.embedding(nxt).unsqueeze(1)
        sentences = []
        for row in range(n):
            ids = out[row].tolist()
            if self.config.length_prior:
                ids = ids[: int(targets[row])]
            elif self.eos_id in ids:
                ids = ids[: ids.index(self.eos_id)]
            sentences.append(ids)
        return sentences
