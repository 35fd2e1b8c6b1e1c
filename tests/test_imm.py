"""IMM objective: crosstalk gradient, weight 0, primary state, induced distribution, context index."""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from infolm.errors import InfolmError
from infolm.models.base import LanguageModel, LMOutput
from infolm.objectives.base import OBJECTIVES, Batch, Composite, Objective, Terms
from infolm.objectives.imm import (
    IMM,
    IMMConfig,
    ShortContextIndex,
    crosstalk_induced_cross_entropy,
    induced_cross_entropy,
)

VOCAB = 11


class TinyLSTM(LanguageModel):
    """A 1-layer LSTM LM with dropout, following the model contract (state: list of (h, c), (1, B, H))."""

    def __init__(self, vocab_size: int = VOCAB, hidden: int = 8, dropout: float = 0.3) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, hidden)
        self.rnn = nn.LSTM(hidden, hidden, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(hidden, vocab_size)

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> Any:
        dtype = self.decoder.weight.dtype
        zeros = torch.zeros(1, batch_size, self.rnn.hidden_size, device=device, dtype=dtype)
        return [(zeros, zeros.clone())]

    def forward(self, tokens: Tensor, state: Any = None) -> LMOutput:
        if state is None:
            state = self.init_state(tokens.size(0), tokens.device)
        x = self.drop(self.embedding(tokens))  # (B, T, H)
        x, new_state = self.rnn(x, state[0])
        x = self.drop(x)
        return LMOutput(logits=self.decoder(x), hiddens=[x], state=[new_state])


class AddOneBigram:
    """Stand-in restricted model: add-one smoothed n-gram over the last context token."""

    def __init__(self, stream: Tensor, vocab_size: int) -> None:
        counts = torch.ones(vocab_size, vocab_size, dtype=torch.float64)
        counts.index_put_((stream[:-1], stream[1:]), torch.ones(len(stream) - 1, dtype=torch.float64), accumulate=True)
        self.table = (counts / counts.sum(1, keepdim=True)).float()

    def next_token_distribution(self, contexts: Tensor) -> Tensor:
        return self.table[contexts[:, -1]]


class ToyCorpus:
    def __init__(self, stream: Tensor) -> None:
        self._stream = stream
        self.vocab = list(range(VOCAB))

    def stream(self, split: str) -> Tensor:
        return self._stream


class TinyMLE(Objective):
    def __init__(self) -> None:
        super().__init__()
        self.config = dataclasses.make_dataclass("C", [("weight", float, 1.0)])()

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        logits = output.logits
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), batch.targets.reshape(-1))
        return Terms(losses={"mle": loss}, tokens=batch.targets.numel())


def make_stream(n: int = 400, seed: int = 0) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (n,), generator=generator)


def windows(stream: Tensor, batch_size: int = 3, bptt: int = 6) -> list[Batch]:
    rows = stream[: (len(stream) // batch_size) * batch_size].view(batch_size, -1)
    out = []
    for step, i in enumerate(range(0, rows.size(1) - 1 - bptt, bptt)):
        out.append(Batch(inputs=rows[:, i : i + bptt], targets=rows[:, i + 1 : i + 1 + bptt], step=step))
    return out


def make_imm(stream: Tensor, model: nn.Module, **settings: Any) -> IMM:
    imm = IMM(IMMConfig(**settings), restricted=AddOneBigram(stream, VOCAB))
    imm.setup(ToyCorpus(stream), model)
    return imm


def fill_bank(imm: IMM, model: nn.Module, batches: list[Batch]) -> None:
    state = model.init_state(batches[0].inputs.size(0))
    for batch in batches:
        with torch.no_grad():
            output = model(batch.inputs, state)
        imm._record(batch, output)
        state = output.state


def param_grads(model: nn.Module) -> list[Tensor]:
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


# ------------------------------------------------------------------------------------------------


def test_crosstalk_function_equals_autograd_through_log_mean() -> None:
    torch.manual_seed(0)
    weight = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    features = torch.randn(4, 3, 5, dtype=torch.float64)  # (k, P, D)
    target = torch.softmax(torch.randn(3, 7, dtype=torch.float64), -1)

    def sample_fn(chunk: int) -> Tensor:  # one sample per chunk
        return torch.log_softmax(features[chunk : chunk + 1] @ weight, -1)

    reference = induced_cross_entropy(target, torch.log_softmax(features @ weight, -1))
    (expected,) = torch.autograd.grad(reference, weight)
    loss = crosstalk_induced_cross_entropy(sample_fn, 4, target, [weight])
    (got,) = torch.autograd.grad(loss, weight)
    assert torch.allclose(loss, reference, atol=1e-12)
    assert torch.allclose(got, expected, atol=1e-10)


@pytest.mark.parametrize("realization", ["replay", "state-bank", "carried-state"])
def test_imm_crosstalk_gradient_equals_autograd(realization: str) -> None:
    stream = make_stream()
    torch.manual_seed(1)
    model = TinyLSTM().double()
    batches = windows(stream)
    grads, losses = [], []
    for chunk in (1, 3, 10):  # 1, 3: crosstalk sample by sample / in chunks; 10 >= k: plain autograd
        imm = make_imm(stream, model, realization=realization, k=7, j=1, sample_chunk=chunk, context_window=5)
        torch.manual_seed(2)  # the bank is filled by dropout-on passes
        fill_bank(imm, model, batches[:4])
        model.zero_grad()
        output = model(batches[4].inputs, model.init_state(3))
        loss = imm(model, batches[4], output).losses["imm"]
        loss.backward()
        grads.append(param_grads(model))
        losses.append(loss.detach())
    assert losses[0].item() > 0
    for other_loss, other in zip(losses[1:], grads[1:]):
        assert torch.allclose(other_loss, losses[0], atol=1e-10)
        for a, b in zip(grads[0], other, strict=True):
            assert torch.allclose(a, b, atol=1e-5, rtol=0)
    assert any(g.abs().sum() > 0 for g in grads[0])


def test_weight_zero_leaves_training_unchanged() -> None:
    stream = make_stream()
    batches = windows(stream)[:4]

    def train(with_imm: bool) -> tuple[list[Tensor], Tensor]:
        torch.manual_seed(3)
        model = TinyLSTM()
        terms: dict[str, Objective] = {"mle": TinyMLE()}
        if with_imm:
            terms["imm"] = make_imm(stream, model, weight=0.0, realization="replay", k=3, j=2)
        objective = Composite(terms)
        state = model.init_state(3)
        for batch in batches:
            output = model(batch.inputs, state)
            result = objective(model, batch, output)
            model.zero_grad()
            result.total().backward()
            with torch.no_grad():  # plain SGD (torch.optim's first step imports dynamo: seconds)
                for p in model.parameters():
                    p -= 0.5 * p.grad
            state = [tuple(t.detach() for t in layer) for layer in output.state]
        return [p.detach().clone() for p in model.parameters()], torch.get_rng_state()

    plain, plain_rng = train(False)
    with_zero, zero_rng = train(True)
    for a, b in zip(plain, with_zero, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(plain_rng, zero_rng)


@pytest.mark.parametrize("realization", ["replay", "state-bank", "in-batch"])
def test_imm_branch_leaves_primary_state_and_gradient_untouched(realization: str) -> None:
    stream = make_stream()
    batches = windows(stream)
    torch.manual_seed(4)
    model = TinyLSTM()
    imm = make_imm(stream, model, realization=realization, k=4, j=1, sample_chunk=2)
    fill_bank(imm, model, batches[:3])
    batch = batches[3]
    mle = TinyMLE()

    def main_grads(run_imm: bool) -> tuple[list[Tensor], Any]:
        torch.manual_seed(5)
        model.zero_grad()
        start = model.init_state(3)
        start_copy = copy.deepcopy(start)
        output = model(batch.inputs, start)
        final_copy = [tuple(t.detach().clone() for t in layer) for layer in output.state]
        if run_imm:
            imm_loss = imm(model, batch, output).losses["imm"]
            assert imm_loss.requires_grad
            assert model.training  # mode restored after the eval-mode IMM passes
        for (h, c), (h0, c0) in zip(start, start_copy):
            assert torch.equal(h, h0) and torch.equal(c, c0)
        for (h, c), (h1, c1) in zip(output.state, final_copy):
            assert torch.equal(h, h1) and torch.equal(c, c1)
        mle(model, batch, output).losses["mle"].backward()
        return param_grads(model), output.state

    plain, _ = main_grads(False)
    after_imm, _ = main_grads(True)
    for a, b in zip(plain, after_imm, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("realization", ["replay", "state-bank"])
def test_induced_distribution_sums_to_one(realization: str) -> None:
    stream = make_stream()
    torch.manual_seed(6)
    model = TinyLSTM()
    imm = make_imm(stream, model, realization=realization, k=5, positions_per_batch=4)
    fill_bank(imm, model, windows(stream)[:5])
    contexts, ids, weights = imm._select(windows(stream)[5])
    assert 1 <= len(ids) <= 4 and len(torch.unique(ids)) == len(ids)
    assert math.isclose(float(weights.sum()), 1.0) and ((weights * 4) % 1 == 0).all()  # shares of 4 positions
    sample_fn, chunks = imm._sampler(model, contexts, ids, 5, torch.device("cpu"))
    with torch.no_grad():
        log_probs = torch.cat([sample_fn(c) for c in range(chunks)])  # (k, P, V)
    induced = torch.logsumexp(log_probs, 0).exp() / log_probs.size(0)
    assert torch.allclose(induced.sum(-1), torch.ones(len(ids)), atol=1e-6)


def test_state_bank_sample_equals_continuing_the_primary_pass() -> None:
    """One banked state, fed the next input, gives the primary pass's next prediction (eval mode)."""
    stream = make_stream()
    batches = windows(stream, batch_size=1, bptt=5)
    torch.manual_seed(7)
    model = TinyLSTM().eval()
    imm = make_imm(stream, model, realization="state-bank", k=3)
    with torch.no_grad():
        first = model(batches[0].inputs)
        imm._record(batches[0], first)
        second = model(batches[1].inputs, first.state)
    contexts = batches[1].inputs[:, :1]  # the short context at the first position of the next batch
    ids = imm.index.lookup(contexts)
    sample_fn, _ = imm._sampler(model, contexts, ids, 3, torch.device("cpu"))
    with torch.no_grad():
        log_probs = sample_fn(0)  # (1, 1, V): all samples come from the single banked state
    assert torch.allclose(log_probs[0, 0], torch.log_softmax(second.logits[0, 0], -1), atol=1e-6)


def test_replay_window_equals_full_history_when_it_covers_it() -> None:
    stream = make_stream(60)
    torch.manual_seed(8)
    model = TinyLSTM().eval()
    imm = make_imm(stream, model, realization="replay", context_window=60, k=6)
    contexts = stream[None, 30:31]
    ids = imm.index.lookup(contexts)
    torch.manual_seed(9)
    sample_fn, chunks = imm._sampler(model, contexts, ids, 6, torch.device("cpu"))
    torch.manual_seed(9)
    occurrences = imm.index.sample(ids, 6)[:, 0]
    with torch.no_grad():
        full = torch.log_softmax(model(stream[None]).logits[0], -1)  # (N, V)
        got = torch.cat([sample_fn(c) for c in range(chunks)])[:, 0]
    assert torch.allclose(got, full[occurrences], atol=1e-5)


def test_short_context_index() -> None:
    stream = make_stream(300)
    for length in (1, 2):
        index = ShortContextIndex(stream, VOCAB, length)
        assert int(index.counts.sum()) == len(stream) - length
        for context_id in range(len(index)):
            start, count = int(index.offsets[context_id]), int(index.counts[context_id])
            positions = index.positions[start : start + count]
            contexts = torch.stack([stream[p - length + 1 : p + 1] for p in positions.tolist()])
            assert (index.lookup(contexts) == context_id).all()
        samples = index.sample(torch.arange(len(index)), 5)  # (5, C)
        assert (
            index.lookup(torch.stack([stream[samples - length + 1 + i] for i in range(length)], -1))
            == torch.arange(len(index))
        ).all()
    index = ShortContextIndex(torch.tensor([0, 1, 2, 0, 1]), VOCAB, 2)
    assert index.lookup(torch.tensor([[1, 0], [2, 2], [0, 1]])).tolist() == [
        -1,
        -1,
        index.lookup(torch.tensor([[0, 1]])).item(),
    ]


def test_k_on_every_jth_step_and_clip_group() -> None:
    stream = make_stream()
    model = TinyLSTM()
    imm = make_imm(stream, model, realization="replay", k=4, j=3, clip=0.7)
    batch = windows(stream)[0]
    output = model(batch.inputs)
    seen = []
    for step in range(4):
        batch.step = step
        terms = imm(model, batch, output)
        seen.append(terms.metrics["imm_k"])
        assert terms.clip_groups == {"imm": 0.7}
    assert seen == [4.0, 1.0, 1.0, 4.0]


def test_default_takes_k_samples_on_every_step() -> None:
    """The default is the consistent objective: Eq. 15's k-sample estimate on every step, no 1-sample
    (Eq. 18) step in between, whatever the step count (App. D.2's j = 5 is a setting)."""
    assert (IMMConfig().j, IMMConfig().one_sample) == (1, "eq18")
    stream = make_stream()
    model = TinyLSTM()
    imm = make_imm(stream, model, k=3)
    batch = windows(stream)[0]
    output = model(batch.inputs)
    seen = []
    for step in range(6):
        batch.step = step
        seen.append(imm(model, batch, output).metrics["imm_k"])
    assert seen == [3.0] * 6


def test_imm_loss_is_cross_entropy_of_restricted_against_induced() -> None:
    """With one occurrence per context, the induced model is Q at that occurrence: a hand-computed value."""
    stream = torch.arange(VOCAB)  # every token once
    model = TinyLSTM().eval()
    imm = make_imm(stream, model, realization="replay", k=3, j=1, context_window=VOCAB, positions_per_batch=100)
    batch = Batch(inputs=stream[None, :-1], targets=stream[None, 1:])
    with torch.no_grad():
        loss = imm(model, batch, model(batch.inputs)).losses["imm"]
        log_q = torch.log_softmax(model(stream[None, :-1]).logits[0], -1)  # (V-1, V)
        target = imm.restricted.next_token_distribution(stream[:-1, None])
    assert math.isclose(loss.item(), -(target * log_q).sum(-1).mean().item(), rel_tol=1e-5)


def test_config_validation_and_registration() -> None:
    assert "imm" in OBJECTIVES
    built = OBJECTIVES.build("imm", {"k": 3})
    assert isinstance(built, IMM) and built.config.k == 3 and built.config.weight == 0.2
    with pytest.raises(InfolmError, match="realization"):
        IMMConfig(realization="magic")
    with pytest.raises(InfolmError, match="restricted_order"):
        IMMConfig(restricted_order=1)


def test_state_bank_requires_a_recurrent_model() -> None:
    class Stateless(TinyLSTM):
        def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> Any:
            return None

    with pytest.raises(InfolmError, match="state-bank"):
        make_imm(make_stream(), Stateless(), realization="state-bank")


def de_bruijn_stream() -> Tensor:
    """A stream in which every pair of consecutive tokens occurs once (de Bruijn B(VOCAB, 2), 122 tokens)."""
    sequence: list[int] = []
    word = [0] * 3

    def extend(t: int, p: int) -> None:
        if t > 2:
            if 2 % p == 0:
                sequence.extend(word[1 : p + 1])
            return
        word[t] = word[t - p]
        extend(t + 1, p)
        for symbol in range(word[t - p] + 1, VOCAB):
            word[t] = symbol
            extend(t + 1, t)

    extend(1, 1)
    return torch.tensor(sequence + sequence[:1])


def eq15_by_hand(model: nn.Module, stream: Tensor, imm: IMM, batch: Batch) -> Tensor:
    """Eq. 10/15 at every position of ``batch`` when each short context occurs once in ``stream``:
    every sample is that occurrence with its whole history, through the current parameters."""
    length = imm.context_len
    was_training = model.training
    model.eval()
    log_q = torch.log_softmax(model(stream[None]).logits[0], -1)  # (N, V): Q(·|y_-t) at each stream position
    model.train(was_training)
    contexts = batch.inputs.unfold(1, length, 1).reshape(-1, length)  # every position's short context
    ids = imm.index.lookup(contexts)
    occurrence = imm.index.positions[imm.index.offsets[ids]]  # the single occurrence of each
    target = imm.restricted.next_token_distribution(contexts)
    return -(target * log_q[occurrence]).sum(-1).mean()


def test_default_is_eq15_with_fresh_samples_at_every_position() -> None:
    """The default realization: every position (here 84 > the 32 of the old default), samples through
    the current parameters with their history; loss and gradient equal Eq. 15 computed by hand."""
    stream = de_bruijn_stream()
    torch.manual_seed(11)
    model = TinyLSTM()
    imm = make_imm(stream, model, restricted_order=3, k=3, j=1, context_window=len(stream))
    batch = Batch(inputs=stream[:86].view(2, 43), targets=stream[1:87].view(2, 43))
    for _ in range(2):  # after a parameter change, the samples follow the new parameters
        model.zero_grad()
        loss = imm(model, batch, model(batch.inputs)).losses["imm"]
        loss.backward()
        got = param_grads(model)
        model.zero_grad()
        expected_loss = eq15_by_hand(model, stream, imm, batch)
        expected_loss.backward()
        assert math.isclose(loss.item(), expected_loss.item(), rel_tol=1e-5)
        for a, b in zip(got, param_grads(model), strict=True):
            assert torch.allclose(a, b, atol=1e-6)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.3 * torch.randn_like(p))


def test_position_sampling_has_the_every_position_expectation() -> None:
    """positions_per_batch draws positions uniformly: its mean over draws is the every-position loss."""
    stream = de_bruijn_stream()
    torch.manual_seed(12)
    model = TinyLSTM().eval()
    batch = Batch(inputs=stream[:20].view(2, 10), targets=stream[1:21].view(2, 10))
    full = make_imm(stream, model, restricted_order=3, k=1, context_window=len(stream))
    sampled = make_imm(stream, model, restricted_order=3, k=1, context_window=len(stream), positions_per_batch=3)
    with torch.no_grad():
        output = model(batch.inputs)
        expected = full(model, batch, output).losses["imm"].item()
        torch.manual_seed(13)
        draws = torch.tensor([sampled(model, batch, output).losses["imm"].item() for _ in range(600)])
    with torch.no_grad():
        single = [
            Batch(batch.inputs[r : r + 1, c : c + 2], batch.targets[r : r + 1, c : c + 2])
            for r in range(2)
            for c in range(9)
        ]
        per_position = torch.tensor([eq15_by_hand(model, stream, full, one).item() for one in single])
    standard_error = per_position.std().item() / math.sqrt(3 * 600)
    assert abs(draws.mean().item() - expected) < 4 * standard_error
    assert draws.std() > 0  # the draws do differ


def test_shared_context_positions_are_weighted_by_their_count() -> None:
    """Positions sharing a short context share its samples and count once each (Eq. 12)."""
    stream = make_stream()
    model = TinyLSTM().eval()
    imm = make_imm(stream, model, k=2, j=1)
    batch = Batch(inputs=torch.tensor([[3, 3, 5, 3]]), targets=torch.tensor([[3, 5, 3, 1]]))
    contexts, ids, weights = imm._select(batch)
    shares = dict(zip(contexts[:, 0].tolist(), weights.tolist(), strict=True))
    assert shares == {3: 0.75, 5: 0.25}


def test_delayed_start_and_learning_rate_reset() -> None:
    stream = make_stream()
    model = TinyLSTM()
    imm = make_imm(stream, model, start_below_ppl=90.0, start_lr=0.5)
    batch = windows(stream)[0]
    rng = torch.get_rng_state()
    terms = imm(model, batch, model(batch.inputs))
    assert terms.losses["imm"].item() == 0.0 and terms.metrics["imm_active"] == 0.0
    composite = Composite({"mle": TinyMLE(), "imm": imm})
    composite.on_evaluation(10, math.log(120.0))
    assert composite.pop_lr_reset() is None and not bool(imm.started)
    composite.on_evaluation(20, math.log(80.0))
    assert composite.pop_lr_reset() == 0.5 and composite.pop_lr_reset() is None  # once
    assert bool(imm.started) and composite.state_dict()["terms.imm.started"].item()
    composite.on_evaluation(30, math.log(70.0))
    assert composite.pop_lr_reset() is None  # starting happens once
    torch.set_rng_state(rng)
    assert imm(model, batch, model(batch.inputs)).losses["imm"].item() > 0
    silent = Composite({"imm": make_imm(stream, model, weight=0.0, start_below_ppl=90.0, start_lr=0.5)})
    silent.on_evaluation(10, math.log(80.0))
    assert silent.pop_lr_reset() is None  # weight 0 changes nothing, the learning rate included
    by_step = make_imm(stream, model, start_step=3)
    by_step.on_step_end(2, {})
    assert not bool(by_step.started)
    by_step.on_step_end(3, {})
    assert bool(by_step.started) and by_step.pop_lr_reset() is None


def test_trainer_starts_imm_late_and_resets_the_learning_rate(tmp_path: Any) -> None:
    from infolm.training.metrics import read_metrics
    from tests.conftest import run_cli

    imm = "{weight: 0.2, k: 2, j: 2, positions_per_batch: 8, context_window: 5, start_step: 3, start_lr: 5.0}"
    result = run_cli(
        "train", "configs/tiny.yaml", f"run.dir={tmp_path}", "train.max_steps=6", "train.log_every=1",
        "train.eval_every=0", f"objective.imm={imm}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    records = read_metrics(tmp_path / "metrics.jsonl")
    steps = {r["step"]: r for r in records if "loss" in r and r.get("split") != "valid"}
    assert [steps[s]["imm_active"] for s in range(1, 7)] == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert [steps[s]["lr"] for s in range(1, 7)] == [20.0, 20.0, 20.0, 5.0, 5.0, 5.0]  # the lr each step used
    assert [(r["step"], r["lr"]) for r in records if r.get("event") == "lr_reset"] == [(3, 5.0)]
    assert steps[3]["imm"] == 0.0 and steps[4]["imm"] > 0.0


def test_crosstalk_backward_recomputes_under_the_forward_autocast() -> None:
    """Under bf16 autocast the samples of the backward pass are those of the forward pass (same
    precision), so the crosstalk weights sum to one and the gradient is autograd's."""
    torch.manual_seed(15)
    weight = torch.randn(5, 7, requires_grad=True)
    features = torch.randn(4, 3, 5)  # (k, P, D)
    target = torch.softmax(torch.randn(3, 7), -1)

    def sample_fn(chunk: int) -> Tensor:
        logits = (features[chunk : chunk + 1] @ weight).float()
        if torch.is_autocast_enabled("cpu"):  # stands for the bf16 rounding of the logits
            logits = logits + torch.arange(7.0)
        return torch.log_softmax(logits, -1)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        reference = induced_cross_entropy(target, torch.cat([sample_fn(c) for c in range(4)]))
        loss = crosstalk_induced_cross_entropy(sample_fn, 4, target, [weight])
    (expected,) = torch.autograd.grad(reference, weight)
    (got,) = torch.autograd.grad(loss, weight)
    assert torch.allclose(loss, reference, atol=1e-4)
    assert torch.allclose(got, expected, rtol=2e-2, atol=2e-3)  # bf16 matmuls in both graphs


def in_batch_by_hand(imm: IMM, batch: Batch, logits: Tensor) -> Tensor:
    """Eqs. 12 and 15 with every batch position of a short context as its samples, written per
    position and per context with Python loops (the implementation groups with scatters)."""
    length = imm.context_len
    inputs, targets = batch.inputs, batch.targets
    groups: dict[tuple[int, ...], list[Tensor]] = {}
    positions: list[tuple[int, ...]] = []
    for row in range(inputs.size(0)):
        for t in range(length - 1, inputs.size(1)):
            context = tuple(inputs[row, t - length + 1 : t + 1].tolist())
            if targets[row, t] == -100 or int(imm.index.lookup(torch.tensor([context]))[0]) < 0:
                continue
            groups.setdefault(context, []).append(torch.softmax(logits[row, t], -1))
            positions.append(context)
    losses = []
    for context in positions:  # each position's IMM term: its context's samples are all its occurrences
        target = imm.restricted.next_token_distribution(torch.tensor([context]))[0].to(logits.dtype)
        induced = torch.stack(groups[context]).mean(0)  # (V,) 1/m Σ_i Q(·|sh, x_i), Eq. 15
        losses.append(-(target * induced.log()).sum())
    return torch.stack(losses).mean()  # the mean over positions, Eq. 10


def test_in_batch_realization_is_eq15_over_the_batch_positions_of_each_context() -> None:
    """in-batch with k >= every context's count: the induced model of a context is the mean of the
    primary pass's predictions at all its batch positions; loss and gradient equal the hand version."""
    stream = make_stream(seed=3)
    torch.manual_seed(16)
    model = TinyLSTM().double()
    imm = make_imm(stream, model, realization="in-batch", k=50, j=1)
    batch = windows(stream, batch_size=4, bptt=12)[2]
    targets = batch.targets.clone()
    targets[1, 5:] = -100  # padding: neither a term nor a sample
    batch = dataclasses.replace(batch, targets=targets)
    torch.manual_seed(17)
    output = model(batch.inputs)
    loss = imm(model, batch, output).losses["imm"]
    (got,) = torch.autograd.grad(loss, [model.rnn.weight_hh_l0], retain_graph=True)
    expected = in_batch_by_hand(imm, batch, output.logits)
    (want,) = torch.autograd.grad(expected, [model.rnn.weight_hh_l0])
    assert math.isclose(loss.item(), expected.item(), rel_tol=1e-10)
    assert torch.allclose(got, want, atol=1e-10) and got.abs().sum() > 0
    shared = [c for c in range(VOCAB) if int((batch.inputs[targets != -100] == c).sum()) > 1]
    assert shared  # the batch does share contexts, so the grouping is exercised


def test_in_batch_realization_draws_k_positions_uniformly() -> None:
    """With k below a context's count, the k samples are drawn uniformly without replacement from its
    batch positions: over many draws the loss averages to the mean over all k-subsets."""
    from itertools import combinations

    stream = make_stream(seed=4)
    torch.manual_seed(18)
    model = TinyLSTM().double().eval()
    imm = make_imm(stream, model, realization="in-batch", k=2, j=1)
    batch = Batch(inputs=torch.tensor([[3, 4, 3, 5, 3, 4]]), targets=torch.tensor([[4, 3, 5, 3, 4, 1]]))
    with torch.no_grad():
        output = model(batch.inputs)
        log_q = torch.log_softmax(output.logits[0], -1)  # (T, V)
        torch.manual_seed(19)
        draws = torch.tensor([imm(model, batch, output).losses["imm"].item() for _ in range(400)])
    target = imm.restricted.next_token_distribution(torch.tensor([[3], [4], [5]])).double()

    def expected_term(row: int, where: list[int]) -> float:  # mean over the k-subsets of its positions
        subsets = list(combinations(where, min(2, len(where))))
        values = [-(target[row] * torch.logsumexp(log_q[list(s)], 0).sub(math.log(len(s)))).sum() for s in subsets]
        return float(torch.stack(values).mean())

    expected = (3 * expected_term(0, [0, 2, 4]) + 2 * expected_term(1, [1, 5]) + expected_term(2, [3])) / 6
    assert len(set(draws.tolist())) == 3  # context 3 has three distinct pairs; 4 and 5 are determined
    spread = draws.std().item()
    assert abs(draws.mean().item() - expected) < 4 * spread / math.sqrt(len(draws))


def test_in_batch_realization_trains_through_the_cli(tmp_path: Any) -> None:
    from infolm.training.metrics import read_metrics
    from tests.conftest import run_cli

    result = run_cli(
        "train", "configs/tiny.yaml", f"run.dir={tmp_path}", "train.max_steps=3", "train.log_every=1",
        "train.eval_every=0", "objective.imm={weight: 0.2, k: 10, j: 5, realization: in-batch}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    steps = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "imm" in r]
    assert len(steps) == 3 and all(math.isfinite(r["imm"]) and r["imm"] > 0 for r in steps)
    assert [r["imm_k"] for r in steps] == [10.0, 1.0, 1.0]


def test_released_one_sample_steps_use_the_smoothed_one_hot_target() -> None:
    """one_sample=released (the authors' released code): on 1-sample steps each position's own
    prediction is scored against (1 − γ(x))·onehot(y) + γ(x)·P̂(·), γ(x) the modified-KN bigram's
    back-off mass after x, (D1·N1(x) + D2·N2(x) + D3+·N3+(x)) / c(x), and P̂ its unigram."""
    from infolm.ngram import build_ngram

    stream = make_stream(seed=5)
    kn = build_ngram(stream, VOCAB, 2, method="modified-kn", history_id=None)
    counts = torch.zeros(VOCAB, VOCAB, dtype=torch.float64)
    counts.index_put_((stream[:-1], stream[1:]), torch.ones(len(stream) - 1, dtype=torch.float64), accumulate=True)
    d1, d2, d3 = kn.discounts[1]
    discounted = d1 * (counts == 1).sum(1) + d2 * (counts == 2).sum(1) + d3 * (counts >= 3).sum(1)
    gamma = discounted / counts.sum(1)  # every token occurs as a history in this stream
    torch.testing.assert_close(torch.as_tensor(kn.tables[0].backoff, dtype=torch.float64), gamma)

    torch.manual_seed(21)
    model = TinyLSTM().double()
    imm = IMM(IMMConfig(one_sample="released", j=5), restricted=kn)
    imm.setup(ToyCorpus(stream), model)
    batch = dataclasses.replace(windows(stream, batch_size=4, bptt=12)[3], step=1)  # not a k-sample step
    output = model(batch.inputs)
    loss = imm(model, batch, output).losses["imm"]
    unigram = torch.as_tensor(kn.tables[0].prob, dtype=torch.float64)
    target = (1 - gamma[batch.inputs]).unsqueeze(-1) * nn.functional.one_hot(batch.targets, VOCAB)
    target = target + gamma[batch.inputs].unsqueeze(-1) * unigram  # (B, T, V), rows sum to one
    torch.testing.assert_close(target.sum(-1), torch.ones_like(gamma[batch.inputs]))
    expected = -(target * torch.log_softmax(output.logits, dim=-1)).sum(-1).mean()
    assert math.isclose(loss.item(), expected.item(), rel_tol=1e-7)  # γ by hand agrees to ~1e-8
    (got,) = torch.autograd.grad(loss, [model.decoder.weight], retain_graph=True)
    (want,) = torch.autograd.grad(expected, [model.decoder.weight])
    assert torch.allclose(got, want, atol=1e-7) and got.abs().sum() > 0
    padded = dataclasses.replace(batch, targets=torch.full_like(batch.targets, -100))  # nothing to score
    assert imm(model, padded, output).losses["imm"].item() == 0.0
    with pytest.raises(InfolmError, match="one_sample=released needs restricted_order 2"):
        IMMConfig(one_sample="released", restricted_order=3)
    with pytest.raises(InfolmError, match="objective.imm.one_sample must be one of eq18, released"):
        IMMConfig(one_sample="noising")


def test_carried_state_feeds_the_last_i_plus_1_tokens_from_the_row_state() -> None:
    """realization=carried-state (the released code): the sample for the position at offset i of row b
    runs the last i+1 tokens of a window ending at a drawn occurrence of its short context, from row
    b's carried state, in eval mode; Eq. 15 then averages the k samples per position. At i = 0 every
    draw is the position itself, so the induced model there is the primary prediction (eval mode)."""
    from infolm.models.base import select_state

    stream = make_stream(seed=7)
    torch.manual_seed(31)
    model = TinyLSTM().double()
    imm = make_imm(stream, model, realization="carried-state", k=4, j=1, sample_chunk=4)
    batches = windows(stream, batch_size=3, bptt=5)
    with torch.no_grad():
        state = model(batches[0].inputs).state  # a carried state, as the trainer passes it
    batch = dataclasses.replace(batches[1], state=state)
    output = model(batch.inputs, state)
    torch.manual_seed(5)
    loss = imm(model, batch, output).losses["imm"]

    torch.manual_seed(5)
    ids = imm.index.lookup(batch.inputs.unsqueeze(-1)).reshape(-1)  # (B*T,), row-major like the selection
    occurrences = imm.index.sample(ids, 4)  # the same draws
    model.eval()
    terms = []
    for flat in range(batch.inputs.numel()):
        row, offset = divmod(flat, batch.inputs.size(1))
        samples = []
        for j in range(4):
            end = int(occurrences[j, flat])
            tokens = stream[max(end - offset, 0) : end + 1].unsqueeze(0)
            logits = model(tokens, select_state(state, torch.tensor([row]))).logits[0, -1]
            samples.append(torch.softmax(logits, -1))
        induced = torch.stack(samples).mean(0)
        target = imm.restricted.next_token_distribution(batch.inputs[row, offset].view(1, 1))[0].double()
        terms.append(-(target * induced.log()).sum())
        if offset == 0:  # every draw is the position itself
            primary = torch.softmax(
                model(batch.inputs[row : row + 1, :1], select_state(state, torch.tensor([row]))).logits[0, -1], -1
            )
            assert torch.allclose(induced, primary, atol=1e-12)
    model.train()
    assert math.isclose(loss.item(), torch.stack(terms).mean().item(), rel_tol=1e-9)


def test_imm_gradient_is_clipped_before_lambda_scales_it(tmp_path: Any) -> None:
    """Alg. 1 line 9 with App. D.2: the step adds λ·clip(∇IMM, c) to the clipped main gradient. With
    both clips acting, the steps at λ and 2λ (same batch, samples and dropout) differ by λ·c in norm and
    the main part left over has norm c; clipping λ∇IMM instead would make the two steps equal."""
    from infolm.build import build_trainer
    from infolm.config import load_config

    clip, lam = 1e-4, 0.3  # far below both raw gradient norms: both clips act

    logged: list[float] = []

    def gradient(weight: float) -> Tensor:
        imm = f"{{weight: {weight}, k: 2, j: 1, positions_per_batch: 4, context_window: 5, clip: {clip}}}"
        config = load_config("configs/tiny.yaml", [f"run.dir={tmp_path}", f"train.clip={clip}", f"objective.imm={imm}"])
        trainer, _ = build_trainer(config)
        torch.manual_seed(7)  # the same dropout masks and IMM samples at both weights
        logged.append(trainer.train_step(trainer.batches.next_batch())["grad_norm_imm"])  # ‖λ∇IMM‖, before its clip
        return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]).double()

    once, twice = gradient(lam), gradient(2 * lam)
    imm_part = twice - once  # λ·clip(∇IMM, c)
    assert float(imm_part.norm()) == pytest.approx(lam * clip, rel=1e-4)
    assert float((once - imm_part).norm()) == pytest.approx(clip, rel=1e-4)  # clip(∇MLE, c)
    assert logged[1] == pytest.approx(2 * logged[0], rel=1e-5) and logged[0] > lam * clip  # the clip acted


def test_composite_scales_a_terms_clip_by_its_weight() -> None:
    stream = make_stream()
    model = TinyLSTM()
    imm = make_imm(stream, model, weight=0.5, realization="replay", k=2, j=1, clip=0.7)
    batch = windows(stream)[0]
    terms = Composite({"mle": TinyMLE(), "imm": imm})(model, batch, model(batch.inputs))
    assert terms.clip_groups == {"imm": pytest.approx(0.35)}  # clip(0.5·∇, 0.35) = 0.5·clip(∇, 0.7)
