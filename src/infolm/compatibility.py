"""Which (task, model, objective) combinations can train together, decided from the config alone.

Each plug-in declares its side: a task what its batches provide (``Task.provides``), which model
protocols it serves (``Task.serves``) and how long its rows can be (``Task.input_length``); a model
its protocol and longest input (``LanguageModel.protocol``, ``max_input_length``); an objective
what it needs from a batch (``Objective.needs``), which model protocols it trains
(``Objective.protocols``) and how long the rows it feeds the model itself are
(``Objective.extra_input_length``). A mismatch is refused with one line naming both
sides and what would fit.
"""

from __future__ import annotations

from typing import Any

from infolm.config import Config, DataConfig
from infolm.errors import InfolmError


def _plugins() -> tuple[Any, Any, Any]:
    from infolm.models import MODELS
    from infolm.objectives import OBJECTIVES
    from infolm.tasks import TASKS

    return TASKS, MODELS, OBJECTIVES


def incompatibility(
    task_name: str,
    task_config: Any,
    model_name: str,
    model_config: Any,
    objective_configs: dict[str, Any],
    data: DataConfig,
) -> str | None:
    """Why ``task_name`` cannot train ``model_name`` with the objective terms ``objective_configs``
    (name -> settings dataclass) (None: it can)."""
    tasks, models, objectives = _plugins()
    task = tasks.get(task_name).factory
    model = models.get(model_name).factory
    if model.protocol not in task.serves:
        fitting = [n for n in models.names() if models.get(n).factory.protocol in task.serves]
        other = [n for n in tasks.names() if model.protocol in tasks.get(n).factory.serves]
        return (
            f"task {task_name} serves {', '.join(sorted(task.serves))} models, but model {model_name} is a "
            f"{model.protocol} model; models that fit: {', '.join(fitting) or 'none'}; tasks for {model_name}: "
            f"{', '.join(other) or 'none'}"
        )
    for name in objective_configs:
        protocols = objectives.get(name).factory.protocols
        if model.protocol not in protocols:
            fitting = [n for n in models.names() if models.get(n).factory.protocol in protocols]
            return (
                f"objective {name} trains {', '.join(sorted(protocols))} models, but model {model_name} is a "
                f"{model.protocol} model; models that fit: {', '.join(fitting) or 'none'}"
            )
        needs = set(objectives.get(name).factory.needs)
        missing = sorted(needs - set(task.provides))
        if missing:
            from infolm.tasks import FEATURES

            other = [n for n in tasks.names() if needs <= tasks.get(n).factory.provides]
            return (
                f"objective {name} needs {FEATURES.get(missing[0], missing[0])} ({missing[0]}), which task "
                f"{task_name} does not provide; tasks that do: {', '.join(other) or 'none'}"
            )
    limit = model.max_input_length(model_config)
    if limit is not None:
        length = task.input_length(task_config, data)
        if length is None or length > limit:
            rows = "rows of unbounded length" if length is None else f"rows of up to {length} tokens"
            return (
                f"task {task_name} feeds {rows}, but model {model_name} reads at most {limit} tokens "
                f"(model.max_len); set {task.length_setting()} <= {limit} or raise model.max_len"
            )
        for name, settings in objective_configs.items():
            extra = objectives.get(name).factory.extra_input_length(settings)
            if extra is None or extra > limit:
                rows = "whole sentences of any length" if extra is None else f"rows of up to {extra} tokens"
                return (
                    f"objective {name} feeds model {model_name} {rows} of its own, but the model reads at most "
                    f"{limit} tokens (model.max_len); raise model.max_len or use a model without a length limit"
                )
    return None


def check_compatibility(config: Config) -> None:
    """Refuse a config whose task cannot serve its model or objectives (one line, no torch work)."""
    tasks, models, objectives = _plugins()
    task_name, model_name = config.task["name"], config.model["name"]
    task_config = tasks.make_config(task_name, _settings(config.task), "task")
    model_config = models.make_config(model_name, _settings(config.model), "model")
    terms = {n: objectives.make_config(n, s or {}, f"objective.{n}") for n, s in config.objective.items()}
    reason = incompatibility(task_name, task_config, model_name, model_config, terms, config.data)
    if reason is not None:
        raise InfolmError(reason)


def _settings(section: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in section.items() if k != "name"}
