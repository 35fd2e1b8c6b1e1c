"""Reverse perplexity: text from a known Markov chain teaches a fresh LM that chain's perplexity."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from infolm.data.corpus import Corpus
from infolm.data.vocab import Vocab
from infolm.errors import InfolmError
from infolm.evaluation.reverse_ppl import ReversePPLConfig, generate_stream, reverse_perplexity
from infolm.models.base import MODELS, LanguageModel, LMOutput, State


class BigramLM(LanguageModel):
    """A fixed Markov chain as a language model: p(x_t | x_<t) = T[x_{t-1}]."""

    def __init__(self, transitions: Tensor) -> None:
        super().__init__()
        self.log_t = torch.nn.Parameter(transitions.log(), requires_grad=False)
        self.vocab_size = transitions.size(0)

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> State:
        return torch.zeros(batch_size, 1, device=device)  # a dummy recurrent state: the chain needs none

    def forward(self, tokens: Tensor, state: State = None) -> LMOutput:
        return LMOutput(logits=self.log_t[tokens], hiddens=[], state=torch.zeros(tokens.size(0), 1))


def chain(vocab_size: int = 6, seed: int = 0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2.0 * torch.randn(vocab_size, vocab_size, generator=g), dim=-1)


def entropy_rate(transitions: Tensor) -> float:
    evals, evecs = torch.linalg.eig(transitions.T.double())
    pi = evecs[:, evals.real.argmax()].real
    pi = pi / pi.sum()
    return float(-(pi[:, None] * transitions.double() * transitions.double().log()).sum())


def corpus_from_chain(transitions: Tensor, tokens: int, seed: int) -> Corpus:
    """Real valid/test text drawn from the chain itself (the vocabulary's id 0 is <eos>)."""
    model = BigramLM(transitions)
    g = torch.Generator().manual_seed(seed)
    valid = generate_stream(model, tokens, 0, streams=4, generator=g)
    test = generate_stream(model, tokens, 0, streams=4, generator=g)
    vocab = Vocab(["<eos>"] + [f"w{i}" for i in range(1, transitions.size(0))])
    corpus = Corpus.from_texts("chain", "word", {"train": "w1\n", "valid": "w1\n", "test": "w1\n"}, vocab=vocab)
    corpus._streams["valid"], corpus._streams["test"] = valid, test
    return corpus


def test_generated_stream_follows_the_model() -> None:
    transitions = chain()
    g = torch.Generator().manual_seed(1)
    stream = generate_stream(BigramLM(transitions), 60_000, 0, streams=8, generator=g)
    assert stream.shape == (60_000,)
    counts = torch.zeros(6, 6)
    counts.index_put_((stream[:-1], stream[1:]), torch.ones(59_999), accumulate=True)
    empirical = counts / counts.sum(1, keepdim=True)
    torch.testing.assert_close(empirical, transitions, atol=0.03, rtol=0)


def test_reverse_perplexity_of_a_chain_on_its_own_text_is_its_perplexity() -> None:
    transitions = chain()
    corpus = corpus_from_chain(transitions, 4000, seed=2)
    config = ReversePPLConfig(num_tokens=20_000, epochs=2, batch_size=16, bptt=20, lr=1e-2, sample_streams=16)

    def make_lm(vocab_size: int) -> LanguageModel:
        return MODELS.build("lstm", {"emb": 16, "hidden": 16, "layers": 1}, vocab_size=vocab_size)

    result = reverse_perplexity(BigramLM(transitions), corpus, config, make_lm=make_lm)
    truth = math.exp(entropy_rate(transitions))
    assert result["generated_tokens"] == 20_000
    for key in ("valid_ppl", "test_ppl", "heldout_ppl"):
        assert abs(result[key] - truth) / truth < 0.05, (key, result[key], truth)
    # a uniform generator teaches nothing: reverse perplexity is the vocabulary size
    uniform = reverse_perplexity(BigramLM(torch.full((6, 6), 1 / 6)), corpus, config, make_lm=make_lm)
    assert abs(uniform["test_ppl"] - 6.0) < 0.3 and uniform["test_ppl"] > result["test_ppl"]


def test_bad_settings_are_user_errors() -> None:
    with pytest.raises(InfolmError):
        ReversePPLConfig(num_tokens=10)
    with pytest.raises(InfolmError):
        ReversePPLConfig(lm={"emb": 3})
