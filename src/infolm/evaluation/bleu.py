"""BLEU-1 of reconstructions (SentenceMIM Tables 2-5, 7): unigram BLEU between sentences and their
reconstructions, computed by sacrebleu.

Tokenization: none. The sentences are already tokenized (PTB words); tokens are joined with single
spaces and sacrebleu splits them on whitespace again (``tokenize="none"``), so BLEU-1 sees exactly
the model's tokens. ``<eos>`` is removed from both sides before scoring (the paper's tables show
reconstructions with and references without it). Scores are fractions in [0, 1], as in the paper.

``corpus`` BLEU-1 (the default) pools clipped unigram matches and lengths over all sentences and
applies one brevity penalty (Papineni et al.); ``sentence`` averages per-sentence BLEU-1. The paper
used NLTK without saying which; both are exposed, and they coincide for equal-length pairs. The
authors' public test script averages NLTK's sentence BLEU-1 with ``<eos>`` kept on both sides:
``mode="sentence", keep_eos=True`` is that protocol.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from infolm.errors import InfolmError

DROPPED = frozenset({"<eos>", "<sos>"})  # markers, not words: never scored


@dataclasses.dataclass
class BleuScore:
    bleu: float  # BLEU-1 in [0, 1]: precision times brevity penalty
    precision: float  # clipped unigram precision in [0, 1] (corpus: pooled; sentence: mean)
    brevity_penalty: float  # exp(min(0, 1 - ref_len / hyp_len)) (corpus: pooled; sentence: mean)
    sentences: int  # pairs scored
    mode: str  # corpus | sentence


def _text(tokens: Sequence[str], keep_eos: bool = False) -> str:
    dropped = DROPPED - {"<eos>"} if keep_eos else DROPPED
    return " ".join(t for t in tokens if t not in dropped)


def bleu1(
    hypotheses: Sequence[Sequence[str]],
    references: Sequence[Sequence[str]],
    mode: str = "corpus",
    keep_eos: bool = False,
) -> BleuScore:
    """BLEU-1 of token lists ``hypotheses`` (reconstructions) against ``references`` (one per sentence);
    ``keep_eos``: ``<eos>`` is scored as a word where it appears."""
    if mode not in ("corpus", "sentence"):
        raise InfolmError(f"BLEU mode must be corpus or sentence, got {mode!r}")
    if len(hypotheses) != len(references):
        raise InfolmError(f"BLEU needs one reference per hypothesis, got {len(hypotheses)} and {len(references)}")
    if not hypotheses:
        raise InfolmError("BLEU of an empty set of sentences")
    try:
        from sacrebleu.metrics import BLEU
    except ImportError:
        raise InfolmError("BLEU needs sacrebleu: pip install 'infolm[latent]'") from None
    metric = BLEU(max_ngram_order=1, tokenize="none", effective_order=True)
    hyps = [_text(h, keep_eos) for h in hypotheses]
    refs = [_text(r, keep_eos) for r in references]
    if mode == "corpus":
        score = metric.corpus_score(hyps, [refs])
        return BleuScore(score.score / 100, score.precisions[0] / 100, score.bp, len(hyps), mode)
    scores = [metric.sentence_score(h, [r]) for h, r in zip(hyps, refs)]
    n = len(scores)
    return BleuScore(
        sum(s.score for s in scores) / 100 / n,
        sum(s.precisions[0] for s in scores) / 100 / n,
        sum(s.bp for s in scores) / n,
        n,
        mode,
    )
