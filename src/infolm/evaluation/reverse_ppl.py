"""Reverse perplexity (Zhao et al. 2018; Cao & Xu Sec. 5.1): how well text *generated* by a model
teaches a fresh language model about real text.

Generate ``num_tokens`` tokens by ancestral sampling from the model, train a new LM on them from
scratch (a regular LM used for evaluation only), and report its perplexity on the real validation
and test streams. Low reverse perplexity means the generations cover the real distribution (diverse
and faithful); the paper generates 6M tokens and trains an RNN-LM on them.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from infolm.data.batching import StreamBatcher
from infolm.errors import InfolmError
from infolm.evaluation.generation import sample
from infolm.evaluation.perplexity import stream_nll
from infolm.models.base import MODELS, LanguageModel, detach_state


def _default_lm() -> dict[str, Any]:
    return {"name": "lstm", "emb": 200, "hidden": 200, "layers": 2, "dropout": 0.2}


@dataclasses.dataclass
class ReversePPLConfig:
    num_tokens: int = 200_000  # tokens generated from the model; paper 6M
    sample_streams: int = 64  # parallel sampling streams (each starts after <eos>)
    temperature: float = 1.0  # sampling temperature (1: ancestral sampling)
    lm: dict[str, Any] = dataclasses.field(default_factory=_default_lm)  # the fresh LM: name + model settings
    heldout_fraction: float = 0.05  # tail of the generated text held out to pick the best epoch
    epochs: int = 4  # passes of the fresh LM over the generated text
    batch_size: int = 20  # training streams of the fresh LM
    bptt: int = 35  # unrolled steps of the fresh LM
    lr: float = 2e-3  # Adam learning rate of the fresh LM
    clip: float = 0.25  # gradient-norm clip of the fresh LM
    eval_batch_size: int = 10  # evaluation streams
    seed: int = 0  # sampling and fresh-LM initialization

    def __post_init__(self) -> None:
        if self.num_tokens < 100:
            raise InfolmError(f"reverse perplexity needs at least 100 generated tokens, got {self.num_tokens}")
        if not 0.0 < self.heldout_fraction < 0.5:
            raise InfolmError(f"heldout_fraction must be in (0, 0.5), got {self.heldout_fraction}")
        for key in ("sample_streams", "epochs", "batch_size", "bptt", "eval_batch_size"):
            if getattr(self, key) < 1:
                raise InfolmError(f"reverse perplexity {key} must be positive, got {getattr(self, key)}")
        if self.temperature <= 0:
            raise InfolmError(f"sampling temperature must be positive, got {self.temperature}")
        if "name" not in self.lm:
            raise InfolmError("reverse perplexity lm settings need a model name, e.g. lm.name=lstm")


def generate_stream(
    model: LanguageModel,
    num_tokens: int,
    eos_id: int,
    streams: int = 64,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> Tensor:
    """``num_tokens`` ids sampled from ``model`` in ``streams`` parallel streams, joined by ``<eos>``. (N,)."""
    streams = max(1, min(streams, num_tokens))
    per_stream = math.ceil(num_tokens / streams)
    prompt = torch.full((streams, 1), eos_id, dtype=torch.long, device=device)  # every stream starts a line
    tokens = sample(model, prompt, per_stream, temperature=temperature, generator=generator)  # (S, L)
    joined = torch.cat([tokens, prompt], dim=1).reshape(-1)  # rows are separate texts: end each with <eos>
    return joined[:num_tokens].cpu()


def train_fresh_lm(
    stream: Tensor,
    vocab_size: int,
    eos_id: int,
    config: ReversePPLConfig,
    make_lm: Callable[[int], LanguageModel] | None = None,
    device: torch.device | str = "cpu",
) -> LanguageModel:
    """Train a new LM on ``stream`` (its last ``heldout_fraction`` picks the best epoch); returns the best."""
    heldout = max(2 * config.eval_batch_size, int(stream.numel() * config.heldout_fraction))
    train, valid = stream[:-heldout], stream[-heldout:]
    if train.numel() < 2 * config.batch_size:
        raise InfolmError(f"{stream.numel()} generated tokens are too few to train the reverse LM")
    torch.manual_seed(config.seed)
    if make_lm is None:
        settings = {k: v for k, v in config.lm.items() if k != "name"}
        lm = MODELS.build(config.lm["name"], settings, vocab_size=vocab_size, where="reverse_ppl.lm")
    else:
        lm = make_lm(vocab_size)
    lm = lm.to(device)
    optimizer = torch.optim.Adam(lm.parameters(), lr=config.lr)
    batcher = StreamBatcher(train, min(config.batch_size, max(1, train.numel() // 4)), config.bptt, seed=config.seed)
    best_nll, best_state = math.inf, copy.deepcopy(lm.state_dict())
    for _ in range(config.epochs):
        lm.train()
        state = None
        while (window := batcher.next_window()) is not None:
            inputs, targets = window.inputs.to(device), window.targets.to(device)
            if state is None:
                state = lm.init_state(inputs.size(0), device)
            output = lm(inputs, state)
            state = detach_state(output.state)
            loss = F.cross_entropy(output.logits.reshape(-1, output.logits.size(-1)).float(), targets.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.clip > 0:
                torch.nn.utils.clip_grad_norm_(lm.parameters(), config.clip)
            optimizer.step()
        nll, count = stream_nll(lm, valid, eos_id, config.eval_batch_size, config.bptt, device)
        if nll / count < best_nll:
            best_nll, best_state = nll / count, copy.deepcopy(lm.state_dict())
    lm.load_state_dict(best_state)
    return lm.eval()


def reverse_perplexity(
    model: LanguageModel,
    corpus: Any,
    config: ReversePPLConfig | None = None,
    make_lm: Callable[[int], LanguageModel] | None = None,
    device: torch.device | str = "cpu",
) -> dict[str, float]:
    """Generate from ``model``, train a fresh LM on it, evaluate on ``corpus``'s real valid and test streams.

    Returns ``valid_ppl``, ``test_ppl`` (the reverse perplexities), ``heldout_ppl`` (on generated text)
    and ``generated_tokens``. ``make_lm(vocab_size)`` overrides the fresh LM of ``config.lm``.
    """
    config = config or ReversePPLConfig()
    vocab_size, eos_id = len(corpus.vocab), corpus.vocab.eos_id
    generator = torch.Generator(device=device).manual_seed(config.seed)
    generated = generate_stream(
        model, config.num_tokens, eos_id, config.sample_streams, config.temperature, generator, device
    )
    lm = train_fresh_lm(generated, vocab_size, eos_id, config, make_lm, device)
    heldout = max(2 * config.eval_batch_size, int(generated.numel() * config.heldout_fraction))
    out: dict[str, float] = {"generated_tokens": float(generated.numel())}
    for name, stream in (
        ("heldout", generated[-heldout:]),
        ("valid", corpus.stream("valid")),
        ("test", corpus.stream("test")),
    ):
        nll, count = stream_nll(lm, stream, eos_id, config.eval_batch_size, config.bptt, device)
        out[f"{name}_ppl"] = math.exp(min(nll / count, 700.0))
    return out
