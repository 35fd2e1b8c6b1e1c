"""Typed, documented configuration: YAML -> dataclasses, dotted ``key=value`` overrides, validation.

Plug-in sections (``task``, ``model``, ``objective``, ``optim.average``) are mappings whose settings are
validated against the config dataclass that the plug-in registered (see ``infolm.registry``).
This module does not import torch.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infolm.errors import InfolmError


@dataclasses.dataclass
class RunConfig:
    dir: str = "runs/default"  # run directory: config.yaml, metrics.jsonl, checkpoints/
    seed: int = 0  # seeds python, numpy and torch
    device: str = "auto"  # cpu | cuda | auto (cuda when available)
    deterministic: bool = False  # torch.use_deterministic_algorithms
    init_from: str | None = None  # start from another run's evaluation weights (AWD-LSTM fine-tuning phase)
    keep_freed_memory: bool = True  # CPU: glibc keeps freed memory for reuse (training/allocator.py)

    def __post_init__(self) -> None:
        _check_choice("run.device", self.device, ("cpu", "cuda", "auto"))


@dataclasses.dataclass
class DataConfig:
    name: str = "ptb"  # a registered dataset (see `infolm info`) or "path" for your own files
    train: str | None = None  # with name=path: training text file
    valid: str | None = None  # with name=path: validation text file
    test: str | None = None  # with name=path: test text file
    level: str = "word"  # with name=path: word (whitespace tokens, <eos> per line) or char
    min_count: int = 1  # tokens seen fewer times in train are read as <unk> (1: keep every token of train)
    max_vocab: int | None = None  # keep the most frequent tokens, <eos> and <unk> included (ties: first seen)
    batch_size: int = 20  # parallel training streams
    eval_batch_size: int = 10  # parallel evaluation streams
    bptt: int = 35  # unrolled steps per training batch
    variable_bptt: bool = False  # AWD-LSTM: bptt/2 with p=0.05, then N(len, 5); lr scaled by len/bptt
    max_train_tokens: int | None = None  # use only the first N training tokens (quick runs)
    max_eval_tokens: int | None = None  # use only the first N tokens of valid/test (quick runs)
    extra_tokens: list[str] = dataclasses.field(
        default_factory=list
    )  # appended to the vocabulary, never in the text (blank noising's <_>)

    def __post_init__(self) -> None:
        _check_choice("data.level", self.level, ("word", "char"))
        _check_positive("data.batch_size", self.batch_size)
        _check_positive("data.eval_batch_size", self.eval_batch_size)
        _check_positive("data.bptt", self.bptt)
        if self.min_count < 1:
            raise InfolmError(f"data.min_count must be at least 1 (1 keeps every token of train), got {self.min_count}")
        if self.max_vocab is not None and self.max_vocab < 3:
            raise InfolmError(f"data.max_vocab must be at least 3 (<eos>, <unk> and one token), got {self.max_vocab}")
        for key in ("max_train_tokens", "max_eval_tokens"):
            value = getattr(self, key)
            if value is not None and value < 2:
                raise InfolmError(f"data.{key} must be at least 2, got {value}")


@dataclasses.dataclass
class OptimConfig:
    name: str = "sgd"  # sgd | adam | adamw | radam
    lr: float = 20.0  # learning rate (per-token mean loss)
    momentum: float = 0.0  # SGD momentum
    weight_decay: float = 0.0  # L2 (sgd, adam, radam) or decoupled (adamw)
    betas: list[float] = dataclasses.field(default_factory=lambda: [0.9, 0.999])  # Adam-family betas
    eps: float = 1e-8  # Adam-family epsilon
    # none | step (decay per epoch after decay_start_epoch) | plateau | warmup-linear (linear warmup
    # to lr, then linear decay to 0 at the run's last step: BERT, InfoWord)
    schedule: str = "none"
    decay: float = 0.5  # multiplicative LR decay (step and plateau)
    decay_start_epoch: int = 4  # step: decay at the end of each epoch after this many epochs
    plateau_patience: int = 0  # plateau: evaluations without improvement before decaying
    # plateau: on each decay, reload the best evaluation's weights (Zaremba et al.'s and Xie et al.'s
    # code, and the IMM authors' released code, which builds on them); the optimizer state is kept
    plateau_restore_best: bool = False
    warmup_steps: int = 0  # warmup-linear: updates of linear warmup (0: use warmup_fraction)
    warmup_fraction: float = 0.0  # warmup-linear: warmup as a fraction of the run's total updates
    average: dict[str, Any] = dataclasses.field(
        default_factory=dict
    )  # weight averaging: {name: two-tailed|tail|ema, ...}

    def __post_init__(self) -> None:
        _check_choice("optim.name", self.name, ("sgd", "adam", "adamw", "radam"))
        _check_choice("optim.schedule", self.schedule, ("none", "step", "plateau", "warmup-linear"))
        _check_positive("optim.warmup_steps", self.warmup_steps, allow_zero=True)
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise InfolmError(f"optim.warmup_fraction must be in [0, 1), got {self.warmup_fraction}")
        if self.warmup_steps and self.warmup_fraction:
            raise InfolmError(
                "optim.warmup_steps and optim.warmup_fraction are both set; give one of them "
                f"(got {self.warmup_steps} and {self.warmup_fraction})"
            )
        if (self.warmup_steps or self.warmup_fraction) and self.schedule != "warmup-linear":
            raise InfolmError(
                f"optim.warmup_steps / optim.warmup_fraction need optim.schedule=warmup-linear, got {self.schedule!r}"
            )
        if self.plateau_restore_best and self.schedule != "plateau":
            raise InfolmError(f"optim.plateau_restore_best needs optim.schedule=plateau, got {self.schedule!r}")
        if self.plateau_restore_best and self.average:
            # best/ then holds averaged weights and the averager would keep every iterate since the best
            raise InfolmError("optim.plateau_restore_best cannot be combined with optim.average (weight averaging)")
        _check_positive("optim.lr", self.lr, allow_zero=True)
        if not 0.0 < self.decay <= 1.0:
            raise InfolmError(f"optim.decay must be in (0, 1], got {self.decay}")
        if len(self.betas) != 2:
            raise InfolmError(f"optim.betas must have two values, got {self.betas}")


@dataclasses.dataclass
class TrainConfig:
    epochs: int = 1  # passes over the training stream
    max_steps: int | None = None  # stop after this many optimizer steps (overrides epochs when reached first)
    eval_every: int = 0  # evaluate on validation every N steps (0: at the end of each epoch)
    checkpoint_every: int = 0  # checkpoint every N steps (0: after each evaluation)
    # also checkpoint once this many minutes have passed since the last checkpoint (0 or null: off), so an
    # interrupt or a crash loses at most that much training; a checkpoint takes seconds to write, so 10
    # minutes costs well under 1% of the time while runs of hours between evaluations stay safe
    checkpoint_minutes: float | None = 10.0
    keep_checkpoints: int = 2  # most recent checkpoints kept (the best is kept as well)
    clip: float = 0.25  # gradient norm clip of the main objective (0: off)
    early_stopping: int = 0  # stop after N evaluations without improvement (0: off)
    # evaluations before this step neither count toward early stopping nor decay a plateau schedule
    # (e.g. while KL annealing still raises the KL weight); best/ is tracked from the start
    patience_from_step: int = 0
    precision: str = "fp32"  # fp32 | bf16 (autocast)
    log_every: int = 50  # write a step record to metrics.jsonl every N steps
    progress: bool = True  # progress bar on interactive terminals
    tensorboard: bool = False  # mirror metrics to TensorBoard (run.dir/tb)
    divergence: dict[str, Any] = dataclasses.field(
        default_factory=dict
    )  # restarts (Melis Sec. 4.4): {enabled: true, ...}

    def __post_init__(self) -> None:
        _check_positive("train.epochs", self.epochs)
        if self.max_steps is not None:
            _check_positive("train.max_steps", self.max_steps)
        for key in ("eval_every", "checkpoint_every", "early_stopping", "patience_from_step"):
            _check_positive(f"train.{key}", getattr(self, key), allow_zero=True)
        _check_positive("train.keep_checkpoints", self.keep_checkpoints)
        if self.checkpoint_minutes is not None:
            _check_positive("train.checkpoint_minutes", self.checkpoint_minutes, allow_zero=True)
        _check_positive("train.log_every", self.log_every)
        _check_positive("train.clip", self.clip, allow_zero=True)
        _check_choice("train.precision", self.precision, ("fp32", "bf16"))


@dataclasses.dataclass
class Config:
    run: RunConfig = dataclasses.field(default_factory=RunConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    task: dict[str, Any] = dataclasses.field(default_factory=lambda: {"name": "stream-lm"})  # name + task settings
    model: dict[str, Any] = dataclasses.field(default_factory=lambda: {"name": "lstm"})  # name + model settings
    objective: dict[str, Any] = dataclasses.field(default_factory=lambda: {"mle": {"weight": 1.0}})  # term -> settings
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        if "name" not in self.task or not isinstance(self.task["name"], str):
            raise InfolmError("task.name is required (see `infolm info` for the known tasks)")
        if "name" not in self.model or not isinstance(self.model["name"], str):
            raise InfolmError("model.name is required (see `infolm info` for the known models)")
        if not self.objective:
            raise InfolmError("objective must name at least one term, e.g. objective.mle.weight=1.0")
        warmup, max_steps = self.optim.warmup_steps, self.train.max_steps
        if warmup and max_steps is not None and warmup >= max_steps:
            raise InfolmError(
                f"optim.warmup_steps ({warmup}) must be less than train.max_steps ({max_steps}); "
                "lower it or use optim.warmup_fraction"
            )
        for term, settings in self.objective.items():
            if settings is not None and not isinstance(settings, Mapping):
                raise InfolmError(f"objective.{term} must be a mapping of settings, got {settings!r}")


def _check_choice(key: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise InfolmError(f"{key} must be one of {', '.join(choices)}; got {value!r}")


def _check_positive(key: str, value: float, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise InfolmError(f"{key} must be {'non-negative' if allow_zero else 'positive'}, got {value}")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; ints are accepted for floats."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except InfolmError as error:
                errors.append(str(error))
        raise InfolmError(errors[0] if errors else f"{key}: bad value {value!r}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            raise InfolmError(f"{key} must be a mapping, got {value!r}")
        return build_dataclass(tp, value, key)
    if origin in (list, tuple, Sequence):
        if not isinstance(value, (list, tuple)):
            raise InfolmError(f"{key} must be a list, got {value!r}")
        (item_tp,) = typing.get_args(tp)[:1] or (Any,)
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise InfolmError(f"{key} must be a mapping, got {value!r}")
        return {str(k): v for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
    else:
        return value
    raise InfolmError(f"{key} must be of type {_type_name(tp)}, got {value!r}")


def build_dataclass(cls: type, values: Mapping[str, Any], where: str) -> Any:
    """Instantiate dataclass ``cls`` from a mapping, rejecting unknown keys and wrong types."""
    if not isinstance(values, Mapping):
        raise InfolmError(f"{where} must be a mapping, got {values!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise InfolmError(
            f"unknown config key {where}.{unknown[0]}; known keys in {where}: {', '.join(sorted(fields))}"
        )
    kwargs = {name: _coerce(value, hints[name], f"{where}.{name}") for name, value in values.items()}
    try:
        return cls(**kwargs)
    except InfolmError:
        raise
    except (TypeError, ValueError) as error:
        raise InfolmError(f"{where}: {error}") from None


def to_dict(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def _remove_key(config: dict[str, Any], item: str) -> dict[str, Any]:
    """``~a.b`` (Hydra's convention): a copy of ``config`` without the dotted key ``a.b``."""
    dotted = item[1:]
    if not dotted or "=" in dotted:
        raise InfolmError(f"override {item!r}: removing a key takes its dotted name alone, e.g. ~objective.mle")
    *parents, last = dotted.split(".")
    out = dict(config)
    node = out
    for part in parents:
        child = node.get(part)
        if not isinstance(child, Mapping):
            raise InfolmError(f"override {item!r}: the config has no key {dotted}")
        node[part] = dict(child)
        node = node[part]
    if last not in node:
        raise InfolmError(f"override {item!r}: the config has no key {dotted}")
    del node[last]
    return out


def _parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise InfolmError(f"override {item!r} is not of the form key=value")
    try:
        merged = OmegaConf.to_container(OmegaConf.from_dotlist(list(overrides)), resolve=True)
    except OmegaConfBaseException as error:
        raise InfolmError(f"bad override: {str(error).splitlines()[0]}") from None
    assert isinstance(merged, dict)
    return {str(k): v for k, v in merged.items()}


def load_raw(path: str | Path | None, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """YAML file merged with dotted overrides, as plain containers (overrides win; ``~key`` removes a
    key of the file, e.g. a term of the objective)."""
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    base: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise InfolmError(f"config file not found: {path}")
        try:
            loaded = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        except yaml.MarkedYAMLError as error:
            raise InfolmError(f"cannot parse config {path}: {_yaml_problem(error)}") from None
        except (OmegaConfBaseException, yaml.YAMLError, UnicodeDecodeError, ValueError) as error:
            raise InfolmError(f"cannot parse config {path}: {str(error).splitlines()[0]}") from None
        except OSError as error:
            raise InfolmError(f"cannot read config {path}: {error.strerror}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise InfolmError(f"config {path} must be a mapping at the top level")
        base = {str(k): v for k, v in loaded.items()}
    for item in overrides:
        if item.startswith("~"):
            base = _remove_key(base, item)
    return _deep_merge(base, _parse_overrides([item for item in overrides if not item.startswith("~")]))


def merge_notes(path: str | Path | None, overrides: Sequence[str]) -> list[str]:
    """One line per ``key={...}`` override that merges into a mapping of the file rather than replacing
    it, naming what the file keeps there (e.g. ``objective={noising: {}}`` keeps the file's ``mle``)."""
    written = [item.split("=", 1) for item in overrides if not item.startswith("~") and "=" in item]
    mappings = [(key, value) for key, value in written if value.lstrip().startswith("{")]
    if path is None or not mappings:
        return []
    base = load_raw(path, [item for item in overrides if item.startswith("~")])
    notes = []
    for key, value in mappings:
        section: Any = base
        for part in key.split("."):
            section = section.get(part) if isinstance(section, Mapping) else None
        given = _parse_overrides([f"{key}={value}"])
        for part in key.split("."):
            given = given.get(part, {}) if isinstance(given, Mapping) else {}
        kept = [str(k) for k in section if k not in given] if isinstance(section, Mapping) else []
        if kept:
            drop = " ".join(f"~{key}.{k}" for k in kept)
            notes.append(
                f"{key}={{...}} merges into the config's {key}; kept from the file: {', '.join(kept)} ({drop} drops it)"
            )
    return notes


def _yaml_problem(error: Any) -> str:
    """``line L, column C: problem`` of a YAML syntax error (1-based, as editors count)."""
    mark = error.problem_mark or error.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{error.problem or error.context or 'invalid YAML'}"


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> Config:
    """Load ``path`` (YAML), apply ``key=value`` overrides, validate into a :class:`Config`."""
    config: Config = build_dataclass(Config, load_raw(path, overrides), "config")
    return config


def save_config(config: Config, path: str | Path) -> None:
    import yaml

    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))
