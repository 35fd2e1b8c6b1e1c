"""Evaluation: perplexity, generation and the method-specific evaluators."""

from infolm.evaluation.perplexity import evaluate_split, stream_batches, stream_nll, summarize

__all__ = ["evaluate_split", "stream_batches", "stream_nll", "summarize"]
