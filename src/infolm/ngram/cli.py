"""Entry points behind ``infolm ngram build`` and ``infolm ngram eval`` (no argument parsing here)."""

from __future__ import annotations

import math
import time
from typing import Any

from infolm.data.corpus import Corpus
from infolm.errors import InfolmError
from infolm.ngram.arpa import read_arpa, write_arpa
from infolm.ngram.smoothing import METHODS, build_ngram


def build_command(corpus: Corpus, order: int, out: str, method: str = "modified-kn") -> dict[str, Any]:
    """Estimate an n-gram model on the training split and write it as an ARPA file at ``out``."""
    if method not in METHODS:
        raise InfolmError(f"n-gram method must be one of {', '.join(METHODS)}; got {method!r}")
    if order < 1:
        raise InfolmError(f"n-gram order must be at least 1, got {order}")
    start = time.perf_counter()
    stream = corpus.stream("train")
    model = build_ngram(stream, len(corpus.vocab), order, method, history_id=corpus.vocab.eos_id)
    built = time.perf_counter()
    write_arpa(model, out, corpus.vocab)
    return {
        "arpa": str(out),
        "order": order,
        "method": method,
        "train_tokens": int(len(stream)),
        "ngrams": {k: model.num_grams(k) for k in range(1, order + 1)},
        "discounts": [list(d) for d in model.discounts],  # (D1, D2, D3+) per order, 1..n
        "discount_fallback_orders": model.fallback_orders,
        "build_seconds": round(built - start, 3),
        "write_seconds": round(time.perf_counter() - built, 3),
    }


def eval_command(arpa_path: str, corpus: Corpus, split: str) -> dict[str, Any]:
    """Perplexity of an ARPA model on a split (running stream, ``<eos>`` counted and as first history)."""
    model = read_arpa(arpa_path, corpus.vocab)
    total, tokens = model.log_prob_stream(corpus.stream(split))
    nll = -total / max(tokens, 1)  # nats per token
    return {"ppl": math.exp(nll), "nll": nll, "tokens": tokens}
