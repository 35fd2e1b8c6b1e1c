"""Optimizers and learning-rate schedules built from ``OptimConfig``."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from infolm.errors import InfolmError
from infolm.optim.warmup import warmup_linear_factor, warmup_steps_of

_OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "sgd": torch.optim.SGD,
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "radam": torch.optim.RAdam,
}


def make_optimizer(name: str, groups: list[dict[str, Any]], lr: float, **settings: Any) -> torch.optim.Optimizer:
    cls: Any = _OPTIMIZERS[name]
    if name == "sgd":
        kwargs = {"momentum": settings.get("momentum", 0.0), "weight_decay": settings.get("weight_decay", 0.0)}
    else:
        kwargs = {
            "betas": tuple(settings.get("betas", (0.9, 0.999))),
            "eps": settings.get("eps", 1e-8),
            "weight_decay": settings.get("weight_decay", 0.0),
        }
    return cls(groups, lr=lr, **kwargs)


def model_groups(model: nn.Module) -> list[dict[str, Any]]:
    """The model's trainable parameters as optimizer groups: one, or two when the model names parameters
    that take no weight decay (``no_weight_decay()``: the encoder's biases and LayerNorm weights, as BERT)."""
    exempt_of = getattr(model, "no_weight_decay", None)
    exempt = set(exempt_of()) if callable(exempt_of) else set()
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    groups: list[dict[str, Any]] = [{"params": [p for name, p in named if name not in exempt]}]
    if exempt:
        groups.append({"params": [p for name, p in named if name in exempt], "weight_decay": 0.0})
    return groups


def build_optimizers(config: Any, model: nn.Module, extra_groups: list[dict[str, Any]]) -> list[torch.optim.Optimizer]:
    """The main optimizer (model parameters and plain extra groups) first, then one optimizer per
    extra group that names its own ``optimizer`` (e.g. BMI's discriminator on Adam 2e-4)."""
    main_groups = model_groups(model)
    separate = []
    for group in extra_groups:
        if "optimizer" in group:
            separate.append(group)
        else:
            main_groups.append(dict(group))
    optimizers = [
        make_optimizer(
            config.name,
            main_groups,
            config.lr,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
            betas=config.betas,
            eps=config.eps,
        )
    ]
    for group in separate:
        settings = {k: v for k, v in group.items() if k not in ("params", "optimizer", "lr")}
        optimizers.append(
            make_optimizer(group["optimizer"], [{"params": group["params"]}], group.get("lr", config.lr), **settings)
        )
    return optimizers


class LRSchedule:
    """Step decay per epoch (after ``decay_start_epoch``), decay on a validation plateau, or linear
    warmup then linear decay to 0 over the run (``warmup-linear``, optim/warmup.py).

    ``lr`` is the scheduled rate of the main optimizer; the trainer calls ``before_update`` with the
    number of completed updates before each update, then multiplies ``lr`` by a batch's ``lr_scale``
    (AWD variable-length BPTT).
    """

    def __init__(self, config: Any) -> None:
        self.kind = config.schedule
        self.lr = float(config.lr)
        self.peak = float(config.lr)  # warmup-linear: the rate at the end of warmup
        self.warmup_setting = (int(config.warmup_steps), float(config.warmup_fraction))
        self.total = 0
        self.warmup = 0
        self.decay = float(config.decay)
        self.start = int(config.decay_start_epoch)
        self.patience = int(config.plateau_patience)
        self.best = math.inf
        self.bad = 0

    def set_horizon(self, total_steps: int) -> None:
        """The run's total updates (``Trainer.total_steps``): warmup-linear decays to 0 there."""
        if self.kind != "warmup-linear":
            return
        self.total = int(total_steps)
        steps, fraction = self.warmup_setting
        if steps >= self.total:
            raise InfolmError(
                f"optim.warmup_steps ({steps}) must be less than the run's total updates ({self.total}); "
                "lower it or use optim.warmup_fraction"
            )
        self.warmup = warmup_steps_of(self.total, steps, fraction)

    def before_update(self, completed: int) -> None:
        """Set ``lr`` for the update after ``completed`` updates."""
        if self.kind == "warmup-linear":
            self.lr = self.peak * warmup_linear_factor(completed, self.total, self.warmup)

    def on_epoch_end(self, epochs_done: int) -> None:
        if self.kind == "step" and epochs_done >= self.start:
            self.lr *= self.decay

    def on_evaluation(self, loss: float) -> None:
        if self.kind != "plateau":
            return
        if loss < self.best:
            self.best, self.bad = loss, 0
            return
        self.bad += 1
        if self.bad > self.patience:
            self.lr *= self.decay
            self.bad = 0

    def reset(self, lr: float) -> None:
        """Set the learning rate (warmup-linear: its peak) and forget the plateau history (a new phase
        of training starts)."""
        self.lr, self.peak, self.best, self.bad = float(lr), float(lr), math.inf, 0

    def state_dict(self) -> dict[str, float]:
        return {"lr": self.lr, "peak": self.peak, "best": self.best, "bad": self.bad}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.lr, self.best, self.bad = float(state["lr"]), float(state["best"]), int(state["bad"])
        self.peak = float(state.get("peak", self.peak))  # runs saved before warmup-linear existed
