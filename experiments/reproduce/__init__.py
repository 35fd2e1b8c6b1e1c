"""Reproduction pages generated from records: protocols, record loading, paired statistics, rendering.

The drivers in ``experiments/`` train and score runs and archive them as records; ``python -m
experiments.report`` turns records plus each paper's protocol (``experiments/protocols/*.yaml``) into
``docs/reproductions/<paper>.md`` and the index table of ``docs/results.md``. See README.md here.
"""
