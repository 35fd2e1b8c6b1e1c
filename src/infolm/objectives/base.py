"""The objective contract (docs/architecture.md): every training term is an ``Objective``.

``setup(corpus, model)`` builds indexes once; ``forward(model, batch, output)`` receives the shared
main forward pass and returns :class:`Terms`; ``param_groups()`` gives a term's own optimizer
settings; ``loss_scale(vocab_size)`` the scale divergence judges the loss on. :class:`Composite` sums
weighted terms and is the only loss the trainer sees.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any, cast

import torch
from torch import Tensor, nn

from infolm.data.batch import Batch
from infolm.registry import Registry

__all__ = ["OBJECTIVES", "Batch", "Composite", "Objective", "Terms", "build_objective", "register_objective"]

OBJECTIVES: Registry[Objective] = Registry("objective")
register_objective = OBJECTIVES.register


@dataclasses.dataclass
class Terms:
    """Named losses and metrics of one or more terms.

    ``losses`` are differentiable scalars (already weighted in a Composite); ``metrics`` are floats
    to log. ``clip_groups`` maps a loss name to its own gradient-clip norm: the trainer back-propagates
    such a loss separately and clips its gradient on its own (IMM, App. D.2). A term gives the norm of
    its unweighted gradient; the Composite scales it by the term's weight, so that the step adds
    weight x clip(gradient), not clip(weight x gradient).
    """

    losses: dict[str, Tensor] = dataclasses.field(default_factory=dict)
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    clip_groups: dict[str, float] = dataclasses.field(default_factory=dict)
    tokens: int = 0  # tokens predicted by the main term (for per-token logging)
    state: Any = None  # recurrent state to carry to the next batch instead of the shared pass's (noising)

    def total(self) -> Tensor:
        return torch.stack(list(self.losses.values())).sum()


@dataclasses.dataclass
class TermConfig:
    weight: float = 1.0  # multiplier of this term in the Composite


class Objective(nn.Module):
    """Base class of a training term. Subclasses set ``config`` (a dataclass with ``weight``)."""

    config: Any
    # What the term reads from a batch (names in ``infolm.tasks.FEATURES``): a task that does not
    # provide one of them is refused when the config is read.
    needs: frozenset[str] = frozenset({"next-token"})
    # The model protocols (``infolm.tasks.PROTOCOLS``) the term can train.
    protocols: frozenset[str] = frozenset({"causal-lm"})

    @classmethod
    def extra_input_length(cls, config: Any) -> int | None:
        """The longest row the term feeds the model beyond the batch (0: none; None: unbounded)."""
        return 0

    def setup(self, corpus: Any, model: nn.Module) -> None:
        """Build indexes once, before training (default: nothing)."""

    def transform_batch(self, batch: Batch) -> Batch:
        """The batch that the shared forward pass and every term see (default: unchanged).

        Called by the trainer before its one forward pass; data noising replaces tokens here.
        """
        return batch

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:  # pragma: no cover - abstract
        raise NotImplementedError

    def loss_scale(self, vocab_size: int) -> float | None:
        """The scale the divergence rule (``optim/divergence.py``) judges this term's unweighted loss on:
        about its value for a model that has learned nothing, which a healthy run does not leave by a
        factor for long. Default ``ln |V|``, a token-level cross-entropy over the model's vocabulary (the
        uniform model's loss). None: no scale is known before training (a rate, a candidate set that
        varies with the batch); the run's own losses are then the reference. Called after ``setup``."""
        return math.log(max(vocab_size, 2))

    def param_groups(self) -> list[dict[str, Any]]:
        """Optimizer groups for this term's own parameters, each a dict with ``params`` and settings."""
        own = [p for p in self.parameters() if p.requires_grad]
        return [{"params": own}] if own else []

    def on_step_end(self, step: int, metrics: Mapping[str, float]) -> None:
        """Called by the trainer after each optimizer step (phase switches, schedules)."""

    def on_evaluation(self, step: int, valid_loss: float) -> None:
        """Called by the trainer after each validation evaluation."""

    def evaluation_metrics(self, model: nn.Module) -> dict[str, float]:
        """Floats the trainer adds to each validation record of ``metrics.jsonl`` (default: none).

        Called after the task's evaluation, before ``on_evaluation``, with the training weights (not the
        averaged ones: what the term trains with); a term that runs ``model`` restores its mode, and draws
        from no global random generator (a run must not change because it is measured)."""
        return {}

    def pop_lr_reset(self) -> float | None:
        """A learning rate the trainer must set now (once), e.g. when a delayed term starts; else None."""
        return None


class Composite(Objective):
    """Weighted sum of terms. A term with weight 0 is not evaluated at all (no compute, no RNG use)."""

    def __init__(self, terms: Mapping[str, Objective]) -> None:
        super().__init__()
        self.terms = nn.ModuleDict(dict(terms))

    def weight(self, name: str) -> float:
        return float(self.term(name).config.weight)

    def term(self, name: str) -> Objective:
        return cast(Objective, self.terms[name])

    def named_terms(self) -> list[tuple[str, Objective]]:
        return [(name, cast(Objective, term)) for name, term in self.terms.items()]

    def setup(self, corpus: Any, model: nn.Module) -> None:
        for _, term in self.named_terms():
            term.setup(corpus, model)

    def drawing(self, name: str) -> contextlib.AbstractContextManager[Any]:
        """The random state term ``name`` draws from in ``transform_batch`` and ``forward``: here the global
        generators, shared with the model's pass (``objectives/own_streams.py`` gives each term its own)."""
        return contextlib.nullcontext()

    def transform_batch(self, batch: Batch) -> Batch:
        for name, term in self.named_terms():
            if self.weight(name) != 0.0:
                with self.drawing(name):
                    batch = term.transform_batch(batch)
        return batch

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        out = Terms()
        for name, term in self.named_terms():
            weight = self.weight(name)
            if weight == 0.0:
                continue
            with self.drawing(name):
                terms = term(model, batch, output)
            for key, loss in terms.losses.items():
                out.losses[key] = weight * loss
                out.metrics[key] = float(loss.detach())
            out.metrics.update(terms.metrics)
            # A separately clipped term is clipped before its weight scales it, Alg. 1 line 9 with App. D.2:
            # clip(λ∇, λc) = λ·clip(∇, c). Clipping λ∇ at c instead would make λ moot whenever the clip acts.
            out.clip_groups.update({key: weight * clip for key, clip in terms.clip_groups.items()})
            out.tokens = max(out.tokens, terms.tokens)
            if terms.state is not None:
                out.state = terms.state
        return out

    def loss_scale(self, vocab_size: int) -> float | None:
        """The terms' scales summed by |weight| (weight 0: left out); None if any counted term has none."""
        total = 0.0
        for name, term in self.named_terms():
            weight = self.weight(name)
            if weight == 0.0:
                continue
            scale = term.loss_scale(vocab_size)
            if scale is None:
                return None
            total += abs(weight) * scale
        return total

    def param_groups(self) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = []
        for _, term in self.named_terms():
            groups.extend(term.param_groups())
        return groups

    def on_step_end(self, step: int, metrics: Mapping[str, float]) -> None:
        for _, term in self.named_terms():
            term.on_step_end(step, metrics)

    def on_evaluation(self, step: int, valid_loss: float) -> None:
        for _, term in self.named_terms():
            term.on_evaluation(step, valid_loss)

    def evaluation_metrics(self, model: nn.Module) -> dict[str, float]:
        """Every term's evaluation metrics but those of a term with weight 0 (not evaluated at all)."""
        out: dict[str, float] = {}
        for name, term in self.named_terms():
            if self.weight(name) != 0.0:
                out.update(term.evaluation_metrics(model))
        return out

    def pop_lr_reset(self) -> float | None:
        chosen = None
        for name, term in self.named_terms():
            reset = term.pop_lr_reset()  # popped from every term; a term with weight 0 changes nothing
            if reset is not None and self.weight(name) != 0.0:
                chosen = reset
        return chosen


def build_objective(settings: Mapping[str, Any]) -> Composite:
    """``{"mle": {"weight": 1}, "ar": {"weight": 2}}`` -> Composite of registered terms."""
    terms: dict[str, Objective] = {}
    for name, term_settings in settings.items():
        terms[name] = OBJECTIVES.build(name, term_settings or {}, where=f"objective.{name}")
    return Composite(terms)


def deterministic_latent(objective_names: Iterable[str]) -> bool:
    """Whether these objectives make a latent model's codes deterministic (an auto-encoder's posterior
    means): such a run is decoded and evaluated at the means, without sampled bounds."""
    return any(getattr(OBJECTIVES.get(name).factory, "deterministic_latent", False) for name in objective_names)
