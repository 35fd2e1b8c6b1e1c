"""The PTB sentence model of Melis's thesis, Sec. 5.7.2.

Encoder: embedding -> one-layer bidirectional LSTM; o is the mean of the two directions' final
states, and q(z|x) is computed from o as in the synthetic model (40 Gaussian latents or 8 x 10
categorical). Decoder: a unidirectional LSTM whose input at every step is the previous token's
embedding concatenated with z (categorical latents embedded first); the first input is a learned
start vector. Embedding and hidden sizes 128 (Table 5.1 also uses 256).

Dropout (Sec. 5.7.2, Figs. 5.10-5.12, Table 5.2): the decoder's three rates. On its input
embeddings and on its outputs, one mask per sentence over time (locked, Gal & Ghahramani 2016); on
its recurrent state, the variational M^state of Sec. 4.2 and App. 5.C: the state from the previous
step, h_{t-1}, is read as h_{t-1} * M^state, one mask per sentence fixed over time. With
``shared_dropout_mask`` all K latent draws of a sentence use the same masks (Fig. 5.12); otherwise
every draw has its own ("naive dropout", Fig. 5.10).

The decoder is one ``nn.LSTM`` (fused, fast). State dropout needs the state between steps, so in
training with ``dropout_state`` > 0 the same weights run through the step-by-step LSTM of
``models/cells.py`` (``lstm_sequence``, gate rows reordered by ``torch_lstm_weights``), which reads
h_{t-1} through the mask; without a mask (``dropout_state`` 0, or evaluation) the fused path runs.
The two paths compute the same function, and the parameters keep ``nn.LSTM``'s names.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn
from torch.distributions import Distribution
from torch.nn.utils.rnn import pack_padded_sequence

from infolm.errors import InfolmError
from infolm.latent.base import LatentVariableModel
from infolm.latent.softmax import token_log_likelihood
from infolm.latent.synthetic import LatentFamilyConfig, build_latent
from infolm.models.base import register_model
from infolm.models.cells import lstm_sequence, torch_lstm_weights
from infolm.models.dropout import uniform_init_


@dataclasses.dataclass
class SentenceLSTMConfig(LatentFamilyConfig):
    embedding: int = 128  # token embedding size (Sec. 5.7.2)
    hidden: int = 128  # encoder (per direction) and decoder LSTM size (Table 5.1: 128 and 256)
    latent_embedding: int = 128  # size categorical latents are embedded to before the decoder (ours)
    dropout_input: float = 0.0  # decoder input-embedding dropout (Table 5.2: 0..0.9)
    dropout_output: float = 0.0  # decoder output dropout before the softmax (Table 5.2: 0..0.95)
    # variational dropout of the decoder's h_{t-1}, one mask per sentence (Table 5.2: 0..0.8; Sec. 4.2 M^state);
    # > 0 runs the decoder step by step in training (slower, docs/notebook/thesis-ch5.md)
    dropout_state: float = 0.0
    shared_dropout_mask: bool = True  # one dropout mask for all latent draws of a sentence (Fig. 5.12)
    # the decoder's softmax shares the decoder's input embedding (ch. 5 does not say; the thesis ties them
    # for its word-level LMs, Sec. 2.A); needs hidden == embedding
    tie_weights: bool = False
    # every parameter ~ U(-init_range, init_range), as the sentence LM baseline (model lstm: 0.1, Zaremba et al.
    # 2014); 0 keeps PyTorch's defaults (embeddings N(0, 1)). Ch. 5 does not say how it initializes.
    init_range: float = 0.0

    def __post_init__(self) -> None:
        self.check_latents()
        if not (self.init_range >= 0.0 and math.isfinite(self.init_range)):
            raise InfolmError(f"model.init_range must be a finite number >= 0, got {self.init_range}")
        if self.tie_weights and self.hidden != self.embedding:
            raise InfolmError(
                f"model.tie_weights needs model.hidden == model.embedding, got {self.hidden} and {self.embedding}"
            )
        for key in ("embedding", "hidden", "latent_embedding"):
            if getattr(self, key) < 1:
                raise InfolmError(f"model.{key} must be at least 1, got {getattr(self, key)}")
        for key in ("dropout_input", "dropout_state", "dropout_output"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise InfolmError(f"model.{key} must be in [0, 1), got {getattr(self, key)}")


@register_model("latent-sentence-lstm", config=SentenceLSTMConfig)  # type: ignore[arg-type]
class SentenceLSTMModel(LatentVariableModel):
    """Thesis Sec. 5.7.2: BiLSTM encoder, LSTM decoder fed z at every step."""

    def __init__(self, config: SentenceLSTMConfig, vocab_size: int) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        self.encoder_embedding = nn.Embedding(vocab_size, config.embedding)
        self.encoder = nn.LSTM(config.embedding, config.hidden, batch_first=True, bidirectional=True)
        self.latent = build_latent(config, config.hidden)
        self.reparameterized = self.latent.reparameterized
        if config.latent == "categorical":
            self.latent_embedding: nn.Module = nn.Linear(self.latent.flat_size, config.latent_embedding, bias=False)
            latent_input = config.latent_embedding
        else:
            self.latent_embedding = nn.Identity()
            latent_input = self.latent.flat_size
        self.decoder_embedding = nn.Embedding(vocab_size, config.embedding)
        self.start = nn.Parameter(torch.zeros(config.embedding))  # the first decoder input
        self.decoder = nn.LSTM(config.embedding + latent_input, config.hidden, batch_first=True)
        self.softmax = nn.Linear(config.hidden, vocab_size)
        if config.tie_weights:
            self.softmax.weight = self.decoder_embedding.weight  # (V, E): one matrix, read and written
        if config.init_range > 0.0:
            uniform_init_(self, config.init_range)

    def posterior(self, tokens: Tensor, lengths: Tensor) -> Distribution:
        packed = pack_padded_sequence(
            self.encoder_embedding(tokens), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        _, (final, _) = self.encoder(packed)  # final: (2, B, H), forward and backward directions
        return self.latent.posterior(final.mean(0))  # o: the mean of the two final states

    def prior(self) -> Distribution:
        return self.latent.prior()

    def log_likelihood(self, tokens: Tensor, lengths: Tensor, z: Tensor) -> Tensor:
        return self.log_likelihood_terms(tokens, lengths, z)[0]

    def log_likelihood_terms(self, tokens: Tensor, lengths: Tensor, z: Tensor) -> tuple[Tensor, Tensor | None]:
        """ln p(x|z) (K, B) and the term of each sentence's last token, its ``<eos>`` (K, B)."""
        K, (B, T) = z.size(0), tokens.shape
        previous = self.decoder_embedding(tokens[:, :-1])  # (B, T-1, E)
        inputs = torch.cat([self.start.expand(B, 1, -1), previous], 1)  # (B, T, E)
        inputs = self._dropout(inputs.unsqueeze(0).expand(K, B, T, -1), self.config.dropout_input)  # (K·B, T, E)
        latent = self.latent_embedding(self.latent.flatten(z).reshape(K * B, -1))  # (K·B, Dz)
        inputs = torch.cat([inputs, latent.unsqueeze(1).expand(-1, T, -1)], 2)  # z fed at every step
        state_mask = None
        if self.training and self.config.dropout_state > 0.0:  # M^state, one per sentence (or per draw)
            state_mask = self._sentence_mask(inputs, K, B, self.config.hidden, self.config.dropout_state)
            state_mask = state_mask.expand(K, B, -1).reshape(K * B, -1)  # (K·B, H)
        outputs = self.decode(inputs, state_mask)  # (K·B, T, H): right padding never reaches real positions
        outputs = self._dropout(outputs.view(K, B, T, -1), self.config.dropout_output).view(K, B, T, -1)
        real = torch.arange(T, device=tokens.device) < lengths.to(tokens.device).unsqueeze(1)  # (B, T)
        where = real.unsqueeze(0).expand(K, B, T)  # only real positions are scored
        scores = token_log_likelihood(outputs[where], self.softmax, tokens.expand(K, B, T)[where])  # (N,)
        per_token = outputs.new_zeros(K, B, T).masked_scatter(where, scores)
        last = (lengths.to(tokens.device) - 1).clamp(min=0).view(1, B, 1).expand(K, B, 1)
        return per_token.sum(-1), per_token.gather(2, last)[..., 0]  # (K, B) each

    def decode(self, inputs: Tensor, state_mask: Tensor | None = None) -> Tensor:
        """Decoder outputs (N, T, H) on inputs (N, T, I) from a zero state. Without ``state_mask`` the fused
        ``nn.LSTM``; with one (N, H), the step-by-step LSTM on the same weights, reading h_{t-1} * M^state."""
        if state_mask is None:
            return self.decoder(inputs)[0]
        weight_ih, weight_hh, bias = torch_lstm_weights(self.decoder)
        zeros = inputs.new_zeros(inputs.size(0), self.config.hidden)  # h_0 = c_0 = 0, as nn.LSTM's default
        outputs, _ = lstm_sequence(inputs, (zeros, zeros), state_mask, weight_ih, weight_hh, bias)
        return outputs

    def _sentence_mask(self, like: Tensor, K: int, B: int, H: int, p: float) -> Tensor:
        """An inverted-dropout mask (K, B, H), or (1, B, H) shared by the K draws of a sentence when configured."""
        shape = (1 if self.config.shared_dropout_mask else K, B, H)
        return like.new_empty(shape).bernoulli_(1 - p) / (1 - p)

    def _dropout(self, x: Tensor, p: float) -> Tensor:
        """Locked dropout, one mask per sentence over time: (K, B, T, H) -> (K·B, T, H)."""
        K, B, T, H = x.shape
        if self.training and p > 0.0:
            x = x * self._sentence_mask(x, K, B, H, p).unsqueeze(2)
        return x.reshape(K * B, T, H)
