"""``stream-lm``: a causal LM over one running token stream (Mikolov / Zaremba / AWD-LSTM style).

Training cuts the training split into ``data.batch_size`` contiguous rows walked in ``data.bptt``
windows (AWD-LSTM's variable length with ``data.variable_bptt``), the recurrent state carried from
window to window and reset at each epoch. Evaluation walks a whole split the same way (every token a
target once, the first predicted from ``<eos>``) and selects on the per-token NLL.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import Tensor

from infolm.config import Config, DataConfig
from infolm.data.batch import Batch
from infolm.data.batching import StreamBatcher
from infolm.data.corpus import Corpus
from infolm.errors import InfolmError
from infolm.evaluation.generation import SamplingSettings, sample
from infolm.evaluation.perplexity import TokenScores, stream_nll, stream_token_scores
from infolm.models.base import LanguageModel
from infolm.tasks.base import Metrics, Task, numpy_rng_state, perplexity, register_task, set_numpy_rng_state


@dataclasses.dataclass
class StreamLMConfig:
    """Stream LM settings live in ``data`` (batch_size, eval_batch_size, bptt, variable_bptt)."""


class StreamBatches:
    """A rank's windows of the batchified training stream: rows ``rank::world`` of every window."""

    def __init__(self, stream: Tensor, data: DataConfig, seed: int, rank: int, world: int) -> None:
        self.batcher = StreamBatcher(stream, data.batch_size, data.bptt, data.variable_bptt, seed)
        self.rows = torch.arange(rank, data.batch_size, world) if world > 1 else None

    def next_batch(self) -> Batch | None:
        window = self.batcher.next_window()
        if window is None:
            return None
        batch = Batch(window.inputs, window.targets, lr_scale=window.lr_scale)
        return batch if self.rows is None else batch.rows(self.rows)

    def __len__(self) -> int:
        return len(self.batcher)

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.batcher.position, "rng": numpy_rng_state(self.batcher.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batcher.position = int(state["position"])
        set_numpy_rng_state(self.batcher.rng, state["rng"])


@register_task("stream-lm", config=StreamLMConfig)
class StreamLM(Task):
    """Causal LM over a token stream; the recurrent state is carried across windows."""

    carries_state = True
    provides = frozenset({"next-token", "stream", "carried-state"})
    serves = frozenset({"causal-lm"})
    generates = True
    scores_tokens = True

    def __init__(self, config: StreamLMConfig) -> None:
        self.config = config
        self.corpus: Corpus | None = None
        self.data = DataConfig()
        self.seed = 0

    @classmethod
    def check_train_data(cls, config: Config, data: Any) -> None:
        check_train_rows(data, config.data)

    @classmethod
    def input_length(cls, config: Any, data: DataConfig) -> int | None:
        return None if data.variable_bptt else data.bptt  # AWD-LSTM's lengths are N(bptt, 5): unbounded

    @classmethod
    def length_setting(cls) -> str:
        return "data.bptt"

    def setup(self, config: Config, corpus: Corpus) -> None:
        self.corpus, self.data, self.seed = corpus, config.data, config.run.seed

    def _corpus(self) -> Corpus:
        if self.corpus is None:
            raise RuntimeError("the task's setup(config, corpus) must run first")
        return self.corpus

    def train_batches(self, rank: int = 0, world: int = 1) -> StreamBatches:
        if self.data.batch_size % world:
            raise InfolmError(f"data.batch_size={self.data.batch_size} must be divisible by the {world} processes")
        return StreamBatches(self._corpus().stream("train"), self.data, self.seed, rank, world)

    def evaluate(self, model: LanguageModel, split: str, device: torch.device | str = "cpu") -> Metrics:
        corpus = self._corpus()
        nll_sum, tokens = stream_nll(
            model, corpus.stream(split), corpus.vocab.eos_id, self.data.eval_batch_size, self.data.bptt, device
        )
        return stream_metrics(nll_sum, tokens, corpus.level)

    def token_scores(self, model: LanguageModel, split: str, device: torch.device | str = "cpu") -> TokenScores:
        """ln p(token | history) of every token of the split, walked as :meth:`evaluate` walks it; one
        segment, the running text."""
        corpus = self._corpus()
        return stream_token_scores(
            model, corpus.stream(split), corpus.vocab.eos_id, self.data.eval_batch_size, self.data.bptt, device
        )

    def generate(
        self, model: LanguageModel, prompt: list[int], settings: SamplingSettings, generator: torch.Generator
    ) -> list[list[int]]:
        """One continuation of ``settings.max_tokens`` tokens after ``<eos>`` + prompt."""
        ids = [self._corpus().vocab.eos_id, *prompt]
        out = sample(
            model,
            torch.tensor([ids]),
            settings.max_tokens,
            settings.temperature,
            settings.top_k,
            settings.top_p,
            generator,
        )
        return [out[0].tolist()]


def check_train_rows(corpus: Corpus, data: DataConfig) -> None:
    """Training cuts the train stream into ``data.batch_size`` rows of at least 2 tokens (an input and
    its target); a stream too short for that is an error naming its source and the batch shape that fits."""
    tokens = corpus.stream("train").numel()
    if tokens // data.batch_size >= 2:
        return
    where = corpus.sources.get("train", f"{corpus.name} train")
    fits = f"data.batch_size={tokens // 2} or less fits" if tokens >= 2 else "no data.batch_size fits"
    whole = tokens // (data.bptt + 1)
    windows = (
        f"whole data.bptt={data.bptt} windows need data.batch_size={whole} or less"
        if whole
        else f"a whole data.bptt={data.bptt} window needs {data.bptt + 1} tokens"
    )
    raise InfolmError(
        f"{where} has {tokens} tokens, too few for data.batch_size={data.batch_size} rows of 2 tokens or more; "
        f"{fits} ({windows}), or use a longer text"
    )


def stream_metrics(nll_sum: float, tokens: int, level: str) -> Metrics:
    """Per-token NLL (the selection metric), perplexity, bits per character on character data."""
    nll = nll_sum / max(tokens, 1)
    values = {"nll": nll, "ppl": perplexity(nll), "tokens": tokens}
    log_names = {"nll": "loss", "ppl": "ppl"}
    if level == "char":
        values["bpc"] = nll / math.log(2)
        log_names["bpc"] = "bpc"
    return Metrics(values, selection="nll", log_names=log_names)
