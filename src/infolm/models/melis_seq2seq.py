"""An encoder-decoder of Melis cells (LSTM, Mogrifier or RLSTM) for the reverse copy task (thesis Sec. 2.3.3).

"The model consists of an independent, unidirectional encoder and a decoder [...]. The decoder is initialized from
the last state of the encoder." The encoder reads the source symbols; the decoder starts from the encoder's state
after the last source symbol and reads its own inputs (a start marker, then the targets shifted by one: teacher
forcing), predicting the target at each step. Both are stacks of the Melis LM's cells (``models/melis.py``:
``make_cells``, ``run_cells``) with their own weights.

The ``seq2seq`` protocol: the trainer's one call ``model(tokens)`` gets rows ``(B, 2T)`` holding the ``T`` source
symbols, then the decoder's ``T`` inputs (source and target of equal length, as in the copy task). The logits
``(B, 2T, V)`` are zero over the source half (the encoder predicts nothing; a task puts the ignore index there)
and the decoder's predictions over the second half.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from infolm.errors import InfolmError
from infolm.models.base import LanguageModel, LMOutput, State, register_model
from infolm.models.melis import MelisConfig, embedding_size, make_cells, run_cells


@dataclasses.dataclass
class MelisSeq2SeqConfig(MelisConfig):
    """The Melis LM's settings for each of the encoder and the decoder (same cell, layers, sizes), plus:"""

    # The thesis is silent on sharing: "independent" encoder and decoder, so by default each has its own
    # input embedding; True shares one table between them (tie_weights still ties the decoder's softmax to
    # the decoder's input embedding).
    share_embedding: bool = False


@register_model("melis-seq2seq", config=MelisSeq2SeqConfig)
class MelisSeq2Seq(LanguageModel):
    """Encoder stack -> its last state -> decoder stack (teacher forcing) -> softmax, separate weights."""

    protocol = "seq2seq"

    def __init__(self, config: MelisSeq2SeqConfig, vocab_size: int) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        emb = embedding_size(config)
        self.encoder_embedding = nn.Embedding(vocab_size, emb)
        nn.init.uniform_(self.encoder_embedding.weight, -config.init_range, config.init_range)
        self.encoder_cells = make_cells(config, emb)
        if config.share_embedding:
            self.decoder_embedding = self.encoder_embedding
        else:
            self.decoder_embedding = nn.Embedding(vocab_size, emb)
            nn.init.uniform_(self.decoder_embedding.weight, -config.init_range, config.init_range)
        self.decoder_cells = make_cells(config, emb)
        out_size = emb if config.tie_weights else config.hidden
        self.projection = nn.Linear(config.hidden, out_size) if out_size != config.hidden else None
        self.output = nn.Linear(out_size, vocab_size)
        nn.init.zeros_(self.output.bias)
        if config.tie_weights:
            self.output.weight = self.decoder_embedding.weight

    def zero_state(self, batch_size: int, device: torch.device | str = "cpu") -> State:
        """The encoder's first state: per layer ``(h, c)``, each ``(B, H)`` zeros."""
        zeros = torch.zeros(batch_size, self.config.hidden, device=device)
        return [(zeros, zeros) for _ in self.encoder_cells]

    def encode(self, source: Tensor) -> State:
        """The encoder's state after reading ``source (B, S)`` from zeros: per layer ``(h, c)``."""
        x = self.encoder_embedding(source)  # (B, S, E)
        _, _, _, state = run_cells(
            self.encoder_cells, x, self.zero_state(source.size(0), source.device), self.config, self.training
        )
        return state

    def decode(self, inputs: Tensor, state: State) -> LMOutput:
        """The decoder from ``state`` over ``inputs (B, T)``: logits ``(B, T, V)`` of the next target symbols."""
        x = self.decoder_embedding(inputs)  # (B, T, E)
        x, hiddens, raw_hiddens, new_state = run_cells(self.decoder_cells, x, state, self.config, self.training)
        if self.projection is not None:
            x = self.projection(x)  # (B, T, E): into the output-embedding space
        return LMOutput(logits=self.output(x), hiddens=hiddens, state=new_state, raw_hiddens=raw_hiddens)

    def forward(self, tokens: Tensor, state: State = None) -> LMOutput:
        """``tokens (B, 2T)``: the source, then the decoder's inputs -> logits ``(B, 2T, V)``, zero over the source.

        ``hiddens`` / ``raw_hiddens`` hold the decoder's only (over its ``T`` steps); ``state`` is the decoder's last.
        """
        if state is not None:
            raise InfolmError(
                "model melis-seq2seq starts each row from its encoder; it carries no state between batches"
            )
        if tokens.size(1) % 2:
            raise InfolmError(
                f"model melis-seq2seq reads rows of source + decoder inputs of equal length, got {tokens.size(1)}"
            )
        half = tokens.size(1) // 2
        out = self.decode(tokens[:, half:], self.encode(tokens[:, :half]))
        source_logits = out.logits.new_zeros(tokens.size(0), half, self.vocab_size)  # no prediction on the source
        out.logits = torch.cat([source_logits, out.logits], dim=1)  # (B, 2T, V)
        return out

    def extra_repr(self) -> str:
        config = self.config
        return (
            f"cell={config.cell}, layers={config.layers} (encoder) + {config.layers} (decoder), "
            f"hidden={config.hidden}, share_embedding={config.share_embedding}"
        )
