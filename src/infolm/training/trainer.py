"""The training loop. It knows no task, model or loss by name: it receives a task (batches,
evaluation, whether a state is carried), a model and a Composite objective, and owns device,
precision, clipping, evaluation cadence, selection of ``best/`` and early stopping by the task's
selection metric, checkpoints (atomic, resumable bit-for-bit on CPU), the metrics log and data
parallelism."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

import numpy as np
import torch
from torch import nn

from infolm.config import Config, build_dataclass
from infolm.data.batch import Batch
from infolm.models.base import LanguageModel, detach_state
from infolm.objectives.base import Objective, Terms
from infolm.optim.divergence import DivergenceConfig, DivergencePolicy
from infolm.optim.factory import LRSchedule, build_optimizers
from infolm.training import checkpoint as ckpt
from infolm.training import distributed
from infolm.training.allocator import keep_freed_memory
from infolm.training.metrics import MetricsLog

if TYPE_CHECKING:
    from infolm.tasks.base import Metrics, Task


def resolve_device(name: str) -> torch.device:
    """``run.device`` as a device; under ``torchrun`` each process of a node takes the GPU of its local rank."""
    from infolm.errors import InfolmError

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise InfolmError("run.device=cuda but CUDA is not available on this machine")
    if name == "cuda" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        local_rank, count = int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count()
        if local_rank >= count:
            raise InfolmError(
                f"torchrun started more processes on this node than it has GPUs ({count}); "
                f"use --nproc_per_node={count}, or run.device=cpu"
            )
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states as tensors / plain containers (``weights_only`` loadable)."""
    np_state = cast(tuple[Any, ...], np.random.get_state())
    py_version, py_internal, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": {"version": py_version, "internal": torch.tensor(py_internal, dtype=torch.int64), "gauss": py_gauss},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(
        ("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    p = state["python"]
    random.setstate((p["version"], tuple(int(x) for x in p["internal"].tolist()), p["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (or a SIGTERM the CLI turns into one) during ``Trainer.fit``; ``step`` is where training was."""

    def __init__(self, step: int) -> None:
        super().__init__(f"interrupted at step {step}")
        self.step = step


class Trainer:
    """Trains ``model`` on ``task`` with ``objective`` as ``config`` says, in ``config.run.dir``."""

    def __init__(
        self,
        config: Config,
        model: nn.Module,
        objective: Objective,
        task: Task,
        averager: Any = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.config = config
        self.run_dir = Path(config.run.dir)
        self.device = resolve_device(config.run.device)
        if self.device.type == "cpu" and config.run.keep_freed_memory:
            keep_freed_memory()
        distributed.init(self.device)
        self.rank, self.world_size = distributed.world()
        self.is_main = self.rank == 0
        self.model = cast(LanguageModel, model.to(self.device))
        self.objective = objective.to(self.device)
        self.task = task
        self.averager = averager
        if averager is not None:
            averager.to(self.device)  # built on the parameters before the model moved
        self.meta = dict(meta or {})
        self.batches = task.train_batches(self.rank, self.world_size)  # this rank's rows of every batch
        if averager is not None:
            averager.set_horizon(self.total_steps())  # tail averaging's latest start (a fraction of the run)
        self.optimizers = build_optimizers(config.optim, self.model, self.objective.param_groups())
        self.schedule = LRSchedule(config.optim)
        self.schedule.set_horizon(self.total_steps())  # a schedule over the whole run decays to 0 there
        self.metrics = MetricsLog(
            self.run_dir / "metrics.jsonl",
            enabled=self.is_main,
            tensorboard_dir=self.run_dir / "tb" if config.train.tensorboard else None,
        )
        self.step = 0
        self.epoch = 0
        self.best_valid = math.inf  # the best selection metric so far, as a loss (Metrics.loss)
        self.bad_evals = 0
        self.elapsed = 0.0
        self.done = False
        self.state: Any = None
        self.last_eval_step = -1
        # Always watching (optim/divergence.py's rule); restarts only with train.divergence.enabled.
        divergence = build_dataclass(DivergenceConfig, config.train.divergence, "train.divergence")
        self.divergence = DivergencePolicy(divergence, self.objective.loss_scale(self.model.vocab_size))
        self._parameters: list[nn.Parameter] | None = None
        self._clipped: list[nn.Parameter] | None = None
        self.initial_weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.initial_restart_state = _clone(self.restart_state())  # a restart before any evaluation
        self._diverged = False
        self._resumed_finished = False  # the checkpoint resumed was written at the end of the run

    # ----------------------------------------------------------------------------------------
    def parameters(self) -> list[nn.Parameter]:
        """Trainable parameters of the model and the objective, each once (cached)."""
        if self._parameters is not None:
            return self._parameters
        seen: dict[int, nn.Parameter] = {}
        for p in list(self.model.parameters()) + list(self.objective.parameters()):
            if p.requires_grad:
                seen.setdefault(id(p), p)
        self._parameters = list(seen.values())
        return self._parameters

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.config.train.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def eval_weights(self) -> Iterator[None]:
        """Evaluate (and save for evaluation) the averaged weights when averaging is on."""
        if self.averager is None:
            yield
            return
        self.averager.swap_in()
        try:
            yield
        finally:
            self.averager.swap_out()

    def clock(self) -> float:
        """Seconds, for the elapsed time and the time between checkpoints (tests replace it)."""
        return time.perf_counter()

    def say(self, message: str) -> None:
        """One line on stderr from the main process."""
        if self.is_main:
            sys.stderr.write(f"infolm: {message}\n")
            sys.stderr.flush()

    # ----------------------------------------------------------------------------------------
    def trainer_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "step": self.step,
            "epoch": self.epoch,
            "best_valid": self.best_valid,
            "bad_evals": self.bad_evals,
            "elapsed": self.elapsed,
            "done": self.done,
            "finished": self._finished(),  # the run's end, not a checkpoint along the way
            "last_eval_step": self.last_eval_step,
            "metrics_lines": self.metrics.lines(),
            "optimizers": [opt.state_dict() for opt in self.optimizers],
            "schedule": self.schedule.state_dict(),
            "batcher": self.batches.state_dict(),
            "rng": rng_state(),
            "recurrent_state": self.state,
            "objective": self.objective.state_dict(),
        }
        if self.averager is not None:
            state["averager"] = self.averager.state_dict()
        state["divergence"] = self.divergence.state_dict()
        return state

    def save(self) -> None:
        if not self.is_main:
            return
        meta = dict(self.meta, step=self.step, epoch=self.epoch, best_valid=self.best_valid)
        eval_model = None
        if self.averager is not None:
            import copy

            with self.eval_weights():
                eval_model = copy.deepcopy(self.model)
        ckpt.save_checkpoint(
            self.run_dir,
            self.step,
            self.model,
            self.trainer_state(),
            meta,
            eval_model,
            self.config.train.keep_checkpoints,
        )

    def resume(self) -> bool:
        from infolm.errors import InfolmError

        found = ckpt.newest_intact_checkpoint(self.run_dir, self.model)
        if found is None:
            return False
        latest, state = found
        self.step, self.epoch = int(state["step"]), int(state["epoch"])
        self.best_valid, self.bad_evals = float(state["best_valid"]), int(state["bad_evals"])
        self.elapsed = float(state["elapsed"])
        # done: stopped early, for good. A run that ended at train.epochs / train.max_steps is not done: a
        # larger limit extends it. (Checkpoints written before this distinction say done at either end;
        # only an exhausted patience counts.)
        patience = self.config.train.early_stopping
        self.done = bool(state["done"]) and bool(patience) and self.bad_evals >= patience
        self.last_eval_step = int(state["last_eval_step"])
        self._resumed_finished = bool(state.get("finished", False))
        for opt, opt_state in zip(self.optimizers, state["optimizers"]):
            if len(opt_state["param_groups"]) != len(opt.param_groups):  # e.g. a model's weight-decay exemptions
                raise InfolmError(
                    f"checkpoint {latest} holds {len(opt_state['param_groups'])} optimizer parameter group(s), "
                    f"this model has {len(opt.param_groups)}: the run was started by a version of infolm that "
                    "grouped its parameters otherwise; resume it with that version or use another run.dir"
                )
            opt.load_state_dict(opt_state)
        self.schedule.load_state_dict(state["schedule"])
        self.batches.load_state_dict(state["batcher"])
        self.state = state["recurrent_state"]
        self.objective.load_state_dict(state["objective"])
        if self.averager is not None and "averager" in state:
            self.averager.load_state_dict(state["averager"])
        if "divergence" in state:
            self.divergence.load_state_dict(state["divergence"])
        self.metrics.truncate(int(state["metrics_lines"]))
        set_rng_state(state["rng"])
        if self.rank:
            torch.manual_seed(self.config.run.seed + 1000 * self.rank + self.step)
        return True

    # ----------------------------------------------------------------------------------------
    def evaluate(self, split: str = "valid") -> Metrics:
        """The task's metrics on ``split`` with the weights that evaluation uses (averaged if on)."""
        with self.eval_weights():
            result = self.task.evaluate(self.model, split, self.device)
        self.last_eval_step = self.step
        return result

    def _evaluate_and_log(self) -> None:
        if self.averager is not None:
            # The averager evaluates the weight sets it chooses between (2TA: short and long
            # averages, Alg. 1) and returns the loss of the weights that evaluation will use;
            # the metrics of that evaluation are the ones logged.
            evaluated: dict[float, Metrics] = {}

            def selection_loss() -> float:
                metrics = self.task.evaluate(self.model, "valid", self.device)
                evaluated[metrics.loss] = metrics
                return metrics.loss

            result = evaluated[self.averager.observe(selection_loss)]
            self.last_eval_step = self.step
        else:
            result = self.evaluate("valid")
        loss = result.loss
        record: dict[str, Any] = {"step": self.step, "epoch": self.epoch, "split": "valid", **result.logged()}
        patient = self.step >= self.config.train.patience_from_step  # evaluations that count
        improved = loss < self.best_valid
        if improved:
            self.best_valid, self.bad_evals = loss, 0
            if self.is_main:
                self._save_best(dict(self.meta, step=self.step, valid=result.values))
        elif patient:
            self.bad_evals += 1
        best = -self.best_valid if result.higher_is_better else self.best_valid
        record[f"best_{result.log_name(result.selection)}"] = best
        if self.averager is not None:
            record.update(self.averager.metrics())
        record.update(self.objective.evaluation_metrics(self.model))  # a term's own diagnostics
        self.metrics.write(record)
        lr_before = self.schedule.lr
        if patient or improved:  # before patience_from_step the schedule learns only of a new best
            self.schedule.on_evaluation(loss)
        if self.config.optim.plateau_restore_best and self.schedule.lr < lr_before:
            self._restore_best_weights()
        self.objective.on_evaluation(self.step, loss)
        self._apply_lr_reset()
        patience = self.config.train.early_stopping
        if patience and self.bad_evals >= patience:
            self.done = True

    def restart_state(self) -> dict[str, Any]:
        """What a divergence restart restores besides the weights (Melis Sec. 4.4)."""
        state: dict[str, Any] = {
            "optimizers": [opt.state_dict() for opt in self.optimizers],
            "objective": self.objective.state_dict(),
        }
        if self.averager is not None:
            state["averager"] = self.averager.state_dict()
        return state

    def _save_best(self, meta: dict[str, Any]) -> None:
        raw_model, restart = None, None
        if self.divergence.config.enabled:  # best/ then holds what a restart restores
            restart = _clone(self.restart_state())
            if self.averager is not None:
                import copy

                raw_model = copy.deepcopy(self.model)
        objective_state = _clone(self.objective.state_dict())  # what run.init_from continues
        with self.eval_weights():
            ckpt.save_best(self.run_dir, self.model, meta, raw_model, restart, objective_state)

    # ----------------------------------------------------------------------------------------
    def clipped_parameters(self) -> list[nn.Parameter]:
        """The main optimizer's parameters, the ones ``train.clip`` bounds. A term's own optimizer (BMI's
        discriminator on Adam) is left out: its gradient must not shrink the model's step."""
        if self._clipped is None:
            seen: dict[int, nn.Parameter] = {}
            for group in self.optimizers[0].param_groups:
                for p in group["params"]:
                    seen.setdefault(id(p), p)
            self._clipped = list(seen.values())
        return self._clipped

    def _backward(self, terms: Terms) -> tuple[float, dict[str, float]]:
        """Back-propagate the main losses (clipped together) and each separately clipped loss; the clips
        bound the main optimizer's parameters (``clipped_parameters``). Returns the main gradient's norm
        and each separate group's, both before clipping."""
        params, clipped = self.parameters(), self.clipped_parameters()
        clip = self.config.train.clip
        separate = {k: v for k, v in terms.clip_groups.items() if k in terms.losses}
        main = [loss for name, loss in terms.losses.items() if name not in separate]
        retain = bool(separate)
        if main:
            (main[0] if len(main) == 1 else torch.stack(main).sum()).backward(retain_graph=retain)
        distributed.average_gradients(params)
        norm = _clip(clipped, clip)
        group_norms: dict[str, float] = {}
        for index, (name, group_clip) in enumerate(separate.items()):
            saved = [p.grad for p in params]
            for p in params:
                p.grad = None
            terms.losses[name].backward(retain_graph=index < len(separate) - 1)
            distributed.average_gradients(params)
            group_norms[name] = _clip(clipped, group_clip)
            for p, g in zip(params, saved):
                if g is not None:
                    p.grad = g if p.grad is None else p.grad + g
        return norm, group_norms

    def train_step(self, batch: Batch) -> dict[str, float]:
        """One optimizer step on ``batch`` (this rank's rows); returns the values to log."""
        self.model.train()
        self.objective.train()
        batch = batch.to(self.device)
        state = None  # a task that carries no state: every row starts from the model's initial state
        if self.task.carries_state:
            if self.state is None:
                self.state = self.model.init_state(batch.inputs.size(0), self.device)
            state = detach_state(self.state)
        batch = dataclasses.replace(batch, state=state, epoch=self.epoch, step=self.step)
        batch = self.objective.transform_batch(batch)  # e.g. data noising, before the one forward pass
        with self.autocast():
            output = self.model(batch.inputs, batch.state)
            terms = self.objective(self.model, batch, output)
        if self.task.carries_state:
            self.state = detach_state(terms.state if terms.state is not None else output.state)
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        grad_norm, group_norms = self._backward(terms)
        self.schedule.before_update(self.step)
        lr = self.schedule.lr * batch.lr_scale * self.divergence.lr_scale
        for group in self.optimizers[0].param_groups:
            group["lr"] = lr
        for opt in self.optimizers:
            opt.step()
        self.step += 1
        values = dict(terms.metrics)
        values["loss"] = float(terms.total().detach())
        # A diverged iterate must not enter the averager: check before the update (Melis Sec. 4.4).
        self._diverged = self.divergence.check(values["loss"])
        if self.averager is not None and not self._diverged and math.isfinite(values["loss"]):
            self.averager.update(self.step)
        values["grad_norm"] = grad_norm
        for name, group_norm in group_norms.items():  # a weighted term's: its clip acts above weight x clip
            values[f"grad_norm_{name}"] = group_norm
        values["lr"] = self.schedule.lr
        if self.averager is not None:
            values.update(self.averager.metrics())
        self.objective.on_step_end(self.step, values)
        self._apply_lr_reset()
        return values

    def _apply_lr_reset(self) -> None:
        """An objective may ask for a new learning rate (a term that starts late, with lr reset)."""
        reset = self.objective.pop_lr_reset()
        if reset is not None:
            self.schedule.reset(reset)
            self.metrics.write({"step": self.step, "event": "lr_reset", "lr": reset})

    def _finished(self) -> bool:
        max_steps = self.config.train.max_steps
        return self.done or self.epoch >= self.config.train.epochs or (max_steps is not None and self.step >= max_steps)

    def fit(self) -> dict[str, Any]:
        """Train until ``train.epochs`` / ``train.max_steps`` / early stopping; resumes automatically.
        Ctrl-C raises ``TrainingInterrupted`` (the checkpoints on disk are left as they are)."""
        resumed = self.resume()
        if not resumed:
            seed_everything(self.config.run.seed + 1000 * self.rank)
            # a start from scratch: the log of an earlier attempt with no loadable checkpoint is set aside,
            # not appended to (its steps would be logged twice) and not deleted (it may be all that is left)
            self.metrics.set_aside()
        elif self._finished() and self.last_eval_step == self.step:
            self.say(f"{self.run_dir}: already finished at step {self.step} (epoch {self.epoch}){self._why_ended()}")
            self.metrics.close()
            return self.summary()
        elif self._resumed_finished:
            self.say(
                f"{self.run_dir}: extending the run that finished at step {self.step} (epoch {self.epoch}) "
                f"to {self.total_steps()} steps"
            )
        else:
            self.say(f"{self.run_dir}: resuming from step {self.step} (epoch {self.epoch})")
        progress = self._progress()
        try:
            self._train(progress)
        except KeyboardInterrupt as interrupt:
            if progress is not None:
                progress.close()
            raise TrainingInterrupted(self.step) from interrupt
        if progress is not None:
            progress.close()
        self.metrics.close()
        return self.summary()

    def summary(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "epoch": self.epoch,
            "best_valid_loss": self.best_valid,
            "elapsed": self.elapsed,
            # why it ended: a driver that extends runs must tell a spent patience (final) from a limit
            "early_stopped": self.done,
        }

    def _why_ended(self) -> str:
        """Why a finished run ended, for the line a rerun prints."""
        train = self.config.train
        if self.done:
            return f" (stopped early: {self.bad_evals} evaluations without improvement); nothing to train"
        if train.max_steps is not None and self.step >= train.max_steps:
            limit = f"train.max_steps={train.max_steps}"
        else:
            limit = f"train.epochs={train.epochs}"
        return f" ({limit}); nothing to train, a larger limit extends it"

    def _train(self, progress: Any) -> None:
        train = self.config.train
        window_tokens = 0
        tick = self.clock()  # since the last checkpoint
        last_log = tick
        while not self._finished():
            batch = self.batches.next_batch()
            if batch is None:  # end of an epoch
                self.epoch += 1
                self.state = None
                self.schedule.on_epoch_end(self.epoch)
                if train.eval_every == 0:
                    self._evaluate_and_log()
                    if train.checkpoint_every == 0:
                        self._save_timed(tick)
                        tick = self.clock()
                continue
            values = self.train_step(batch)
            window_tokens += batch.num_tokens()
            if progress is not None:
                progress.update(self.step, batch.num_tokens(), epoch=self.epoch, loss=values["loss"])
            if self._diverged:
                if not self.divergence.config.enabled:
                    self._stop_diverged(values["loss"])
                self._restart_from_best(values["loss"])
                continue
            if self.step % train.log_every == 0:
                now = self.clock()
                record = {"step": self.step, "epoch": self.epoch, **values}
                record["tokens_per_s"] = window_tokens / max(now - last_log, 1e-9)
                record["elapsed"] = self.elapsed + now - tick
                self.metrics.write(record)
                window_tokens, last_log = 0, now
            evaluated = False
            if train.eval_every and self.step % train.eval_every == 0:
                self._evaluate_and_log()
                evaluated = True
            if (
                (train.checkpoint_every and self.step % train.checkpoint_every == 0)
                or (evaluated and not train.checkpoint_every)
                or self._checkpoint_due(tick)
            ) and not self.divergence.suspect:  # no checkpoint of weights that may be diverging
                self._save_timed(tick)
                tick = self.clock()
        if self.last_eval_step != self.step:
            self._evaluate_and_log()
        self._save_timed(tick)

    def _checkpoint_due(self, since: float) -> bool:
        """``train.checkpoint_minutes`` have passed since the last checkpoint (at ``since``)."""
        minutes = self.config.train.checkpoint_minutes
        return bool(minutes) and self.clock() - since >= 60.0 * float(minutes or 0)

    def _restore_best_weights(self) -> None:
        """A plateau decay with ``optim.plateau_restore_best``: the weights of the best evaluation so
        far (``best/``; the option refuses weight averaging, so they are the training weights); the
        optimizer and objective states, data position and step go on (as in the released code these
        recipes come from, which restores the weights only), and the recurrent state starts from zero."""
        from infolm.errors import InfolmError

        best = self.run_dir / ckpt.CHECKPOINTS / ckpt.BEST
        if not (best / "model.safetensors").exists():  # every rank reads it, as a divergence restart
            raise InfolmError(f"optim.plateau_restore_best: {best} is missing; every rank must see the run directory")
        saved_at = int(json.loads((best / "meta.json").read_text()).get("step", -1))
        if saved_at > self.step:  # a resumed run replaying a decay that the original made before this best/
            raise InfolmError(
                f"optim.plateau_restore_best: {best} was written at step {saved_at}, after this point of the run "
                f"(step {self.step}); resume from a checkpoint written after it"
            )
        ckpt.load_complete_weights(self.model, best)
        self.state = None
        self.metrics.write({"step": self.step, "event": "plateau_restore_best", "lr": self.schedule.lr})

    def _restart_from_best(self, loss: float) -> None:
        """Divergence (Melis Sec. 4.4): "reset the weights and the optimization state to the previous
        best checkpoint and multiply the learning rate by 0.9". Restores the training weights, the
        optimizer state, the averager and the objective's state saved with ``best/`` (their initial
        values before any evaluation); the schedule, data position and step go on."""
        self.divergence.restart()
        best = self.run_dir / ckpt.CHECKPOINTS / ckpt.BEST
        restart = ckpt.load_restart_state(best) if (best / "model.safetensors").exists() else None
        if restart is not None:
            ckpt.load_complete_weights(self.model, best, raw=True)
        else:
            self.model.load_state_dict(self.initial_weights)
            restart = self.initial_restart_state
        for opt, opt_state in zip(self.optimizers, restart["optimizers"], strict=True):
            opt.load_state_dict(opt_state)
        self.objective.load_state_dict(restart["objective"])
        if self.averager is not None:
            self.averager.load_state_dict(restart["averager"])
        self.state = None
        self.metrics.write(
            {
                "step": self.step,
                "event": "divergence_restart",
                "loss": loss,
                "restarts": self.divergence.restarts,
                "lr_scale": self.divergence.lr_scale,
            }
        )

    def _stop_diverged(self, loss: float) -> NoReturn:
        """Divergence with restarts off: stop with one line; what is on disk stays as it is."""
        from infolm.errors import InfolmError

        latest = ckpt.latest_checkpoint(self.run_dir)
        kept = f"; {self.run_dir} keeps its checkpoints up to {latest.name}" if latest is not None else ""
        raise InfolmError(
            f"{self.divergence.describe(self.step, loss)}{kept} "
            "(train.divergence.enabled=true restarts from the best checkpoint instead)"
        )

    def _save_timed(self, tick: float) -> None:
        self.elapsed += self.clock() - tick
        self.save()

    def total_steps(self) -> int:
        """Optimizer steps of the whole run: ``train.max_steps`` or the epochs' batches, the fewer."""
        by_epochs = self.config.train.epochs * len(self.batches)
        max_steps = self.config.train.max_steps
        return by_epochs if max_steps is None else min(max_steps, by_epochs)

    def _progress(self) -> Any:
        """A bar on a terminal, else a line on stderr every ~30 s (``infolm/progress.py``)."""
        if not (self.config.train.progress and self.is_main):
            return None
        from infolm.progress import reporter

        return reporter(f"train {self.run_dir}", self.total_steps(), initial=self.step)


def _clone(state: Any) -> Any:
    """A deep copy of a state dict (tensors cloned), so that later steps do not change it."""
    import copy

    return copy.deepcopy(state)


def _clip(params: list[nn.Parameter], max_norm: float) -> float:
    grads = [p for p in params if p.grad is not None]
    if not grads:
        return 0.0
    if max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(grads, max_norm))
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in grads])))
