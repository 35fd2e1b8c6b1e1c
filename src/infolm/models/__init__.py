"""Language models. Importing this package registers every model in ``MODELS``."""

from infolm.models import encoder, gru, lstm, melis, melis_seq2seq, mos, transformer  # noqa: F401  (registration)
from infolm.models.base import MODELS, LanguageModel, LMOutput, detach_state, register_model

__all__ = ["MODELS", "LMOutput", "LanguageModel", "detach_state", "register_model"]

import infolm.latent  # noqa: E402, F401  (registers the latent-variable models: latent-synthetic, latent-sentence-lstm)
