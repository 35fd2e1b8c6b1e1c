"""The reverse copy task as an encoder-decoder (Melis thesis Sec. 2.3.3): the loss is on the target half only,
the decoder starts from the encoder's last state, encoder and decoder have their own weights, greedy copying
of a hand-built copier scores known values, and bad configs are refused with one line. (Resumption bit for bit,
disjoint ranks and deterministic evaluation: tests/test_task_contract.py.)"""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import Tensor, nn

from infolm.build import build_task
from infolm.compatibility import check_compatibility
from infolm.config import DataConfig, load_config
from infolm.data import load_corpus
from infolm.data.batching import IGNORE_INDEX
from infolm.errors import InfolmError
from infolm.models import MODELS, LMOutput
from infolm.objectives.mle import MLE, MLEConfig
from infolm.tasks.copy import read_pairs
from tests.conftest import run_cli

LENGTH = 5  # symbols per example in the copy_task_files fixture


@pytest.fixture
def copy_setup(copy_task_files):
    corpus = load_corpus(DataConfig(**copy_task_files))
    config = load_config(
        None, [f"data={json.dumps(copy_task_files)}", 'task={"name": "copy"}', "data.eval_batch_size=6"]
    )
    return build_task(config, corpus), corpus


def tiny_seq2seq(vocab_size: int, cell: str = "lstm", **overrides) -> nn.Module:
    settings = {"cell": cell, "layers": 2, "emb": 6, "hidden": 8, "rounds": 2, "rank": 3, **overrides}
    torch.manual_seed(0)
    return MODELS.build("melis-seq2seq", settings, vocab_size=vocab_size)


def test_rows_are_source_marker_shifted_target_with_the_loss_on_the_target_only(copy_setup):
    task, corpus = copy_setup
    pairs = task.pairs["train"]
    assert torch.equal(pairs.target, pairs.source.flip(1))  # the files hold the reversed source
    batch = task.batch("train", torch.arange(4))
    marker = corpus.vocab.stoi["<rev>"]
    assert batch.inputs.shape == (4, 2 * LENGTH)
    assert torch.equal(batch.inputs[:, :LENGTH], pairs.source[:4])
    assert (batch.inputs[:, LENGTH] == marker).all()
    assert torch.equal(batch.inputs[:, LENGTH + 1 :], pairs.target[:4, :-1])  # teacher forcing
    assert (batch.targets[:, :LENGTH] == IGNORE_INDEX).all()
    assert torch.equal(batch.targets[:, LENGTH:], pairs.target[:4])


@pytest.mark.parametrize("cell", ["lstm", "mogrifier"])
def test_changing_a_source_prediction_changes_nothing_and_a_target_prediction_does(copy_setup, cell):
    task, corpus = copy_setup
    model = tiny_seq2seq(len(corpus.vocab), cell)
    batch = task.batch("train", torch.arange(6))
    output = model(batch.inputs)
    assert (output.logits[:, :LENGTH] == 0).all()  # the encoder predicts nothing
    mle = MLE(MLEConfig())
    loss = mle(model, batch, output).losses["mle"]
    for position, changes in ((0, False), (LENGTH - 1, False), (LENGTH, True), (2 * LENGTH - 1, True)):
        logits = output.logits.detach().clone()
        logits[:, position] += torch.randn(logits.shape[0], logits.shape[2])
        changed = mle(model, batch, LMOutput(logits=logits, hiddens=[])).losses["mle"]
        assert torch.equal(changed, loss.detach()) != changes, position
    assert mle(model, batch, output).tokens == 6 * LENGTH


def test_the_decoders_first_state_is_the_encoders_last(copy_setup):
    """Every layer's (h, c) leaving the encoder after the last source symbol is exactly the state the decoder's
    cell of that layer receives at its first step."""
    task, corpus = copy_setup
    model = tiny_seq2seq(len(corpus.vocab), "mogrifier")
    batch = task.batch("valid", torch.arange(3))
    leaving, entering = {}, {}
    hooks = []
    for layer in range(2):
        hooks.append(
            model.encoder_cells[layer].register_forward_hook(
                lambda module, args, out, layer=layer: leaving.__setitem__(layer, out[1])
            )
        )
        hooks.append(
            model.decoder_cells[layer].register_forward_pre_hook(
                lambda module, args, layer=layer: entering.__setitem__(layer, args[1])
            )
        )
    model(batch.inputs)
    for hook in hooks:
        hook.remove()
    for layer in range(2):
        assert all(torch.equal(a, b) for a, b in zip(leaving[layer], entering[layer], strict=True))
        assert leaving[layer][0].abs().sum() > 0  # a real state, not the zeros both would start from

    # The same through the public pieces: the full pass equals decode(inputs, encode(source)), and the source
    # reaches the decoder only through that state.
    source, decoder_inputs = batch.inputs[:, :LENGTH], batch.inputs[:, LENGTH:]
    assert torch.equal(
        model(batch.inputs).logits[:, LENGTH:], model.decode(decoder_inputs, model.encode(source)).logits
    )
    zeros = model.decode(decoder_inputs, model.zero_state(3)).logits
    assert not torch.allclose(zeros, model(batch.inputs).logits[:, LENGTH:])


def test_encoder_and_decoder_have_their_own_weights(copy_setup):
    _, corpus = copy_setup
    model = tiny_seq2seq(len(corpus.vocab))
    encoder = {p.data_ptr() for p in [*model.encoder_cells.parameters(), model.encoder_embedding.weight]}
    decoder = {p.data_ptr() for p in [*model.decoder_cells.parameters(), model.decoder_embedding.weight]}
    assert not encoder & decoder
    assert model.output.weight is model.decoder_embedding.weight  # tie_weights: the decoder's softmax
    shared = tiny_seq2seq(len(corpus.vocab), share_embedding=True)
    assert shared.decoder_embedding is shared.encoder_embedding
    emb = 6 * len(corpus.vocab)
    assert model.num_parameters() - shared.num_parameters() == emb


class HandBuiltCopier(nn.Module):
    """A perfect reverse copier by construction: the state is the symbols still to emit; each decoder step
    emits the next one with logit ``margin`` (all others 0). With ``wrong_at`` it emits symbol 0 there instead."""

    def __init__(self, vocab_size: int, margin: float = 40.0, wrong_at: int | None = None) -> None:
        super().__init__()
        self.vocab_size, self.margin, self.wrong_at = vocab_size, margin, wrong_at

    def encode(self, source: Tensor) -> tuple[Tensor, int]:
        return source.flip(1), 0

    def decode(self, inputs: Tensor, state: tuple[Tensor, int]) -> LMOutput:
        remaining, done = state
        steps = inputs.size(1)
        emit = remaining[:, done : done + steps].clone()
        if self.wrong_at is not None and done <= self.wrong_at < done + steps:
            emit[:, self.wrong_at - done] = 0
        logits = torch.nn.functional.one_hot(emit, self.vocab_size).float() * self.margin
        return LMOutput(logits=logits, hiddens=[], state=(remaining, done + steps))

    def forward(self, tokens: Tensor, state=None) -> LMOutput:
        half = tokens.size(1) // 2
        out = self.decode(tokens[:, half:], self.encode(tokens[:, :half]))
        out.logits = torch.cat([out.logits.new_zeros(tokens.size(0), half, self.vocab_size), out.logits], 1)
        return out


def test_greedy_copy_of_a_hand_built_perfect_copier_is_exact(copy_setup):
    task, corpus = copy_setup
    vocab_size = len(corpus.vocab)
    assert torch.equal(
        task.greedy_copy(HandBuiltCopier(vocab_size), task.pairs["test"].source), task.pairs["test"].target
    )
    metrics = task.evaluate(HandBuiltCopier(vocab_size), "test")
    assert metrics.values["sequence_accuracy"] == 1.0 and metrics.values["token_accuracy"] == 1.0
    # nll of a right symbol at margin m: ln(1 + (V - 1) e^-m)
    assert metrics.values["nll"] == pytest.approx(math.log1p((vocab_size - 1) * math.exp(-40.0)), rel=1e-3)
    assert metrics.selection == "nll" and not metrics.higher_is_better

    # One symbol wrong in every example (a symbol id that no target holds): token accuracy (S - 1) / S, no
    # example right, and that position costs the margin (plus the same tiny term) in the cross-entropy.
    assert not (task.pairs["test"].target == 0).any()
    flawed = task.evaluate(HandBuiltCopier(vocab_size, margin=10.0, wrong_at=2), "test")
    assert flawed.values["token_accuracy"] == pytest.approx((LENGTH - 1) / LENGTH)
    assert flawed.values["sequence_accuracy"] == 0.0
    tiny = math.log1p((vocab_size - 1) * math.exp(-10.0))
    assert flawed.values["nll"] == pytest.approx((10.0 + tiny * LENGTH) / LENGTH, rel=1e-5)


def test_greedy_copy_of_a_real_model_is_a_fixed_point_of_teacher_forcing(copy_setup):
    """Fed its own greedy output as decoder inputs, the teacher-forced pass predicts that same output: the
    greedy loop carries the decoder's state and feeds back the argmax."""
    task, corpus = copy_setup
    # Wide embeddings, so that the argmax depends on the state and the fed-back symbol (at init_range 0.1 this
    # untrained model emits one symbol throughout, which no greedy loop can get wrong).
    model = tiny_seq2seq(len(corpus.vocab), "mogrifier", init_range=1.0).eval()
    source = task.pairs["valid"].source
    copied = task.greedy_copy(model, source)
    assert len(set(copied[:, 1:].flatten().tolist())) > 1
    marker = torch.full((source.size(0), 1), corpus.vocab.stoi["<rev>"])
    with torch.no_grad():
        logits = model(torch.cat([source, marker, copied[:, :-1]], 1)).logits[:, LENGTH:]
    assert torch.equal(logits.argmax(-1), copied)


def test_bad_configs_are_refused_with_one_line(small_corpus, tmp_path):
    ragged = tmp_path / "ragged.txt"
    ragged.write_text("t1 t2 <rev> t2 t1\nt1 t2 t3 <rev> t3 t2 t1\n")
    paths = [f"data.{split}={ragged}" for split in ("train", "valid", "test")]
    result = run_cli("train", "configs/copy/reverse-20-lstm.yaml", *paths, f"run.dir={tmp_path / 'b'}")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"infolm: error: task copy: the lines of {ragged} differ in length (5 to 7 tokens); write one length per file"
    ]
    assert not (tmp_path / "b").exists()

    for overrides, message in (
        (["model.name=melis"], "task copy serves seq2seq models, but model melis is a causal-lm model"),
        (["task.name=stream-lm"], "task stream-lm serves causal-lm models, but model melis-seq2seq is a seq2seq"),
    ):
        with pytest.raises(InfolmError, match=message):
            check_compatibility(load_config("configs/copy/reverse-20-lstm.yaml", overrides))
    with pytest.raises(
        InfolmError, match="task copy reads lines 'source <rev> target'; the ptb-small data has no <rev>"
    ):
        read_pairs(small_corpus, "train")
