"""The ch. 5 objectives as registered training terms: config-time refusals and the loss they report."""

from __future__ import annotations

import math

import pytest
import torch

from infolm.errors import InfolmError
from infolm.latent.estimators import kl_objective, objective_value
from infolm.models import MODELS
from infolm.objectives import OBJECTIVES, Batch


@pytest.mark.parametrize(
    "name,settings,message",
    [
        ("mi-kl", {"samples": 0}, "samples must be at least 1"),
        ("mi-kl", {"mi_samples": 0}, "mi_samples must be at least 1"),
        ("mi-kl", {"lam": 1.0}, "lam must be below 1"),
        ("mi-kl", {"lam": float("nan")}, "lam must be below 1"),
        ("mi-renyi", {"lam": 1.5}, "lam must be below 1"),
        ("mi-renyi", {"alpha": 1.0}, "alpha must be positive and not 1"),
        ("mi-renyi", {"alpha": 0.0}, "alpha must be positive and not 1"),
        ("mi-renyi", {"alpha": -2.0}, "alpha must be positive and not 1"),
        ("mi-power", {"alpha": 0.0}, "alpha must be positive"),
        ("mi-kl", {"estimator": "vimco", "samples": 1}, "vimco needs at least 2 samples"),
        ("mi-kl", {"estimator": "magic"}, "estimator must be one of"),
        ("beta-vae", {"beta": -1.0}, "beta must be non-negative"),
    ],
)
def test_bad_settings_are_refused_with_one_line(name, settings, message) -> None:
    with pytest.raises(InfolmError, match=message) as error:
        OBJECTIVES.build(name, settings, where=f"objective.{name}")
    assert "\n" not in str(error.value)


def tiny_latent(latent: str):
    torch.manual_seed(0)
    settings = {"latent": latent, "latent_size": 4, "variables": 2, "categories": 3, "hidden": 8, "embedding": 8}
    return MODELS.build("latent-synthetic", settings, vocab_size=12, where="model")


@pytest.mark.parametrize("estimator", ["elbo", "iwae", "stl", "dreg"])
def test_reparameterized_estimators_refuse_categorical_latents(estimator) -> None:
    objective = OBJECTIVES.build("mi-kl", {"estimator": estimator}, where="objective.mi-kl")
    with pytest.raises(InfolmError, match="with categorical latents use reinforce or vimco"):
        objective.setup(None, tiny_latent("categorical"))
    objective.setup(None, tiny_latent("gaussian"))  # accepted


def test_a_language_model_is_refused() -> None:
    objective = OBJECTIVES.build("mi-renyi", {}, where="objective.mi-renyi")
    with pytest.raises(InfolmError, match="needs a latent-variable model"):
        objective.setup(None, MODELS.build("lstm", {"emb": 4, "hidden": 4, "layers": 1}, vocab_size=10))


def test_loss_is_the_negated_objective_of_the_batch() -> None:
    model = tiny_latent("gaussian")
    symbols = torch.tensor([[3], [7], [1]])
    batch = Batch(inputs=symbols, targets=symbols)
    objective = OBJECTIVES.build("mi-kl", {"estimator": "iwae", "samples": 5, "lam": 0.3}, where="objective.mi-kl")
    torch.manual_seed(4)
    terms = objective(model, batch, None)
    torch.manual_seed(4)  # the same draws by hand
    q, p = model.posterior(symbols, torch.ones(3)), model.prior()
    z = q.rsample((5,))
    value = objective_value(
        kl_objective(0.3, 5, 5), model.log_likelihood(symbols, None, z), p.log_prob(z) - q.log_prob(z)
    )
    torch.testing.assert_close(terms.losses["mi-kl"], -value.sum() / 3)  # one symbol scored per row
    assert terms.tokens == 3


@pytest.mark.parametrize(
    "path",
    ["configs/sweeps/thesis-synthetic-mi-kl.yaml", "configs/sweeps/thesis-synthetic-mi-renyi.yaml",
     "configs/sweeps/thesis-ptb-latent.yaml", "configs/sweeps/thesis-ptb-latent-l2.yaml"],
)  # fmt: skip
def test_thesis_sweeps_accept_both_ends_of_table_5_2(path) -> None:
    """Every Table 5.2 range end (and grid end) builds a valid model and objective (λ up to 0.9999 is below 1)."""
    from infolm.config import load_config
    from infolm.sweep import _override, load_sweep
    from tests.conftest import ROOT

    sweep, space = load_sweep(ROOT / path)
    for end in ("low", "high"):
        overrides = [*sweep.overrides, *(_override(k, getattr(spec, end)) for k, spec in space.items())]
        pick = min if end == "low" else max  # a grid's ends (lambda per point)
        overrides += [_override(k, pick(values)) for k, values in (sweep.grid or {}).items()]
        config = load_config(ROOT / sweep.base, overrides)
        settings = {k: v for k, v in config.model.items() if k != "name"}
        MODELS.make_config(config.model["name"], settings, where="model")
        for name, term in config.objective.items():
            OBJECTIVES.build(name, term, where=f"objective.{name}")


def test_the_loss_is_a_mean_over_sentences_eq_5_5_or_per_token_as_a_setting() -> None:
    """Eq. 5.5 is an expectation over sentences: every sentence of a batch weighs the same, and the mean is
    divided by the training sentences' mean length (a constant) to read per token. ``normalize: tokens``
    divides the batch's sum by its scored tokens, so the batch's sentence lengths change each one's weight."""

    class Corpus:  # training sentences of 4 and 8 scored tokens (words and <eos>): mean length 6
        def sentence_offsets(self, split: str) -> list[int]:
            return [0, 4, 12]

    torch.manual_seed(0)
    model = MODELS.build("latent-sentence-lstm", {"embedding": 8, "hidden": 8, "latent_size": 3}, vocab_size=12)
    targets = torch.tensor([[5, 6, 0, -100, -100, -100, -100, -100, -100, -100], [5, 6, 7, 8, 9, 10, 11, 5, 6, 0]])
    batch = Batch(inputs=targets.clamp(min=0), targets=targets)
    for normalize, divisor in (("sentences", 2 * 6.0), ("tokens", 3 + 10.0)):
        objective = OBJECTIVES.build("mi-kl", {"estimator": "iwae", "samples": 3, "normalize": normalize})
        objective.setup(Corpus(), model)
        torch.manual_seed(1)
        loss = objective(model, batch, None).losses["mi-kl"]
        torch.manual_seed(1)  # the same draws: the per-sentence objective by hand
        tokens, lengths = targets.clamp(min=0), torch.tensor([3, 10])
        q, p = model.posterior(tokens, lengths), model.prior()
        z = q.rsample((3,))
        value = objective_value(
            kl_objective(0.5, 3, 3), model.log_likelihood(tokens, lengths, z), p.log_prob(z) - q.log_prob(z)
        )
        torch.testing.assert_close(loss, -value.sum() / divisor)
        # per sentence, sentences of several lengths leave divergence to the run's own losses
        assert objective.loss_scale(12) == (None if normalize == "sentences" else pytest.approx(math.log(12)))
    with pytest.raises(InfolmError, match="normalize must be one of"):
        OBJECTIVES.build("mi-kl", {"normalize": "words"}, where="objective.mi-kl")
