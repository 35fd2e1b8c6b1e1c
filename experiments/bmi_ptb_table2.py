"""BMI Tables 1-2 (Cao & Xu): AWD-LSTM-MoS baseline vs BMI-base vs BMI-full on PTB, several seeds.

Each arm trains from scratch with ``configs/ptb/bmi-{baseline,base,full}.yaml`` (the CPU-sized
AWD-LSTM-MoS of those configs) under one of two budgets:

* ``converged`` (the default): the paper's protocol run to its end at CPU scale. SGD until the NT-ASGD
  condition fires, then averaging; BMI-full switches to Phase I + IW-RAML at the same evaluation (both
  watch the same validation losses with nonmono 5, Sec. 5). Validation every 550 steps, about a quarter
  epoch, on the first 20,000 validation tokens (the paper validates once an epoch over 1000 epochs; at
  our 12-minute epochs that would put the switch 6 epochs after the best loss). The run ends by early
  stopping or at 15 epochs. The trigger fires up to 6 validations after the best loss, so early
  stopping waits for 14 validations without a better loss: a run that stops early has 8 validations
  (about two epochs) after the switch. A run that reaches 15 epochs with fewer (its averaged weights
  still improving after a late switch, or no switch at all) is extended by 5 epochs at a time, up to
  40, until it has them. ``optim.average.latest`` is off: the switch is the NT-ASGD condition
  alone, as Merity et al. (the thesis's 80% rule is not BMI's).
* ``mid``: the protocol's mid scale (``configs/ptb/bmi-ARM-mid.yaml``, 3.82M parameters), records in
  ``experiments/records/bmi-ptb-table2-mid``. Every run the same 20,000 steps (about 8.7 epochs) with no early
  stopping, validation every 550 steps, and one averaging start for every arm and seed, the iterates after
  step 12,000, BMI-full's Phase II from the same step (chosen before its runs: the NT-ASGD trigger's step
  decided the CPU-scale outcome as much as the regularizer). Its arms include the placebo and the BMI arms
  at the WT2 weight 0.02 (``base-w0.02``, ``full-w0.02``: an arm name ``ARM-wW`` is ARM's config with BMI
  weight W); it scores no real-text row (the converged budget's stands for every scale)::

      OMP_NUM_THREADS=1 python experiments/bmi_ptb_table2.py train --budget mid --seeds 0

* ``smoke``: 100 steps, switch at step 50 (the earlier table; it shows that the code runs, nothing more).

The arms (control first) and seeds are those that ``experiments/protocols/bmi.yaml`` reads from this
driver's records; the protocol's ``real`` arm (real training text) is scored, not trained.

``train`` runs the arms (resuming a run directory that was cut) and scores each finished run once,
into ``OUT/ARM-sSEED.score.json``: valid and test perplexity of the evaluation weights (``best/``: the
averaged weights once they beat every earlier validation) on the full splits (converged) or on the
configs' 20,000-token prefixes (smoke); reverse perplexity (Sec. 5.1: a fresh LSTM trained on
``gen_tokens`` generated tokens, scored on real valid and test); the segment MI lower bound of the
same generations and of as many real training tokens (``real-sSEED``; Sec. 5.2); the discriminator's
accuracy and minibatch MINE bound over the last tenth of training (BMI arms); the step of the
averaging switch and of BMI-full's Phase II. The comparison tables, against the paper's numbers and
paired over seeds, are generated from the records: ``python -m experiments.report bmi`` writes
``docs/reproductions/bmi.md``. ``table`` prints what the page does not show, per run (a run
directory of ``--out`` or a record): the averaging switch and Phase II steps (flagging a run whose
switch never came or where the two differ), the time per step of each phase against the baseline's,
and with ``--png`` the validation curves, whole and after the switch (the paper's Fig. 2)::

    OMP_NUM_THREADS=1 python experiments/bmi_ptb_table2.py train --seeds 0   # OUT: runs/bmi-ptb-table2-converged
    python -m experiments.report bmi
    python experiments/bmi_ptb_table2.py table --png docs/img/bmi_ptb_table2.png

Studies beside the protocol, each in an ``--out`` of its own (never archived into the protocol's records,
and a recorded protocol run does not stand for one): ``--arms placebo`` adds Phase I's placebo
(``configs/ptb/bmi-placebo.yaml``: D_theta trains as in BMI-base, the LM gets no gradient from it);
``--switch-step N`` gives every arm one fixed averaging start (the iterates from step N + 1) and BMI-full
its Phase II from the same step, instead of each run's NT-ASGD trigger; ``--bmi-weight W`` sets the BMI
arms' weight (paper: 0.1 on PTB, the configs' value; 0.02 on WT2), the baseline left as it is;
``--scale mid`` trains ``configs/ptb/bmi-ARM-mid.yaml`` (3.8M parameters, ~10 minutes an epoch on one core)::

    OMP_NUM_THREADS=1 python experiments/bmi_ptb_table2.py train --out runs/bmi-fixed-switch \\
        --arms baseline base full placebo --seeds 0 --switch-step 16000

``--out`` defaults to ``runs/bmi-ptb-table2-BUDGET``; a folder holds one budget (``train`` refuses to mix
them). Two ``train`` processes with different ``--seeds`` may share it (each writes only its own files).

A converged run takes hours, so its results are kept as records (``infolm.training.records``):
``train`` copies each converged run's config, log and summary with its score file (as ``score.json``),
and the real-data scores, into ``experiments/records/bmi-ptb-table2-BUDGET/`` as soon as they are scored
(a machine lost before the next commit still leaves them in the working tree; the real-text scores as
``real-sSEED/score.json``); ``archive`` does the
same for every scored run of ``--out`` (the smoke budget's, or runs scored before). ``train`` does not train
a recorded arm again, and ``table`` reads the records beside ``--out``'s runs (a run directory stands
for a record of the same name)::

    python experiments/bmi_ptb_table2.py archive --out runs/bmi-ptb-table2-converged
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from infolm.build import load_run
from infolm.errors import InfolmError
from infolm.evaluation.mi import MIEstimatorConfig, estimate_segment_mi, generate_texts
from infolm.evaluation.perplexity import evaluate_split, stream_nll
from infolm.evaluation.reverse_ppl import ReversePPLConfig, train_fresh_lm
from infolm.training.metrics import read_metrics
from infolm.training.records import archive_run, is_record, runs_and_records
from infolm.training.run_lock import run_dir_in_use

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the repository's ``experiments`` package
    sys.path.insert(0, str(ROOT))

from experiments.reproduce.jobs import run_command  # noqa: E402
from experiments.reproduce.protocol import load_protocol, runs_of  # noqa: E402
from experiments.reproduce.provenance import git_commit, machine_line  # noqa: E402

SCORE = "score.json"  # a record's copy of OUT/ARM-sSEED.score.json


def records_name(budget: str) -> str:
    """The name of ``budget``'s records folder, as the protocol names it."""
    return f"bmi-ptb-table2-{budget}"


def records_of(budget: str) -> Path:
    """The repository's folder of archived runs of ``budget``."""
    return ROOT / "experiments" / "records" / records_name(budget)


def recorded_score(records: Path, name: str) -> Path | None:
    """The score file that ``records`` keeps for ``name`` (``ARM-sSEED`` or ``real-sSEED``), if any."""
    path = records / name / SCORE
    return path if path.is_file() else None


REAL = "real"  # the protocol's arm for real training text: scored (MI, reverse perplexity), never trained


def protocol_pairs(budget: str) -> list[tuple[str, int]]:
    """The (arm, seed) pairs ``experiments/protocols/bmi.yaml`` reads from ``budget``'s records."""
    return runs_of(load_protocol("bmi"), records=records_name(budget))


def protocol_runs(budget: str = "converged") -> tuple[tuple[str, ...], list[int]]:
    """The trained arms (control first) and the seeds that ``experiments/protocols/bmi.yaml`` reads from
    this driver's records; the real-text row is scored beside every seed's baseline."""
    runs = protocol_pairs(budget)
    arms = tuple(dict.fromkeys(arm for arm, _ in runs if arm != REAL))
    seeds = sorted({seed for _, seed in runs})
    return arms, seeds


def scores_real(budget: str) -> bool:
    """Whether ``train`` scores the real-text row under ``budget``: where the protocol reads it from the
    budget's records, or reads none of them (the smoke budget); the text is the same at every model scale."""
    runs = protocol_pairs(budget)
    return not runs or any(arm == REAL for arm, _ in runs)


def budget_runs(budget: str) -> tuple[tuple[str, ...], list[int]]:
    """The arms and seeds ``train`` runs by default under ``budget``: those the protocol reads from its records
    (the converged budget's where the protocol reads none of them: the smoke budget)."""
    arms, seeds = protocol_runs(budget)
    return (arms, seeds) if arms else protocol_runs("converged")


ARMS, SEEDS = protocol_runs()
MID_ARMS, _ = protocol_runs("mid")
# Arms the protocol does not read, trained only when asked (``--arms``): Phase I's placebo
# (``configs/ptb/bmi-placebo.yaml``: D_theta trains as in BMI-base, the LM gets no gradient from it).
EXTRA_ARMS = ("placebo",)
# The arms' configs with a Phase II (IW-RAML), which the budgets and studies start at the averaging switch:
# BMI-full and its zeroed-reward control (``objective.bmi.reward: none``, mid scale only)
PHASE2_CONFIGS = ("full", "full-reward-none")
# Model sizes: the protocol's CPU size (configs/ptb/bmi-ARM.yaml), and a proposed mid size
# (configs/ptb/bmi-ARM-mid.yaml: 3.8M parameters, meant to beat the Kneser-Ney 5-gram; a study)
SCALES = {"cpu": "", "mid": "-mid"}
LOG_EVERY = 20  # steps between step records in the converged budget (the configs: 4); the smoke budget keeps 4
MID_STEPS, MID_SWITCH = 20_000, 12_000  # the mid budget: steps of every run, and the last step before averaging


@dataclass
class Budget:
    train: list[str]  # overrides of every arm
    full_phase2: list[str]  # extra overrides of the arms with a Phase II (PHASE2_CONFIGS)
    gen_tokens: int  # generated tokens per model (the paper: 6M)
    reverse: dict[str, Any]  # ReversePPLConfig fields of the fresh LM
    mi: dict[str, Any]  # MIEstimatorConfig fields
    full_splits: bool  # score all of valid and test (else the configs' prefixes)
    epochs: int | None = None  # the first epoch limit (None: a step budget, never extended)
    keep_records: bool = False  # ``train`` archives each run into the repository's records once scored
    config_suffix: str = ""  # the arms' configs: configs/ptb/bmi-ARM{suffix}.yaml


BUDGETS = {
    "converged": Budget(
        train=[
            "train.max_steps=null",
            # about a quarter epoch: 929,589 training tokens / (batch 12 x ~33.6, the mean of the variable
            # bptt after truncation) = ~2,300 steps per epoch
            "train.eval_every=550",
            # the NT-ASGD trigger fires up to nonmono + 1 = 6 validations after the best loss, and the count
            # of validations without a better loss is not reset there: 14 leaves 8 after the switch
            "train.early_stopping=14",
            "optim.average.latest=0",
            f"train.log_every={LOG_EVERY}",
        ],
        full_phase2=[],  # Phase II at the NT-ASGD condition, the configs' own setting
        gen_tokens=500_000,
        # the fresh LM: a 1x128 tied LSTM, 3 passes (the paper: an RNN-LM on 6M tokens)
        reverse={"lm": {"name": "lstm", "emb": 128, "hidden": 128, "layers": 1, "dropout": 0.2}, "epochs": 3},
        mi={"steps": 1000},  # 10 folds as the paper; at most 1000 critic updates per fold (library: 2000)
        full_splits=True,
        epochs=15,
        keep_records=True,
    ),
    # The mid scale (configs/ptb/bmi-ARM-mid.yaml, 3.82M parameters), with the choices made before any of its
    # runs: a fixed step budget and one fixed averaging start for every arm and seed (the NT-ASGD trigger of
    # the converged budget fired 12.1k-20.9k steps into its runs, and the arms' gaps opened only after it).
    "mid": Budget(
        train=[
            # ~8.7 epochs of ~2,300 steps: ~1.5 hours of the baseline on one core (0.27 s per step)
            f"train.max_steps={MID_STEPS}",
            "train.eval_every=550",  # about a quarter epoch, as the converged budget
            "train.early_stopping=0",  # a fixed budget: every run ends at the same step
            "optim.average.nonmono=0",
            f"optim.average.start={MID_SWITCH + 1}",  # the iterates from step MID_SWITCH + 1 on are averaged
            "optim.average.latest=0",
            f"train.log_every={LOG_EVERY}",
        ],
        full_phase2=[f"objective.bmi.phase2_start={MID_SWITCH}"],  # Phase II from the same step on
        gen_tokens=500_000,
        reverse={"lm": {"name": "lstm", "emb": 128, "hidden": 128, "layers": 1, "dropout": 0.2}, "epochs": 3},
        mi={"steps": 1000},
        full_splits=True,
        keep_records=True,
        config_suffix="-mid",
    ),
    "smoke": Budget(
        train=["train.max_steps=100", "train.eval_every=0", "optim.average.nonmono=0", "optim.average.start=50"],
        full_phase2=["objective.bmi.phase2_start=50"],
        gen_tokens=20_000,
        reverse={"lm": {"name": "lstm", "emb": 64, "hidden": 64, "layers": 1, "dropout": 0.2}, "epochs": 2},
        mi={"folds": 5, "steps": 300, "eval_every": 25, "patience": 4},
        full_splits=False,
    ),
}


def arm_and_weight(arm: str) -> tuple[str, float | None]:
    """An arm's config name and the BMI weight its name sets: ``base-w0.02`` -> ``('base', 0.02)``, ``full`` ->
    ``('full', None)`` (the config's weight: the paper's 0.1 on PTB)."""
    name, marker, weight = arm.rpartition("-w")
    if marker and name:
        try:
            return name, float(weight)
        except ValueError:
            pass
    return arm, None


def study_overrides(arm: str, switch: int | None = None, bmi_weight: float | None = None) -> list[str]:
    """``arm``'s overrides for a study beside the protocol. ``switch`` N: one fixed averaging start for every
    arm instead of each run's NT-ASGD trigger, the iterates from step N + 1 on averaged, and BMI-full's Phase
    II from step N + 1 (``phase2_start`` N: the switch happens after step N), the alignment of a trigger
    that fires at the evaluation after step N. ``bmi_weight``: the BMI arms' weight (paper: 0.1 on PTB,
    0.02 on WT2); the baseline, which has no BMI term, is left alone (a dotted ``objective.bmi.weight``
    given to it would add a BMI-full term with every other setting at its default)."""
    out: list[str] = []
    if switch is not None:
        out += ["optim.average.nonmono=0", f"optim.average.start={switch + 1}"]
        if arm in PHASE2_CONFIGS:
            out.append(f"objective.bmi.phase2_start={switch}")
    if bmi_weight is not None and arm != "baseline":
        out.append(f"objective.bmi.weight={bmi_weight}")
    return out


def train_command(
    out: Path,
    arm: str,
    seed: int,
    budget: Budget,
    extra: list[str] | None = None,
    switch: int | None = None,
    bmi_weight: float | None = None,
    scale: str = "cpu",
) -> list[str]:
    config, weight = arm_and_weight(arm)
    command = [
        sys.executable,
        "-m",
        "infolm",
        "train",
        f"configs/ptb/bmi-{config}{budget.config_suffix or SCALES[scale]}.yaml",
        f"run.dir={out / f'{arm}-s{seed}'}",
        f"run.seed={seed}",
        "train.progress=false",
        *budget.train,
    ]
    if budget.epochs is not None:
        command.append(f"train.epochs={budget.epochs}")
    if config in PHASE2_CONFIGS:
        command += budget.full_phase2
    if weight is not None:
        command.append(f"objective.bmi.weight={weight}")
    return command + study_overrides(config, switch, bmi_weight) + list(extra or [])


POST_SWITCH_VALIDATIONS = 8  # validations a run keeps after its averaging switch (about two epochs)
MORE_EPOCHS, MAX_EPOCHS = 5, 40  # a run short of them is extended by 5 epochs at a time, up to 40


def validations_after_switch(records: list[dict[str, Any]]) -> int:
    """Validations at or after the first averaged step (0: the switch never came)."""
    switch = switch_step(records)
    if switch is None:
        return 0
    return sum(1 for r in records if r.get("split") == "valid" and int(r["step"]) >= switch)


def first_limit(run_dir: Path, budget: Budget, overrides: list[str]) -> int | None:
    """The epoch limit a call starts from: the budget's, or ``train.epochs`` among ``overrides``, or the
    limit the run already reached in an earlier call if larger (None: a step budget)."""
    if budget.epochs is None:
        return None
    asked = [int(o.split("=", 1)[1]) for o in overrides if o.startswith("train.epochs=")]
    limit = asked[-1] if asked else budget.epochs
    if (run_dir / "config.yaml").is_file():
        from infolm.config import load_config

        limit = max(limit, int(load_config(run_dir / "config.yaml").train.epochs))
    return limit


def extended_limit(summary: dict[str, Any], records: list[dict[str, Any]], epochs: int) -> int | None:
    """The next epoch limit for a run that ended at ``epochs`` (not by early stopping) with fewer than
    ``POST_SWITCH_VALIDATIONS`` validations after its averaging switch; None when the run is done.

    Early stopping waits for 14 validations without a better loss, so a run that stops early has 8 after
    its switch; one whose averaged weights keep improving runs to the epoch limit instead, and a switch
    late in the run (or none) would leave BMI-full's Phase II a few validations or none."""
    if summary.get("early_stopped") or epochs >= MAX_EPOCHS:
        return None
    if validations_after_switch(records) >= POST_SWITCH_VALIDATIONS:
        return None
    return min(epochs + MORE_EPOCHS, MAX_EPOCHS)


def write_json(path: Path, value: Any) -> None:
    """Atomic: a reader never sees half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=1))
    os.replace(tmp, path)


def reverse_ppl_of(generated: torch.Tensor, corpus: Any, seed: int, budget: Budget) -> dict[str, float]:
    """Reverse perplexity from an already generated stream: a fresh LM trained on it, scored on real text."""
    config = ReversePPLConfig(num_tokens=generated.numel(), seed=seed, **budget.reverse)
    eos = corpus.vocab.eos_id
    lm = train_fresh_lm(generated, len(corpus.vocab), eos, config)
    out = {}
    for split in ("valid", "test"):
        nll, count = stream_nll(lm, corpus.stream(split), eos, config.eval_batch_size, config.bptt)
        out[f"{split}_ppl"] = math.exp(nll / count)
    return out


def discriminator_stats(records: list[dict[str, Any]]) -> dict[str, float] | None:
    """Mean training-minibatch accuracy and MINE bound of D_theta over the last tenth of the steps."""
    steps = [r for r in records if "bmi_acc" in r]
    if not steps:
        return None
    last = steps[-1]["step"]
    tail = [r for r in steps if r["step"] > 0.9 * last]
    return {
        "accuracy": statistics.mean(r["bmi_acc"] for r in tail),
        "mine": statistics.mean(r["bmi_mine"] for r in tail),
        "records": len(tail),
    }


def score_run(run_dir: Path, seed: int, budget: Budget) -> dict[str, Any]:
    config, corpus, model = load_run(run_dir, "cpu", full_splits=budget.full_splits)
    result: dict[str, Any] = {}
    for split in ("valid", "test"):
        result[split] = evaluate_split(model, corpus, split, config.data.eval_batch_size, config.data.bptt)
    generator = torch.Generator().manual_seed(seed)
    layout, eos = MIEstimatorConfig(), corpus.vocab.eos_id
    with torch.no_grad():  # 64 independent texts; MI pairs are taken within a text, never across two
        texts = generate_texts(model, budget.gen_tokens, eos, layout.seg_len, layout.gap, 64, generator)
    generated = torch.cat([texts, torch.full((texts.size(0), 1), eos)], 1).reshape(-1)[: budget.gen_tokens]
    result["reverse"] = reverse_ppl_of(generated, corpus, seed, budget)
    mi = estimate_segment_mi(texts, len(corpus.vocab), MIEstimatorConfig(seed=seed, **budget.mi))
    result["mi"] = {"mean": mi.mean, "std": mi.std, "folds": mi.folds}
    records = read_metrics(run_dir / "metrics.jsonl")
    result["discriminator"] = discriminator_stats(records)
    result["switch_step"], result["phase2_step"] = switch_step(records), phase2_step(records)
    return result


def score_real(out: Path, seed: int, budget: Budget) -> dict[str, Any]:
    """MI and reverse perplexity of ``gen_tokens`` real training tokens (the 'Real Data' row)."""
    _, corpus, _ = load_run(out / f"baseline-s{seed}", "cpu", full_splits=budget.full_splits)  # as the arms
    start = seed * budget.gen_tokens % max(1, corpus.stream("train").numel() - budget.gen_tokens)
    real = corpus.stream("train")[start : start + budget.gen_tokens]  # a different slice per seed
    mi = estimate_segment_mi(real, len(corpus.vocab), MIEstimatorConfig(seed=seed, **budget.mi))
    return {
        "mi": {"mean": mi.mean, "std": mi.std, "folds": mi.folds},
        "reverse": reverse_ppl_of(real, corpus, seed, budget),
    }


def budget_of_folder(out: Path) -> str | None:
    """The budget of the score files already in ``out`` (None: none yet)."""
    for path in sorted(out.glob("*.score.json")):
        found = json.loads(path.read_text()).get("budget")
        if found:
            return str(found)
    return None


def cmd_train(args: argparse.Namespace) -> None:
    budget = BUDGETS[args.budget]
    held = budget_of_folder(args.out) if args.out.is_dir() else None
    if held not in (None, args.budget):
        sys.exit(f"error: {args.out} holds runs of the {held} budget, not {args.budget}")
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    machine = machine_line()
    recorded = records_of(args.budget)
    protocol_arms, _ = budget_runs(args.budget)
    real_wanted = scores_real(args.budget)
    # runs with extra overrides (or a study's settings) are not the protocol's: they never replace its
    # records unasked, and a recorded protocol run does not stand for them
    switch, bmi_weight = getattr(args, "switch_step", None), getattr(args, "bmi_weight", None)
    scale = getattr(args, "scale", "cpu")
    study = bool(args.override) or switch is not None or bmi_weight is not None or scale != "cpu"
    keep = budget.keep_records and not study
    if budget.keep_records and study:
        print(f"note: runs with --override, --switch-step, --bmi-weight or --scale mid are not archived into "
              f"{recorded} (run `archive` to keep them)", flush=True)  # fmt: skip
    for seed in args.seeds:
        for arm in args.arms:
            score_path = args.out / f"{arm}-s{seed}.score.json"
            if score_path.exists() or (not study and recorded_score(recorded, f"{arm}-s{seed}")):
                continue
            command = train_command(args.out, arm, seed, budget, args.override, switch, bmi_weight, scale)
            shown = "OMP_NUM_THREADS=1 infolm " + shlex.join(command[3:])
            print(shown, flush=True)
            tick = time.perf_counter()
            epochs, failed = first_limit(args.out / f"{arm}-s{seed}", budget, args.override), False
            while True:
                limit = [] if epochs is None else [f"train.epochs={epochs}"]
                done = run_command([*command, *limit, "--json"])  # one thread
                if done.rc != 0:  # a failed arm (say, a diverged run) does not keep the others from training
                    print(f"  {arm} s{seed}: training failed (exit {done.rc}): {done.stderr.strip()[-500:]}",
                          file=sys.stderr)  # fmt: skip
                    failed = True
                    break
                if epochs is None:
                    break
                summary = done.result()
                records = read_metrics(args.out / f"{arm}-s{seed}" / "metrics.jsonl")
                more = extended_limit(summary, records, epochs)
                if more is None:
                    break
                print(f"  {arm} s{seed}: {validations_after_switch(records)} validations after the switch at "
                      f"{epochs} epochs; going on to {more}", flush=True)  # fmt: skip
                epochs = more
            if failed:
                continue
            train_s = time.perf_counter() - tick  # of this invocation (a resumed run: its last part)
            tick = time.perf_counter()
            record = score_run(args.out / f"{arm}-s{seed}", seed, budget)
            record.update(
                arm=arm, seed=seed, budget=args.budget, command=shown, train_s_this_call=train_s,
                score_s=time.perf_counter() - tick, commit=git_commit(), machine=machine,
                reverse_lm=budget.reverse, mi_estimator=budget.mi, gen_tokens=budget.gen_tokens,
            )  # fmt: skip
            write_json(score_path, record)
            if keep and arm in protocol_arms:  # in the repository's tree at once: a lost machine keeps the numbers
                archive_scored(args.out, f"{arm}-s{seed}", recorded)
            print(
                f"  {arm} s{seed}: valid {record['valid']['ppl']:.2f} test {record['test']['ppl']:.2f} "
                f"reverse {record['reverse']['valid_ppl']:.1f}/{record['reverse']['test_ppl']:.1f} "
                f"MI {record['mi']['mean']:.3f} (score {record['score_s']:.0f} s)",
                flush=True,
            )
        real_path = args.out / f"real-s{seed}.score.json"
        if recorded_score(recorded, f"real-s{seed}") or not real_wanted:
            continue
        if not real_path.exists() and (args.out / f"baseline-s{seed}.score.json").exists():
            tick = time.perf_counter()
            real = score_real(args.out, seed, budget)
            real.update(seed=seed, budget=args.budget, score_s=time.perf_counter() - tick, commit=git_commit(),
                        gen_tokens=budget.gen_tokens, machine=machine)  # fmt: skip
            write_json(real_path, real)
            if keep:
                archive_scored(args.out, f"real-s{seed}", recorded)
            print(f"  real s{seed}: MI {real['mi']['mean']:.3f} reverse {real['reverse']}", flush=True)


# --- the table, from run directories and score files ---


def seconds_per_step(records: list[dict[str, Any]], phase: float | None) -> float | None:
    """Median training seconds per step between consecutive step records (of one BMI phase if given).

    The median leaves out the intervals that hold an evaluation or a checkpoint."""
    steps = [r for r in records if "tokens_per_s" in r and (phase is None or r.get("bmi_phase") == phase)]
    rates = [
        (b["elapsed"] - a["elapsed"]) / (b["step"] - a["step"])
        for a, b in zip(steps, steps[1:], strict=False)
        if b["step"] > a["step"] and b["elapsed"] > a["elapsed"]
    ]
    return statistics.median(rates) if rates else None


def switch_step(records: list[dict[str, Any]]) -> int | None:
    """The first averaged step (the NT-ASGD switch), from the validation records; None: never switched."""
    starts = [int(r["started_at"]) for r in records if r.get("split") == "valid" and r.get("started_at", -1) >= 0]
    return starts[0] if starts else None


def phase2_step(records: list[dict[str, Any]]) -> int | None:
    """The first logged step of BMI Phase II (a step record's step: the switch happened before it)."""
    steps = [int(r["step"]) for r in records if r.get("bmi_phase") == 2.0]
    return steps[0] if steps else None


def split_name(name: str) -> tuple[str, str] | None:
    """'full-s0' -> ('full', '0'); None for a name that is not ARM-sSEED."""
    arm, _, seed = name.rpartition("-s")
    return (arm, seed) if arm and seed.isdigit() else None


def cmd_table(args: argparse.Namespace) -> None:
    """Per run (``--out``'s run directories and the records): steps, epochs, the averaging switch and Phase II,
    and seconds per step of each phase against the baseline's of the same seed. The comparison tables are
    the generator's: ``python -m experiments.report bmi`` (from the records alone)."""
    scored = (
        {path.name[: -len(".score.json")] for path in args.out.glob("*.score.json")} if args.out.is_dir() else set()
    )
    for folder in args.records:
        scored |= {path.parent.name for path in folder.glob(f"*/{SCORE}")} if folder.is_dir() else set()

    def is_arm(path: Path) -> bool:
        key = split_name(path.name)
        return key is not None and key[0] in ARMS + MID_ARMS + EXTRA_ARMS and (path / "metrics.jsonl").exists()

    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for path in runs_and_records([args.out, *args.records], is_arm):
        arm_seed = split_name(path.name)
        assert arm_seed is not None
        runs[arm_seed] = read_metrics(path / "metrics.jsonl")
    print("The comparison tables (ours against the paper's, paired over seeds): python -m experiments.report bmi")
    print()
    print(
        "| run | steps | epochs | averaging switch / Phase II from | best valid (prefix) "
        "| s/step Phase I (or all) | s/step Phase II |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    baseline_rate = {
        seed: seconds_per_step(records, None) for (arm, seed), records in runs.items() if arm == "baseline"
    }
    for (arm, seed), records in runs.items():
        steps = [r for r in records if "tokens_per_s" in r]
        valid = [r for r in records if r.get("split") == "valid"]
        rate1 = seconds_per_step(records, None if arm == "baseline" else 1.0)
        rate2 = seconds_per_step(records, 2.0)
        base = baseline_rate.get(seed)

        def show(rate: float | None, base: float | None = base) -> str:
            if rate is None:
                return "–"
            return f"{rate:.3f}" + (f" ({rate / base:.2f}x)" if base else "")

        name = f"{arm}-s{seed}"
        done = " (scored)" if name in scored else " (in flight or cut)"
        best = min((r["ppl"] for r in valid), default=float("nan"))
        last = steps[-1] if steps else {"step": 0, "epoch": 0}
        switch, phase2 = switch_step(records), phase2_step(records)
        flag = ""
        if switch is None:
            flag = " **never switched**"
        elif arm_and_weight(arm)[0] in PHASE2_CONFIGS and (phase2 is None or not switch <= phase2 < switch + LOG_EVERY):
            flag = " **Phase II apart from the switch**"
        print(
            f"| {name}{done} | {last['step']} | {last['epoch']} | {switch if switch is not None else '–'} / "
            f"{phase2 if phase2 is not None else '–'}{flag} | {best:.2f} | {show(rate1)} | {show(rate2)} |"
        )
    if args.png:
        plot_curves(runs, args.png)


def archive_scored(out: Path, name: str, records: Path) -> None:
    """Keep ``out``'s scored run ``name`` (its score file as ``score.json``), or the real-data scores
    ``real-sSEED``, in ``records``; a run still training, or without a log, is left out."""
    path = out / f"{name}.score.json"
    if name.startswith(f"{REAL}-"):  # a record folder as a run's, with the score file alone
        score = json.loads(path.read_text())
        (records / name).mkdir(parents=True, exist_ok=True)
        write_json(records / name / SCORE, score)
        meta = {"driver": "bmi_ptb_table2.py", "files": [SCORE], "commit": score.get("commit"),
                "wall_s": score.get("score_s"), "what": f"segment MI and reverse perplexity of "
                f"{score.get('gen_tokens', 'gen_tokens')} real PTB training tokens (no model trained)"}  # fmt: skip
        write_json(records / name / "record.json", meta)
        print(f"{name}: archived in {records / name}", file=sys.stderr)
        return
    run = out / name
    if split_name(name) is None or not (run / "metrics.jsonl").is_file() or is_record(run):
        return
    if run_dir_in_use(run):
        print(f"{name}: training now, left out", file=sys.stderr)
        return
    score = json.loads(path.read_text())
    meta = {key: score.get(key) for key in ("command", "commit", "machine", "train_s_this_call", "score_s")}
    try:
        target = archive_run(run, records, {"driver": "bmi_ptb_table2.py", **meta}, {SCORE: path})
    except InfolmError as failure:
        sys.exit(f"error: {failure}")
    print(f"{name}: archived in {target}", file=sys.stderr)


def cmd_archive(args: argparse.Namespace) -> None:
    """Archive every scored run of ``--out`` that is not training (its score file kept as ``score.json``)
    and the real-data scores. ``train`` archives each converged run as it is scored; this catches up."""
    for path in sorted(args.out.glob("*.score.json")):
        archive_scored(args.out, path.name[: -len(".score.json")], args.records)


def plot_curves(runs: dict[tuple[str, str], list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"baseline": "tab:gray", "base": "tab:blue", "full": "tab:red"}
    for (arm, seed), records in runs.items():
        valid = [r for r in records if r.get("split") == "valid"]
        if arm not in colors or not valid:
            continue
        switch = switch_step(records)
        style = {"color": colors[arm], "lw": 1, "marker": ".", "ms": 3}
        axes[0].plot([r["step"] for r in valid], [r["ppl"] for r in valid], label=f"{arm}-s{seed}", **style)
        if switch is not None:
            after = [r for r in valid if r["step"] >= switch]
            axes[1].plot([r["step"] - switch for r in after], [r["ppl"] for r in after], **style)
    axes[0].set(xlabel="step", ylabel="valid perplexity (20k-token prefix)", yscale="log", title="whole run")
    axes[1].set(xlabel="steps after the NT-ASGD switch", ylabel="valid perplexity", title="after the switch (Fig. 2)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train and score the arms (resumes cut runs, skips scored ones)")
    train.add_argument("--out", type=Path, default=None, help="default: runs/bmi-ptb-table2-BUDGET")
    train.add_argument("--seeds", type=int, nargs="+", default=None, help="default: the protocol's")
    train.add_argument(
        "--arms",
        nargs="+",
        default=None,
        choices=list(dict.fromkeys(ARMS + MID_ARMS + EXTRA_ARMS)),
        help="default: the protocol's arms of the budget",
    )
    train.add_argument("--budget", choices=sorted(BUDGETS), default="converged")
    train.add_argument("--override", nargs="*", default=[], help="extra KEY=VALUE overrides of every run (last wins)")
    train.add_argument(
        "--switch-step",
        type=int,
        default=None,
        help="N: every arm averages from step N+1 and BMI-full's Phase II starts there (not the NT-ASGD trigger)",
    )
    train.add_argument("--bmi-weight", type=float, default=None, help="the BMI arms' weight (paper: 0.1 PTB, 0.02 WT2)")
    train.add_argument("--scale", choices=sorted(SCALES), default="cpu", help="cpu: the protocol's size; mid: 3.8M")
    table = sub.add_parser("table", help="per run: switch steps and time per step, and the curves (--png)")
    table.add_argument("--out", type=Path, default=Path("runs/bmi-ptb-table2-converged"))
    table.add_argument("--budget", choices=sorted(BUDGETS), default=None, help="--out runs/bmi-ptb-table2-BUDGET")
    table.add_argument("--png", type=Path, default=None)
    table.add_argument(
        "--records",
        type=Path,
        nargs="*",
        default=None,
        help="records read beside --out's (default: the budget's)",
    )
    archive = sub.add_parser("archive", help="copy every scored run's small files and scores into the records")
    archive.add_argument("--out", type=Path, default=Path("runs/bmi-ptb-table2-converged"))
    archive.add_argument("--records", type=Path, default=None, help="default: the repository's, of --out's budget")
    args = parser.parse_args()
    if args.command == "table" and args.budget is not None:
        args.out = Path(f"runs/bmi-ptb-table2-{args.budget}")
    if args.command == "train":
        arms, seeds = budget_runs(args.budget)
        args.arms = args.arms if args.arms is not None else list(arms)
        args.seeds = args.seeds if args.seeds is not None else seeds
        studied = args.override or args.switch_step is not None or args.bmi_weight is not None or args.scale != "cpu"
        if args.budget == "mid" and (args.scale != "cpu" or args.switch_step is not None):
            sys.exit("error: the mid budget has its own scale and averaging start; --scale and --switch-step are "
                     "for studies of the converged budget")  # fmt: skip
        if args.out is None and (studied or set(args.arms) - set(arms)):
            sys.exit("error: runs that are not the protocol's (--override, --switch-step, --bmi-weight, --scale "
                     "mid, --arms placebo) need an --out of their own")  # fmt: skip
        if args.switch_step is not None and args.switch_step < 0:
            sys.exit(f"error: --switch-step must be non-negative, got {args.switch_step}")
    if args.out is None:
        args.out = Path(f"runs/bmi-ptb-table2-{args.budget}")
    if args.command == "train":
        cmd_train(args)
        return
    budget = budget_of_folder(args.out) if args.out.is_dir() else None
    if args.command == "archive":
        if not args.out.is_dir():
            sys.exit(f"error: {args.out} is not a directory")
        args.records = args.records or records_of(budget or "converged")
        cmd_archive(args)
        return
    if args.records is None:
        args.records = [records_of(args.budget or budget or "converged")]
    if not args.out.is_dir() and not any(folder.is_dir() for folder in args.records):
        sys.exit(f"error: {args.out} is not a directory, and there are no records")
    cmd_table(args)


if __name__ == "__main__":
    main()
