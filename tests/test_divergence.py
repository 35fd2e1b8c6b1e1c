"""The divergence rule (optim/divergence.py) judges each objective on its own loss scale: a token-level
cross-entropy far above its bound still stops a run, a rate term above ln|V| does not, a non-finite
loss always does; and no registered objective is stopped on a small-vocabulary text while healthy."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from infolm.build import build_model, build_objective, build_task
from infolm.config import load_config
from infolm.data import Corpus
from infolm.errors import InfolmError
from infolm.objectives import OBJECTIVES
from infolm.optim.divergence import DivergenceConfig, DivergencePolicy
from infolm.training import Trainer
from infolm.training.metrics import read_metrics
from tests.conftest import ROOT, run_in_process
from tests.test_compatibility import (
    MODEL_SETTINGS,
    OBJECTIVE_SETTINGS,
    TASK_SETTINGS,
    declared_compatible,
    overrides,
    task_data,
)

WORDS = ("a", "b", "c", "d", "e", "f", "g")  # with <eos>: |V| = 8, 2 ln|V| = 4.16


def tiny_vocabulary_lines(count: int, seed: int) -> list[str]:
    """Lines of 2 to 12 of the seven words: lengths vary, so batches of long sentences come."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12))) for _ in range(count)]


@pytest.fixture(scope="module")
def tiny_vocabulary_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("tiny-vocabulary")
    section = {"name": "path", "level": "word"}
    for seed, (split, count) in enumerate((("train", 240), ("valid", 20), ("test", 20))):
        (out / f"{split}.txt").write_text("\n".join(tiny_vocabulary_lines(count, seed)) + "\n")
        section[split] = str(out / f"{split}.txt")
    return section


@pytest.fixture(scope="module")
def tiny_vocabulary_corpus() -> Corpus:
    texts = {
        split: "\n".join(tiny_vocabulary_lines(n, seed))
        for seed, (split, n) in enumerate((("train", 120), ("valid", 16), ("test", 16)))
    }
    corpus = Corpus.from_texts("tiny-vocabulary", "word", texts)
    assert len(corpus.vocab) == 8
    return corpus


# ---------------------------------------------------------------------------------------------------
def smim_run(files: dict[str, str], run_dir: Path, steps: int) -> list[float]:
    """configs/ptb/smim-cpu.yaml on the |V| = 8 files for ``steps`` steps: the step losses."""
    data = [f"data.{key}={value}" for key, value in files.items()]
    settings = [f"run.dir={run_dir}", *data, f"train.max_steps={steps}", "train.log_every=1", "task.valid_samples=2"]
    result = run_in_process("train", "configs/ptb/smim-cpu.yaml", *settings)
    assert result.returncode == 0, result.stderr
    assert "diverged" not in result.stderr
    return [r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if "split" not in r and "event" not in r]


def divergence_state(run_dir: Path, step: int) -> dict:
    return torch.load(run_dir / "checkpoints" / f"step-{step:08d}" / "trainer.pt", weights_only=True)["divergence"]


def test_smim_on_a_small_vocabulary_is_not_stopped(tiny_vocabulary_files: dict[str, str], tmp_path: Path) -> None:
    """configs/ptb/smim-cpu.yaml on |V| = 8: the A-MIM loss starts near 5.5 per token, its rate terms
    (-1/2 (ln q(z|x) + ln P(z)) over 16 latent dimensions) above 2 ln|V| = 4.16, and falls as it
    learns. The ln|V| bound stopped it as diverged at step 3. Its reference, the largest loss so
    far, is saved with the checkpoints and a resumed run continues it exactly."""
    losses = smim_run(tiny_vocabulary_files, tmp_path / "whole", 12)
    assert len(losses) == 12 and max(losses) > 2 * math.log(8)
    state = divergence_state(tmp_path / "whole", 12)
    assert state["reference"] == max(abs(loss) for loss in losses) and state["recent"] == losses[-3:]
    assert smim_run(tiny_vocabulary_files, tmp_path / "split", 6) == losses[:6]
    assert smim_run(tiny_vocabulary_files, tmp_path / "split", 12) == losses  # resumed at step 6
    assert divergence_state(tmp_path / "split", 12) == state


def test_a_cross_entropy_far_above_its_bound_still_stops() -> None:
    policy = DivergencePolicy(DivergenceConfig(patience=3), math.log(8))  # mle on |V| = 8: bound 4.16
    assert policy.bound == pytest.approx(2 * math.log(8))
    assert not policy.check(2.1) and not policy.check(5.0) and policy.suspect
    assert not policy.check(6.0) and policy.check(7.0)  # three steps in a row above 4.16
    assert "above 2 x 2.079 (the objective's loss scale) = 4.16 for 3 steps" in policy.describe(4, 7.0)


def test_a_rate_above_ln_v_does_not_stop_but_an_explosion_does() -> None:
    """An objective with a rate term (no known scale) is judged on the run's own losses: a loss at
    5.5 with |V| = 8 is healthy; one a hundred times the run's largest so far, three times, is not."""
    policy = DivergencePolicy(DivergenceConfig(patience=3), None)
    healthy = [5.51, 6.43, 4.88, 4.89, 6.15, 5.38, 4.91, 3.96, 2.0, 0.12, -0.51, -0.89]  # an sMIM run, |V| = 8
    assert not any(policy.check(loss) for loss in healthy) and not policy.suspect
    assert policy.reference == pytest.approx(6.43) and policy.bound == pytest.approx(64.3)
    assert not policy.check(700.0) and policy.suspect and not policy.check(-800.0)  # magnitude counts
    assert policy.check(1e3)
    assert "above 10 x 6.43 (the run's largest loss before) = 64.30 for 3 steps" in policy.describe(15, 1e3)
    assert policy.reference == pytest.approx(6.43)  # losses above the bound never move the reference
    # A rise that a schedule asks for (KL annealing) carries the reference with it.
    rising = DivergencePolicy(DivergenceConfig(patience=3), None)
    assert not any(rising.check(2.0 * 1.5**k) for k in range(20))


def test_a_latent_bound_that_diverged_in_a_recorded_run_still_stops() -> None:
    """experiments/records/thesis-fig5-synthetic-converged/fig5_3_continuous/dreg-16-kl-lam0.3-s0: the
    mi-kl loss (about 6.9 per token on 1,000 symbols and <eos>) left 2 ln|V| = 13.8 at step 1,230 and was
    restarted at 23.4: a bound on -ln p(x) per token keeps the scale ln|V|."""
    from infolm.objectives import build_objective as build

    scale = build({"mi-kl": {"lam": 0.3, "samples": 16}}).loss_scale(1001)
    policy = DivergencePolicy(DivergenceConfig(enabled=True), scale)
    assert not any(policy.check(loss) for loss in (6.88, 6.94, 6.73, 7.12, 6.96, 6.9))
    assert not policy.check(23.38) and not policy.check(23.38) and policy.check(23.38)


@pytest.mark.parametrize("scale", [math.log(8), None])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_loss_always_stops(scale: float | None, bad: float) -> None:
    first = DivergencePolicy(DivergenceConfig(), scale)
    assert first.check(bad)  # even as the very first loss, before any reference
    later = DivergencePolicy(DivergenceConfig(), scale)
    assert not later.check(2.0) and later.check(bad)
    assert f"loss is {bad}" in later.describe(2, bad)


def test_the_reference_survives_a_resume() -> None:
    policy = DivergencePolicy(DivergenceConfig(patience=2), None)
    for loss in (3.0, 4.0, 50.0):
        policy.check(loss)
    resumed = DivergencePolicy(policy.config, None)
    resumed.load_state_dict(policy.state_dict())
    assert resumed.reference == 4.0 and resumed.suspect
    assert resumed.check(45.0)  # the second step above 40 in a row
    old = DivergencePolicy(policy.config, None)
    old.load_state_dict({"recent": [3.0], "restarts": 1})  # a checkpoint written before the reference
    assert old.reference is None and old.restarts == 1


def test_relative_factor_is_checked() -> None:
    with pytest.raises(InfolmError, match="train.divergence.relative_factor must be above 1"):
        DivergenceConfig(relative_factor=1.0)


def test_objective_scales_combine_by_weight() -> None:
    from infolm.objectives import build_objective as build

    ln_v = math.log(8)
    assert build({"mle": {}}).loss_scale(8) == pytest.approx(ln_v)
    # AWD-LSTM: mle + 2 AR + 1 TAR on unit-scale activations
    assert build({"mle": {}, "ar": {}, "tar": {}}).loss_scale(8) == pytest.approx(ln_v + 2 * 1.0 + 2.0)
    assert build({"mle": {}, "amim": {"weight": 0.0}}).loss_scale(8) == pytest.approx(ln_v)  # weight 0: not run
    assert build({"mle": {}, "elbo": {}}).loss_scale(8) is None  # per sentence: the run's own losses judge
    assert build({"elbo": {"normalize": "tokens", "anneal": "logistic"}}).loss_scale(8) is None  # annealed
    assert build({"elbo": {"normalize": "tokens"}}).loss_scale(8) == pytest.approx(ln_v)  # -ELBO per token
    assert build({"amim": {"normalize": "tokens"}}).loss_scale(8) is None  # -1/2 (ln q + ln P): no scale
    for name in ("mi-kl", "mi-renyi", "mi-power", "beta-vae"):  # bounds on -ln p(x) per token
        assert build({name: {}}).loss_scale(8) == pytest.approx(ln_v), name
    assert build({"nsp": {"negatives": 3}}).loss_scale(8) == pytest.approx(4 * math.log(2))
    assert build({"nsp": {"form": "global", "negatives": 3}}).loss_scale(8) == pytest.approx(math.log(4))
    assert build({"mlm-nce": {"negatives": "unigram", "num_negatives": 63}}).loss_scale(8) == pytest.approx(
        math.log(64)
    )
    assert build({"mlm-nce": {}}).loss_scale(8) is None  # in-batch negatives: a count known per batch only
    assert build({"bmi": {"weight": 0.5, "variant": "base"}}).loss_scale(8) == pytest.approx(0.5 * 2 * math.log(2))


# ---------------------------------------------------------------------------------------------------
def one_combination_per_objective() -> list:
    """Each registered objective with the first task and model the registries declare it trains."""
    chosen: dict[str, object] = {}
    for combination in declared_compatible():
        chosen.setdefault(combination.values[2], combination)
    assert sorted(chosen) == sorted(OBJECTIVES.names()), "an objective that no task and model can train"
    return [chosen[name] for name in sorted(chosen)]


STEPS = 6  # twice the patience of the rule
# The registries' small settings, with the latent size of the CPU recipes (the rates grow with it)
SETTINGS = {
    **MODEL_SETTINGS,
    "sentence-gru": {**MODEL_SETTINGS["sentence-gru"], "latent": 16},
    "latent-sentence-lstm": {**MODEL_SETTINGS["latent-sentence-lstm"], "latent_size": 16},
}


@pytest.mark.parametrize(("task_name", "model_name", "objective_name"), one_combination_per_objective())
def test_no_registered_objective_is_stopped_on_a_small_vocabulary(
    task_name: str, model_name: str, objective_name: str, tiny_vocabulary_corpus: Corpus, tmp_path: Path
) -> None:
    """A few steps of every objective, at a healthy learning rate, on |V| = 8 (the copy
    task: 12 symbols): the rule that always watches never finds the loss above its bound."""
    config = load_config(
        None,
        [
            *overrides("task", task_name, TASK_SETTINGS.get(task_name, {})),
            *overrides("model", model_name, SETTINGS[model_name]),
            f"objective.{objective_name}={OBJECTIVE_SETTINGS.get(objective_name, {})}",
            "data.batch_size=32",  # contrastive terms: 31 other rows give in-batch negatives
            "data.bptt=12",
            "optim.name=adam",
            "optim.lr=0.001",
            "run.device=cpu",
            f"run.dir={tmp_path}",
        ],
    )
    data = task_data(config, tiny_vocabulary_corpus)
    torch.manual_seed(0)
    model = build_model(config, len(data.vocab))
    objective = build_objective(config)
    objective.setup(data, model)
    trainer = Trainer(config, model, objective, build_task(config, data))
    losses = []
    for _ in range(STEPS):
        batch = trainer.batches.next_batch()
        if batch is None:
            batch = trainer.batches.next_batch()
        losses.append(trainer.train_step(batch)["loss"])
        assert not trainer._diverged and not trainer.divergence.suspect, (losses, trainer.divergence.bound)
    assert all(math.isfinite(loss) for loss in losses)


def test_a_latent_run_whose_loss_explodes_is_stopped(
    tiny_vocabulary_files: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sMIM has no known loss scale: weights blown up after step 4 give a finite loss far above ten
    times the run's largest so far, and the run stops three steps later with one line."""
    from infolm.build import train

    original_step = Trainer.train_step

    def blown_up_step(self: Trainer, batch: object) -> dict[str, float]:
        if self.step == 4:
            with torch.no_grad():
                for parameter in self.model.parameters():
                    parameter.mul_(50.0)
        return original_step(self, batch)

    monkeypatch.setattr(Trainer, "train_step", blown_up_step)
    data = [f"data.{key}={value}" for key, value in tiny_vocabulary_files.items()]
    settings = [f"run.dir={tmp_path}", *data, "train.max_steps=12", "train.log_every=1", "task.valid_samples=2"]
    with pytest.raises(InfolmError, match=r"training diverged at step 7: loss .* has been above 10 x .* \(the run's"):
        train(load_config(ROOT / "configs/ptb/smim-cpu.yaml", settings), settings)
