"""A grid sweep: the params tuned afresh at every grid point (e.g. lr per λ), as the thesis tunes each point
of a frontier (Melis thesis Sec. 5.7.1 and App. 5.C); the frontier is the best trial of each point.

Grid point ``i`` is its own single-objective study, ``NAME/point-II`` in ``DIR/study.db``, minimising (or
maximising) the first objective with the point's values as fixed overrides; its trials train in
``DIR/trial-pII-NNNN``. The points take turns, one trial each per round, so that a sweep cut short has
tuned every point about equally.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from infolm.errors import InfolmError
from infolm.sweep.spec import Sweep
from infolm.sweep.study import finished, open_study, stop_if_refused, trial_objective


def point_seed(seed: int, point: int) -> int:
    """The sampler seed of grid point ``point``: its own stream, fixed by the sweep's ``seed``."""
    import numpy as np

    return int(np.random.SeedSequence([seed, 1 + point]).generate_state(1)[0])


def run_grid(sweep: Sweep, write_outputs: Callable[[list[tuple[int | None, Any]]], None]) -> list[Any]:
    """Run (or resume) every grid point's study to ``trials_per_point`` finished trials; the studies."""
    config = sweep.config
    assert config.trials_per_point is not None
    out = Path(config.dir)
    studies, objectives = [], []
    for index, point in enumerate(sweep.points):

        def trial_dir(number: int, index: int = index) -> Path:
            return out / f"trial-p{index:02d}-{number:04d}"

        name = f"{config.name}/point-{index:02d}"
        study = open_study(sweep, name, sweep.directions[:1], point_seed(config.seed, index), trial_dir)
        stored = study.user_attrs.get("grid")
        if stored is None:
            study.set_user_attr("grid", point)
        elif stored != point:
            raise InfolmError(
                f"{config.dir}/study.db: grid point {index} was swept at {stored}, the sweep file now says {point}; "
                "use another dir or name"
            )
        studies.append(study)
        objectives.append(trial_objective(sweep, point, trial_dir, scored=0))

    def callback(*_: Any) -> None:
        write_outputs([(index, t) for index, study in enumerate(studies) for t in study.trials])

    for round_ in range(config.trials_per_point):
        for study, objective in zip(studies, objectives):
            if finished(study) <= round_:
                before = len(study.trials)
                study.optimize(objective, n_trials=1, catch=(InfolmError,), callbacks=[callback])
                stop_if_refused(study, before)
    callback()
    return studies
