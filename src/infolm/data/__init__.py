"""Data: vocabulary, corpora, the dataset registry and batching."""

from infolm.data.corpus import Corpus, read_text
from infolm.data.datasets import DATASETS, load_corpus
from infolm.data.vocab import EOS, UNK, Vocab

__all__ = ["DATASETS", "EOS", "UNK", "Corpus", "Vocab", "load_corpus", "read_text"]
