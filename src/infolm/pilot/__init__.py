"""Paired pilots: several arms continued from one checkpoint on common random numbers, compared on valid.

``infolm pilot RUN --arm mle: --arm imm:objective.imm.weight=0.2 --steps 200 --eval-every 50 --out DIR``
continues the run in ``RUN`` (a run directory of ``infolm train``) once per arm, for the same number of
steps, and reports each arm's validation metrics minus the control arm's, evaluation by evaluation: a
cheap screen of regularizer settings (IMM weights, noising, BMI, plain MLE) before multi-seed runs.

An arm is a name and dotted overrides of the run's ``config.yaml``, as ``infolm train`` takes them
(``key=value``, ``~key`` removes a key): ``--arm NAME:OVERRIDES``, several overrides separated by spaces
in one quoted argument (``--arm 'noise:~objective.mle objective.noising.gamma0=0.2'``); ``--arm mle:``
continues the run's own config. An arm may not set ``run.*``, ``data.*``, ``task.*`` or the training
length and cadence (``train.max_steps``, ``epochs``, ``eval_every``, ``early_stopping``, checkpointing):
the pilot sets those, the same for every arm. ``--arms FILE`` reads arms from YAML (see ``read_arms_file``);
``--only A,B`` keeps the control and arms A and B of them, so that one file's arms can be split over processes
(each with an ``--out`` of its own: every process trains its own copy of the control).

What every arm shares (common random numbers, so that arm − control measures the arm's settings):

* the checkpoint's weights (``--from last``: the latest step checkpoint's training weights, the default;
  ``--from best``: ``best/``'s, which are the averaged ones in a run that averages weights, unless it keeps
  its training weights for divergence restarts), the objective state of the terms the run trained, the
  step counter;
* the data: the position of the checkpoint's batches (the step checkpoint of ``best/``'s step when
  ``--from best``; without one, the task's batches from their first epoch) and its carried state;
* the primary pass's randomness: Python, numpy and torch are seeded with ``--seed`` (default: the run's
  seed) at the start of every arm, as a fresh ``infolm train`` does, and each objective term draws from
  a stream of its own (``objectives/own_streams.py``: the global generators' state is saved around each
  term's ``transform_batch`` and ``forward`` and the term's own state put in its place). The trainer's one
  pass through the model therefore draws the same dropout masks at every step in every arm, whatever
  the terms draw;
* the evaluation: the task's own ``evaluate`` on valid, at the start and at every step that is a multiple
  of ``--eval-every`` (``Trainer``'s cadence) and at the last step.

The optimizer: ``--optimizer checkpoint`` (default) continues the checkpoint's optimizer state (moments,
momentum buffers) under the arm's own settings (``optim.lr``, ``weight_decay``, ... as the arm's config
says); an objective term's own optimizer (BMI's discriminator) is continued only when the arm trains the
run's terms. ``--optimizer fresh`` starts every optimizer afresh. The learning-rate schedule starts afresh
from the arm's ``optim.lr`` (no plateau history; a schedule over the run, ``warmup-linear``, runs over the
checkpoint's steps plus the pilot's).

So two arms with one config give the same curve bit for bit on CPU (on a GPU, as far as its kernels are
deterministic: ``run.deterministic``). Arms run one after another in one process.

Each arm is trained by the ``Trainer`` in its own run directory ``OUT/NAME/`` (config, metrics.jsonl, its
last step checkpoint, best/); ``OUT/NAME.jsonl`` holds one line per evaluation with the arm's values and
its differences from the control, and ``OUT/pilot.json`` the whole result with its job (command line,
commit, machine, each arm's wall time).
"""

from infolm.pilot.arms import Arm, check_arms, make_arm, parse_arm, read_arms_file, select_arms
from infolm.pilot.report import finite, paired_differences, table
from infolm.pilot.run import OPTIMIZER_STATES, STARTS, PilotSettings, run_pilot

__all__ = [
    "OPTIMIZER_STATES",
    "STARTS",
    "Arm",
    "PilotSettings",
    "check_arms",
    "finite",
    "make_arm",
    "paired_differences",
    "parse_arm",
    "read_arms_file",
    "run_pilot",
    "select_arms",
    "table",
]
