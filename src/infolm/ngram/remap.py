"""An n-gram model read onto another vocabulary (a trained run's), word by word.

An ARPA file has its own vocabulary; a run has another (the same words in another order, or other
words). Every run word is mapped to the n-gram's id of the same word; a run word the n-gram lacks is
read as the n-gram's ``<unk>`` (as KenLM and SRILM score an unknown word). Histories are mapped the
same way, so ``P(y | h)`` is the n-gram's probability of ``map(y)`` after ``map(h)``. Where the two
vocabularies differ, the mapped probabilities over the run's vocabulary need not sum to one (several
run words share ``<unk>``; n-gram words the run lacks keep their mass); where they hold the same
words they are exactly the n-gram's distribution.

A file with sentence markers ``<s>`` and ``</s>`` and no ``<eos>`` (KenLM, SRILM) is read in its own
convention: the run's ``<eos>`` is ``</s>`` where it is predicted and ``<s>`` where it is history, and
the text is scored sentence by sentence (a segment is cut after each ``<eos>``), as those tools score it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from infolm.data.vocab import EOS, UNK, Vocab
from infolm.errors import InfolmError
from infolm.ngram.arpa import read_arpa_own_vocab
from infolm.ngram.model import NgramModel

_MARKERS = {EOS, UNK, "<s>", "</s>"}  # words every vocabulary may hold: no evidence of a shared one


class RemappedNgram:
    """``model`` (over ``own``) queried with token ids of ``target``; the history of a segment is ``<eos>``."""

    def __init__(self, model: NgramModel, own: Vocab, target: Vocab, source: str = "the n-gram") -> None:
        ids = np.array([own.stoi.get(word, -1) for word in target.itos], dtype=np.int64)
        history_ids = ids.copy()
        eos = target.stoi.get(EOS)
        self.sentence_eos: int | None = None  # the run's <eos> where the file marks sentences with <s> </s>
        if eos is not None and EOS not in own and "</s>" in own and "<s>" in own:
            ids[eos], history_ids[eos] = own.stoi["</s>"], own.stoi["<s>"]
            self.sentence_eos = eos
        shared = [word for word, i in zip(target.itos, ids) if i >= 0 and word not in _MARKERS]
        if not shared:
            raise InfolmError(
                f"{source} and the run share no word (n-gram: {_examples(own)}; run: {_examples(target)}); "
                "was it built for another corpus or tokenization?"
            )
        self.missing = [word for word, i in zip(target.itos, ids) if i < 0]  # run words read as <unk>
        if self.missing:
            if UNK not in own:
                raise InfolmError(
                    f"{source} has no {UNK} to read the {len(self.missing)} run words it lacks "
                    f"(e.g. {self.missing[0]!r})"
                )
            ids[ids < 0] = own.stoi[UNK]
            history_ids[history_ids < 0] = own.stoi[UNK]
        self.ids = ids  # (V_run,) the n-gram id of each run token, predicted
        self.history_ids = history_ids  # ... and in a history (differs only for <eos> read as <s>)
        self.vocab_size = len(target)
        history = int(history_ids[eos]) if eos is not None else model.history_id  # what precedes a segment
        self.model = NgramModel(model.tables, model.vocab_size, history_id=history, method=model.method)

    @property
    def order(self) -> int:
        return self.model.order

    def next_token_distribution(self, contexts: Tensor | np.ndarray) -> Tensor:
        """P(run token | context) for a batch of run-id contexts: (N, L) -> (N, V_run) float32."""
        ctx = contexts.detach().cpu().numpy() if isinstance(contexts, Tensor) else np.asarray(contexts)
        dist = self.model.next_token_distribution(self.history_ids[ctx.astype(np.int64)])  # (N, V_ngram)
        return dist[:, torch.from_numpy(self.ids)]

    def segment_log_probs(self, tokens: Tensor | np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Natural-log P(token | history) for every token of run ids ``tokens`` (N,), cut into segments
        ``tokens[start:start+length]``: a token's history is ``<eos>`` and the earlier tokens of its segment
        (the n-gram keeps the last n-1). Returns (N,) float64."""
        flat = tokens.cpu().numpy() if isinstance(tokens, Tensor) else np.asarray(tokens)
        mapped = self.ids[flat.astype(np.int64)]
        out = np.full(len(mapped), np.nan)
        for start, length in zip(np.asarray(starts).tolist(), np.asarray(lengths).tolist()):
            for first, stop in self._sentences(flat, start, start + length):
                out[first:stop] = self.model.token_log_probs(mapped[first:stop])
        return out

    def _sentences(self, flat: np.ndarray, start: int, stop: int) -> list[tuple[int, int]]:
        """``[start, stop)`` as one piece, or cut after each ``<eos>`` for a file that scores sentences."""
        if self.sentence_eos is None:
            return [(start, stop)]
        ends = (np.flatnonzero(flat[start:stop] == self.sentence_eos) + start + 1).tolist()
        cuts = [start, *[e for e in ends if e < stop], stop]
        return list(zip(cuts[:-1], cuts[1:]))


def read_ngram_onto(path: str | Path, vocab: Vocab) -> RemappedNgram:
    """An ARPA file (``infolm ngram build``, KenLM, SRILM) read onto ``vocab`` by word."""
    model, own = read_arpa_own_vocab(path)
    return RemappedNgram(model, own, vocab, source=f"the n-gram {path}")


def _examples(vocab: Vocab, count: int = 3) -> str:
    words = [word for word in vocab.itos if word not in _MARKERS][:count]
    return ", ".join(repr(word) for word in words) + (", ..." if len(vocab) > count else "")
