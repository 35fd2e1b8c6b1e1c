"""Tasks: the shapes of learning. Importing this package registers every task in ``TASKS``."""

from infolm.tasks import (  # noqa: F401  (registration)
    classification,
    copy,
    masked_lm,
    sentence_latent,
    sentence_lm,
    stream_lm,
)
from infolm.tasks.base import FEATURES, PROTOCOLS, TASKS, Batches, Metrics, Task, register_task

__all__ = ["FEATURES", "PROTOCOLS", "TASKS", "Batches", "Metrics", "Task", "register_task"]
