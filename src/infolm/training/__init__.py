"""The training loop, checkpoints, metrics and data parallelism."""

from infolm.training.trainer import Trainer, TrainingInterrupted, resolve_device, seed_everything

__all__ = ["Trainer", "TrainingInterrupted", "resolve_device", "seed_everything"]
