"""The training loop, checkpoints, metrics and data parallelism."""

from infolm.training.trainer import Trainer, resolve_device, seed_everything

__all__ = ["Trainer", "resolve_device", "seed_everything"]
