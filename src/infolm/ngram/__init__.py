"""Count-based n-gram language models: Kneser-Ney (modified, plain), absolute discounting, ARPA I/O."""

from infolm.ngram.arpa import read_arpa, write_arpa
from infolm.ngram.counts import NgramCounts, count_ngrams
from infolm.ngram.model import NgramModel
from infolm.ngram.smoothing import METHODS, build_ngram, estimate_discounts

__all__ = [
    "METHODS",
    "NgramCounts",
    "NgramModel",
    "build_ngram",
    "count_ngrams",
    "estimate_discounts",
    "read_arpa",
    "write_arpa",
]
