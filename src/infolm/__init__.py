"""infolm: training, regularizing and evaluating language models with information-theoretic objectives."""

__version__ = "0.1.0"
