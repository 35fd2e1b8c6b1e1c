"""Divergence restarts (Melis Sec. 4.4): a diverged iterate stays out of the averager, and a restart
restores the training weights, the optimizer state and the averager saved with ``best/``."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from infolm.training.metrics import read_metrics
from infolm.training.trainer import Trainer
from tests.conftest import ROOT


def _finite(state: Any) -> bool:
    if isinstance(state, torch.Tensor):
        return bool(torch.isfinite(state).all()) if state.is_floating_point() else True
    if isinstance(state, dict):
        return all(_finite(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return all(_finite(v) for v in state)
    return True


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return bool(a == b)


@pytest.mark.parametrize("average", ["two-tailed", "ema"])
def test_restart_restores_weights_optimizer_and_averager_from_best(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, average: str
) -> None:
    from infolm.build import train
    from infolm.config import load_config

    overrides = [
        f"run.dir={tmp_path}",
        "train.max_steps=14",
        "train.eval_every=4",
        "train.log_every=1",
        "optim.name=adam",
        "optim.lr=0.003",
        f"optim.average={{name: {average}}}",
        "train.divergence={enabled: true}",
    ]
    seen: dict[str, Any] = {}
    original_step, original_restart = Trainer.train_step, Trainer._restart_from_best

    def poisoned_step(self: Trainer, window: Any) -> dict[str, float]:
        if self.step == 6 and "poisoned" not in seen:  # the weights that step 7 reads are NaN
            seen["poisoned"] = True
            with torch.no_grad():
                next(self.model.parameters()).fill_(math.nan)
        return original_step(self, window)

    def inspected_restart(self: Trainer, loss: float) -> None:
        assert self.averager is not None
        seen["averager_finite_at_divergence"] = _finite(self.averager.state_dict())
        original_restart(self, loss)
        best = self.run_dir / "checkpoints" / "best"
        saved = torch.load(best / "restart.pt", weights_only=True)
        raw = load_file(str(best / "raw_model.safetensors"))
        seen["weights"] = all(torch.equal(v, raw[k]) for k, v in self.model.state_dict().items() if k in raw)
        seen["optimizer"] = _equal(self.optimizers[0].state_dict(), saved["optimizers"][0])
        seen["averager"] = _equal(self.averager.state_dict(), saved["averager"])

    monkeypatch.setattr(Trainer, "train_step", poisoned_step)
    monkeypatch.setattr(Trainer, "_restart_from_best", inspected_restart)
    train(load_config(ROOT / "configs/tiny.yaml", overrides), overrides)

    assert seen["averager_finite_at_divergence"]  # the NaN iterate never entered the average
    assert seen["weights"] and seen["optimizer"] and seen["averager"]
    records = read_metrics(tmp_path / "metrics.jsonl")
    restart = [r for r in records if r.get("event") == "divergence_restart"]
    assert [r["step"] for r in restart] == [7]
    after = [r["loss"] for r in records if r.get("split") == "valid" and r["step"] > 7]
    assert after and all(math.isfinite(loss) for loss in after)


def test_restart_before_any_evaluation_restores_the_initial_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infolm.build import train
    from infolm.config import load_config

    overrides = [
        f"run.dir={tmp_path}",
        "train.max_steps=6",
        "train.eval_every=6",
        "optim.name=adam",
        "optim.lr=0.003",
        "optim.average={name: two-tailed}",
        "train.divergence={enabled: true}",
    ]
    seen: dict[str, Any] = {}
    original_step, original_restart = Trainer.train_step, Trainer._restart_from_best

    def poisoned_step(self: Trainer, window: Any) -> dict[str, float]:
        if self.step == 2 and "poisoned" not in seen:
            seen["poisoned"] = True
            with torch.no_grad():
                next(self.model.parameters()).fill_(math.nan)
        return original_step(self, window)

    def inspected_restart(self: Trainer, loss: float) -> None:
        original_restart(self, loss)
        assert self.averager is not None
        seen["weights"] = all(torch.equal(v, self.initial_weights[k]) for k, v in self.model.state_dict().items())
        seen["optimizer_empty"] = not self.optimizers[0].state
        seen["averager"] = _equal(self.averager.state_dict(), self.initial_restart_state["averager"])

    monkeypatch.setattr(Trainer, "train_step", poisoned_step)
    monkeypatch.setattr(Trainer, "_restart_from_best", inspected_restart)
    train(load_config(ROOT / "configs/tiny.yaml", overrides), overrides)
    assert seen["weights"] and seen["optimizer_empty"] and seen["averager"]


def _train_tiny(tmp_path: Path, overrides: list[str]) -> None:
    """``configs/tiny.yaml`` with ``overrides`` in ``tmp_path``."""
    from infolm.build import train
    from infolm.config import load_config

    overrides = [f"run.dir={tmp_path}", *overrides]
    train(load_config(ROOT / "configs/tiny.yaml", overrides), overrides)


def _script_evaluations(monkeypatch: pytest.MonkeyPatch, losses: Iterator[float], before: Any = None) -> None:
    """Validation returns the next of ``losses`` (after ``before(trainer)``, if given)."""
    from infolm.tasks.base import Metrics

    def scripted_evaluate(self: Trainer, split: str = "valid") -> Metrics:
        self.last_eval_step = self.step
        if before is not None:
            before(self)
        return Metrics({"loss": next(losses)}, selection="loss")

    monkeypatch.setattr(Trainer, "evaluate", scripted_evaluate)


@pytest.mark.parametrize("restore", [True, False])
def test_plateau_decay_reloads_the_best_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore: bool) -> None:
    """With ``optim.plateau_restore_best`` a decay puts the weights of ``best/`` back (the released code
    of Zaremba et al., Xie et al. and the IMM authors); without it the weights go on."""
    overrides = [
        "train.max_steps=8",
        "train.eval_every=2",
        "train.checkpoint_every=0",
        "optim.schedule=plateau",
        "optim.decay=0.5",
        f"optim.plateau_restore_best={str(restore).lower()}",
    ]
    # best at the second evaluation (step 4); the later ones are worse and decay (steps 6 and 8)
    _script_evaluations(monkeypatch, itertools.chain([5.0, 4.0, 6.0], itertools.repeat(7.0)))
    seen: dict[str, Any] = {}
    original = Trainer._evaluate_and_log

    def inspected(self: Trainer) -> None:
        original(self)
        if self.step == 6:
            best = load_file(str(self.run_dir / "checkpoints" / "best" / "model.safetensors"))
            seen["lr"] = self.schedule.lr
            weights = self.model.state_dict()
            seen["weights_are_best"] = all(torch.equal(v, best[k]) for k, v in weights.items() if k in best)

    monkeypatch.setattr(Trainer, "_evaluate_and_log", inspected)
    _train_tiny(tmp_path, overrides)
    assert seen["lr"] == 10.0  # 20 halved once
    assert seen["weights_are_best"] is restore
    events = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r.get("event") == "plateau_restore_best"]
    assert [r["step"] for r in events] == ([6, 8] if restore else [])


def test_plateau_restore_best_needs_the_plateau_schedule_and_no_averaging() -> None:
    from infolm.config import OptimConfig
    from infolm.errors import InfolmError

    with pytest.raises(InfolmError, match="optim.plateau_restore_best needs optim.schedule=plateau"):
        OptimConfig(plateau_restore_best=True)
    with pytest.raises(InfolmError, match="cannot be combined with optim.average"):
        OptimConfig(plateau_restore_best=True, schedule="plateau", average={"name": "ema"})


def test_plateau_restore_refuses_a_best_written_later_in_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed run that replays a decay must not reload a best/ the original run wrote after it."""
    import json

    from infolm.errors import InfolmError

    def later_best(trainer: Trainer) -> None:
        if trainer.step == 6:  # best/ as a later point of an earlier run of this directory left it
            meta = trainer.run_dir / "checkpoints" / "best" / "meta.json"
            meta.write_text(json.dumps({**json.loads(meta.read_text()), "step": 7}))

    _script_evaluations(monkeypatch, iter([5.0, 4.0, 6.0]), before=later_best)
    overrides = ["train.max_steps=8", "train.eval_every=2", "optim.schedule=plateau", "optim.plateau_restore_best=true"]
    with pytest.raises(InfolmError, match="was written at step 7, after this point of the run"):
        _train_tiny(tmp_path, overrides)


def test_evaluations_before_patience_from_step_neither_decay_nor_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``train.patience_from_step``: worse evaluations before it do not count (KL annealing still
    raising its weight); from it on the plateau schedule and early stopping read them as usual."""
    overrides = [
        "train.max_steps=12",
        "train.eval_every=2",
        "train.early_stopping=2",
        "train.patience_from_step=6",
        "optim.schedule=plateau",
        "optim.decay=0.5",
    ]
    _script_evaluations(monkeypatch, iter([5.0, 6.0, 6.5, 7.0, 8.0, 9.0]))  # best at step 2, then worse
    lrs: dict[int, float] = {}
    original = Trainer._evaluate_and_log

    def recorded(self: Trainer) -> None:
        original(self)
        lrs[self.step] = self.schedule.lr

    monkeypatch.setattr(Trainer, "_evaluate_and_log", recorded)
    _train_tiny(tmp_path, overrides)
    # step 4 is worse but before step 6: no decay; steps 6 and 8 count: two decays, then the stop
    assert lrs == {2: 20.0, 4: 20.0, 6: 10.0, 8: 5.0}
