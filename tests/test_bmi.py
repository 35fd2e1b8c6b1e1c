"""BMI regularizer: importance weights, conditional likelihood, phase switching, weight 0 changes nothing."""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from infolm.data.corpus import Corpus
from infolm.errors import InfolmError
from infolm.models.base import MODELS, LanguageModel
from infolm.objectives.base import OBJECTIVES, Batch, Composite
from infolm.objectives.bmi import (
    BMI,
    conditional_log_likelihood,
    importance_weights,
    max_pool_features,
)
from infolm.objectives.mle import MLE, MLEConfig


def topic_corpus(lines: int = 200, seed: int = 0) -> Corpus:
    """Runs of 4 lines share one of 5 topics (disjoint 6-word vocabularies): consecutive lines are dependent."""
    rng = random.Random(seed)
    out = []
    for _block in range(lines // 4):
        topic = rng.randrange(5)
        for _ in range(4):
            out.append(" ".join(f"w{topic}_{rng.randrange(6)}" for _ in range(rng.randint(3, 7))))
    return Corpus.from_texts("topics", "word", {"train": "\n".join(out) + "\n"})


def tiny_lstm(vocab_size: int, seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    import infolm.models.lstm  # noqa: F401  (registration)

    return MODELS.build("lstm", {"emb": 16, "hidden": 16, "layers": 2}, vocab_size=vocab_size)


def build_bmi(corpus: Corpus, model: torch.nn.Module, **settings: object) -> BMI:
    term = OBJECTIVES.build("bmi", {"batch_size": 8, "hidden": 32, **settings})
    assert isinstance(term, BMI)
    term.setup(corpus, model)
    return term


def stream_batch(corpus: Corpus, step: int = 0) -> Batch:
    data = corpus.stream("train")[: 4 * 11].view(4, 11)
    return Batch(inputs=data[:, :-1], targets=data[:, 1:], step=step)


def test_self_normalized_importance_weights() -> None:
    reward = torch.tensor([0.0, -1.0, 2.0, 0.5])
    log_g = torch.log(torch.tensor([0.3, 0.21, 0.147, 0.3]))
    weights = importance_weights(reward, log_g, beta=1.0)
    assert math.isclose(float(weights.sum()), 1.0, rel_tol=1e-6)
    unnormalized = torch.exp(reward) / log_g.exp()  # p*_beta(Y | Y*) / G(Y | Y*) up to Z, Eq. 16
    torch.testing.assert_close(weights, unnormalized / unnormalized.sum())
    flat = importance_weights(reward, log_g, beta=1e9)  # beta -> inf: weights are 1 / G, normalized
    torch.testing.assert_close(flat, (1 / log_g.exp()) / (1 / log_g.exp()).sum())


def test_max_pool_ignores_padding() -> None:
    h = torch.tensor([[[1.0], [5.0], [9.0]], [[-3.0], [-2.0], [-1.0]]])  # (B=2, T=3, H=1)
    phi = max_pool_features([h, -h], torch.tensor([2, 3]))
    assert phi.tolist() == [[5.0, -1.0], [-1.0, 3.0]]


def test_conditional_log_likelihood_equals_per_example_computation() -> None:
    corpus = topic_corpus()
    model = tiny_lstm(len(corpus.vocab)).eval()
    x = [corpus.sentence("train", i) for i in (0, 5, 9)]
    y = [corpus.sentence("train", i) for i in (1, 2, 30)]
    pad = lambda seqs: torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True)  # noqa: E731
    x_len, y_len = torch.tensor([len(s) for s in x]), torch.tensor([len(s) for s in y])
    batched = conditional_log_likelihood(model, pad(x), x_len, pad(y), y_len)
    for i in range(3):
        seq = torch.cat([x[i], y[i]])[None]
        logits = model(seq[:, :-1], model.init_state(1)).logits
        log_probs = F.log_softmax(logits, -1)[0].gather(-1, seq[0, 1:, None]).squeeze(-1)
        expected = log_probs[len(x[i]) - 1 :].sum()
        torch.testing.assert_close(batched[i], expected, atol=1e-5, rtol=1e-5)


def test_phase1_loss_is_the_eq6_proxy_on_replayed_samples() -> None:
    corpus = topic_corpus()
    model = tiny_lstm(len(corpus.vocab)).eval()
    term = build_bmi(corpus, model)
    torch.manual_seed(3)
    terms = term(model, stream_batch(corpus), None)
    assert set(terms.losses) == {"bmi"} and terms.metrics["bmi_phase"] == 1.0
    torch.manual_seed(3)
    assert term.index is not None and term.discriminator is not None
    x, y = term.index.sample_positive(8)
    neg = term.index.sample_negative(8)
    feats = [term.features(model, *term.index.batch(i)) for i in (x, y, neg)]
    pos, negs = term.discriminator(feats[0], feats[1]), term.discriminator(feats[0], feats[2])
    expected = F.softplus(-pos).mean() + F.softplus(negs).mean()  # -(Eq. 6)
    torch.testing.assert_close(terms.losses["bmi"], expected, atol=1e-5, rtol=1e-5)


def test_raml_with_point_proposal_and_flat_payoff_is_the_mean_next_sentence_likelihood() -> None:
    # lambda = 1 puts all of G on Y* and beta -> inf flattens the pay-off: IW-RAML = MLE of Y* given X
    corpus = topic_corpus()
    model = tiny_lstm(len(corpus.vocab)).eval()
    term = build_bmi(corpus, model, lam=1.0, beta=1e9, phase2_start=0, phase1_weight=0.0)
    term.on_step_end(0, {})
    torch.manual_seed(4)
    terms = term(model, stream_batch(corpus), None)
    assert set(terms.losses) == {"bmi_raml"} and terms.metrics["bmi_phase"] == 2.0
    assert abs(terms.metrics["bmi_raml_reward"]) < 1e-5 and math.isclose(terms.metrics["bmi_raml_ess"], 8, rel_tol=1e-5)
    torch.manual_seed(4)
    assert term.index is not None
    x, y = term.index.sample_positive(8)
    term.index.sample_negative(8)
    xt, xl = term.index.batch(x)
    yt, yl = term.index.batch(y)
    expected = -conditional_log_likelihood(model, xt, xl, yt, yl).mean() / yl.float().mean()
    torch.testing.assert_close(terms.losses["bmi_raml"], expected, atol=1e-5, rtol=1e-5)


def test_phase_switch_by_steps_by_ntasgd_and_never_for_base() -> None:
    corpus = topic_corpus(40)
    model = tiny_lstm(len(corpus.vocab))
    by_steps = build_bmi(corpus, model, phase2_start=3)
    by_steps.on_step_end(2, {})
    assert not by_steps.phase2
    by_steps.on_step_end(3, {})
    assert by_steps.phase2
    nt = build_bmi(corpus, model, nonmono=2)
    for loss in (5.0, 4.0, 3.0, 2.9):
        nt.on_evaluation(0, loss)
    assert not nt.phase2
    nt.on_evaluation(0, 4.5)  # worse than min of all but the last 2 evaluations
    assert nt.phase2
    base = build_bmi(corpus, model, variant="base", phase2_start=0)
    base.on_step_end(10, {})
    for loss in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0):
        base.on_evaluation(0, loss)
    assert not base.phase2
    restored = build_bmi(corpus, model, nonmono=2)
    restored.load_state_dict(nt.state_dict())
    assert restored.phase2 and restored.trigger.losses == nt.trigger.losses


def test_param_groups_put_the_discriminator_on_its_own_adam() -> None:
    corpus = topic_corpus(40)
    model = tiny_lstm(len(corpus.vocab))
    term = build_bmi(corpus, model)
    (group,) = term.param_groups()
    assert group["optimizer"] == "adam" and group["lr"] == 2e-4 and group["weight_decay"] == 1e-6
    assert term.discriminator is not None
    assert {id(p) for p in group["params"]} == {id(p) for p in term.discriminator.parameters()}
    first = term.discriminator.net[0]
    assert isinstance(first, torch.nn.Linear) and first.in_features == 5 * (16 + 16)


def train_steps(corpus: Corpus, composite: Composite, steps: int = 3) -> list[torch.Tensor]:
    model = tiny_lstm(len(corpus.vocab), seed=1).train()
    composite.setup(corpus, model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    torch.manual_seed(7)
    for step in range(steps):
        batch = stream_batch(corpus, step)
        output = model(batch.inputs, model.init_state(4))
        loss = composite(model, batch, output).total()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        composite.on_step_end(step + 1, {})
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("settings", [{"weight": 0.0}, {"weight": 0.1, "phase1_weight": 0.0, "phase2_weight": 0.0}])
def test_zero_bmi_weights_leave_training_unchanged(settings: dict[str, float]) -> None:
    corpus = topic_corpus(80)
    baseline = train_steps(corpus, Composite({"mle": MLE(MLEConfig())}))
    term = OBJECTIVES.build("bmi", {"batch_size": 4, "hidden": 8, "phase2_start": 1, **settings})
    with_bmi = train_steps(corpus, Composite({"mle": MLE(MLEConfig()), "bmi": term}))
    for a, b in zip(baseline, with_bmi, strict=True):
        assert torch.equal(a, b)
    active = OBJECTIVES.build("bmi", {"batch_size": 4, "hidden": 8, "weight": 0.1})
    changed = train_steps(corpus, Composite({"mle": MLE(MLEConfig()), "bmi": active}))
    assert any(not torch.equal(a, b) for a, b in zip(baseline, changed, strict=True))


def test_phase1_training_learns_the_next_sentence_dependency() -> None:
    corpus = topic_corpus(200)
    model = tiny_lstm(len(corpus.vocab), seed=2).train()
    term = build_bmi(corpus, model, batch_size=32, hidden=32)
    (group,) = term.param_groups()
    optimizer = torch.optim.Adam(list(model.parameters()) + group["params"], lr=3e-3)
    torch.manual_seed(0)
    bounds = []
    for step in range(120):
        terms = term(model, stream_batch(corpus, step), None)
        optimizer.zero_grad()
        terms.total().backward()
        optimizer.step()
        bounds.append(terms.metrics["bmi_mine"])
    early, late = sum(bounds[:10]) / 10, sum(bounds[-20:]) / 20
    assert late > early + 0.3, (early, late)  # the MINE bound of the minibatch grows from about 0


def test_works_with_the_mixture_of_softmaxes_model_in_phase2() -> None:
    from infolm.models.mos import AWDLSTMMoS

    corpus = topic_corpus(60)
    torch.manual_seed(0)
    model: AWDLSTMMoS = MODELS.build(  # type: ignore[assignment]
        "awd-lstm-mos", {"emb": 8, "hidden": 12, "last_hidden": 8, "n_experts": 2}, vocab_size=len(corpus.vocab)
    )
    term = build_bmi(corpus, model, phase2_start=0)
    term.on_step_end(0, {})
    terms = term(model, stream_batch(corpus), None)
    assert set(terms.losses) == {"bmi", "bmi_raml"}
    terms.total().backward()
    assert model.encoder.weight.grad is not None and term.discriminator is not None
    assert term.discriminator.net[0].weight.grad is not None


def test_bad_settings_are_user_errors() -> None:
    with pytest.raises(InfolmError):
        OBJECTIVES.build("bmi", {"variant": "half"})
    with pytest.raises(InfolmError):
        OBJECTIVES.build("bmi", {"lam": 0.0})
    with pytest.raises(RuntimeError):
        BMI(OBJECTIVES.make_config("bmi", {})).param_groups()


def test_gradient_variance_example_runs(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import bmi_gradient_variance

    summary = bmi_gradient_variance.main(
        ["--quick", "--out", str(tmp_path / "h.png"), "--json", str(tmp_path / "s.json")]
    )
    assert (tmp_path / "h.png").stat().st_size > 0 and (tmp_path / "s.json").exists()
    assert summary["parameters_compared"] > 0 and 0.0 <= summary["fraction_rl_higher"] <= 1.0


def test_gradient_variance_example_rewards_the_policy_with_eq_9() -> None:
    """The RL baseline's reward is R+ = -SP(-D) (Eqs. 7, 9), not IW-RAML's shifted score (Eq. 14)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import bmi_gradient_variance

    scores = torch.tensor([-30.0, -1.0, 0.0, 2.5, 30.0])
    reward = bmi_gradient_variance.policy_reward(scores)
    assert torch.allclose(reward, torch.nn.functional.logsigmoid(scores))
    assert reward[2].item() == pytest.approx(-math.log(2.0)) and (reward <= 0).all()


def test_init_from_continues_the_discriminator_and_the_phase(tmp_path: Path) -> None:
    """The "(ft.)" rows: fine-tuning from a BMI run goes on with its discriminator and Phase II."""
    from infolm.training.metrics import read_metrics
    from tests.conftest import run_in_process

    small = ["data.max_train_tokens=5000", "data.max_eval_tokens=300", "train.log_every=1"]
    base, tuned = tmp_path / "base", tmp_path / "tuned"
    first = run_in_process(
        "train", "configs/ptb/bmi-full.yaml", f"run.dir={base}", *small, "train.max_steps=4", "train.eval_every=4",
        "objective.bmi.phase2_start=2",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    second = run_in_process(
        "train", "configs/ptb/bmi-full.yaml", f"run.dir={tuned}", *small, f"run.init_from={base}",
        "train.max_steps=1", "optim.lr=0", "optim.average={name: tail}",
    )  # fmt: skip
    assert second.returncode == 0, second.stderr[-2000:]
    step = next(r for r in read_metrics(tuned / "metrics.jsonl") if r.get("step") == 1 and "bmi_phase" in r)
    assert step["bmi_phase"] == 2.0  # Phase II goes on (a fresh objective would start in Phase I)
    saved = torch.load(base / "checkpoints/best/objective.pt", weights_only=True)
    assert saved["terms.bmi._extra_state"]["phase2"].item()
    continued = torch.load(tuned / "checkpoints/best/objective.pt", weights_only=True)
    weights = [k for k in saved if k.startswith("terms.bmi.discriminator.")]
    # one Adam step (lr 2e-4) from the base run's discriminator, not a fresh initialization
    assert weights and max(float((saved[k] - continued[k]).abs().max()) for k in weights) < 1e-3


def test_conditional_log_likelihood_scores_only_y_with_the_same_values_and_gradients() -> None:
    """A model with hidden_states and output_log_probs (the MoS) gets its head over Y's positions only:
    the numbers and the gradients of the full pass over X and Y, ragged lengths included, in evaluation
    and, under one seed, in training (dropout on)."""
    corpus = topic_corpus()
    torch.manual_seed(0)
    model = MODELS.build("awd-lstm-mos", {"emb": 8, "hidden": 12, "last_hidden": 8, "n_experts": 3}, len(corpus.vocab))
    model.eval()
    x = [corpus.sentence("train", i) for i in (0, 5, 9, 13)]
    y = [corpus.sentence("train", i) for i in (1, 2, 30, 14)]
    y[3] = y[3][:1]  # a one-token Y
    pad = lambda seqs: torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True)  # noqa: E731
    x_len, y_len = torch.tensor([len(s) for s in x]), torch.tensor([len(s) for s in y])

    class FullPassOnly(torch.nn.Module):  # the same weights, without the partial-pass methods
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, tokens: torch.Tensor, state: object) -> object:
            return self.inner(tokens, state)

        def init_state(self, batch_size: int, device: object) -> object:
            return self.inner.init_state(batch_size, device)

    y_padded = torch.nn.functional.pad(pad(y), (0, 3))  # extra columns of padding change nothing
    for training in (False, True):  # in training, the same seed draws the same dropout masks both ways
        model.train(training)
        torch.manual_seed(5)
        fast = conditional_log_likelihood(model, pad(x), x_len, y_padded, y_len)
        grads_fast = torch.autograd.grad(fast.sum(), list(model.parameters()), allow_unused=True)
        torch.manual_seed(5)
        full = conditional_log_likelihood(FullPassOnly(model), pad(x), x_len, pad(y), y_len)  # type: ignore[arg-type]
        grads_full = torch.autograd.grad(full.sum(), list(model.parameters()), allow_unused=True)
        torch.testing.assert_close(fast, full, atol=1e-5, rtol=1e-5)
        for a, b in zip(grads_fast, grads_full, strict=True):
            if a is None or b is None:
                assert a is None and b is None
            else:
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_ntasgd_averaging_and_bmi_phase2_start_at_the_same_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the trainer, the tail averager's NT-ASGD trigger and BMI-full's own trigger read the same
    validation losses: averaging and Phase II both begin right after the evaluation that fires."""
    from infolm.build import train
    from infolm.config import load_config
    from infolm.tasks.base import Metrics
    from infolm.tasks.stream_lm import StreamLM
    from infolm.training.metrics import read_metrics
    from tests.conftest import ROOT

    # nonmono 2: the fifth evaluation (4.5 > min(5, 4)) fires, the fourth (4 > 5?) does not
    losses = iter([5.0, 4.0, 3.0, 4.0, 4.5, 4.6, 4.7])

    def scripted(self: StreamLM, model: object, split: str, device: object = "cpu") -> Metrics:
        return Metrics({"loss": next(losses)}, selection="loss")

    monkeypatch.setattr(StreamLM, "evaluate", scripted)
    overrides = [
        f"run.dir={tmp_path}",
        "train.max_steps=13",
        "train.eval_every=2",
        "train.log_every=1",
        "model={name: awd-lstm-mos, emb: 8, hidden: 12, last_hidden: 8, n_experts: 2}",
        "optim.average={name: tail, nonmono: 2, latest: 0}",
        "objective.bmi={variant: full, nonmono: 2, batch_size: 4, hidden: 16}",
    ]
    train(load_config(ROOT / "configs/tiny.yaml", overrides), overrides)
    records = read_metrics(tmp_path / "metrics.jsonl")
    valid = [r for r in records if r.get("split") == "valid"]
    # evaluations at steps 2, 4, ..., 12 and the last one at 13; the one at step 10 fires
    assert [r["started_at"] for r in valid] == [-1, -1, -1, -1, 11, 11, 11]
    phases = {r["step"]: r["bmi_phase"] for r in records if "bmi_phase" in r}
    assert [step for step, phase in phases.items() if phase == 2.0] == [11, 12, 13]
    assert all(phase == 1.0 for step, phase in phases.items() if step <= 10)
