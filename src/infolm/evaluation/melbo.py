"""MELBO (SentenceMIM Eqs. 15-16), reported apart from the likelihood bounds and with its caveat.

For a test set of N sentences, Eq. 16 bounds the NLL of a model whose prior is replaced, after
training, by the aggregated posterior of that same test set, p(z) = 1/N sum_j q(z|x_j) (Eq. 9 with
the test set as the target distribution):

    NLL_hat = -1/N sum_i 1/N_z sum_j ln p(x_i|z_ij) + ln N,    z_ij ~ q(z|x_i)
    PPL_hat = exp(N NLL_hat / sum_i T_i)

It is not a bound on the likelihood of new data under the trained model: the prior is built from
the sentences being scored, and for an encoder whose posteriors do not overlap NLL_hat falls
towards the reconstruction error plus ln N (ln 3,761 = 8.23 nats on the PTB test set). Compare
models through the IWAE-K bound with the model's own prior.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

import torch
from torch import Tensor

CAVEAT = (
    "MELBO's prior is the evaluated set's own aggregated posterior (Eqs. 15-16): it is not a bound "
    "on the likelihood of new data; compare models with the IWAE bound"
)


@dataclasses.dataclass
class MelboResult:
    nll: float  # NLL_hat per sentence (nats), Eq. 16
    ppl: float  # PPL_hat = exp(N NLL_hat / tokens)
    reconstruction: float  # -1/N sum_i mean_j ln p(x_i|z_ij): the first term of Eq. 16
    log_n: float  # ln N: the entropy bound of the empirical distribution, Eq. 16's second term
    sentences: int
    tokens: int  # tokens scored per sentence, summed (the decoder's targets)
    samples: int  # N_z draws per sentence
    caveat: str = CAVEAT
    nll_words: float | None = None  # the same with each sentence's <eos> term left out (the paper's Sec. 4.3)


def melbo_nll(mean_log_likelihood: Tensor) -> float:
    """Eq. 16: -mean_i (1/N_z sum_j ln p(x_i|z_ij)) + ln N from the per-sentence means (N,)."""
    n = mean_log_likelihood.numel()
    return -float(mean_log_likelihood.double().mean()) + math.log(n)


@torch.no_grad()
def evaluate_melbo(model: torch.nn.Module, batches: Iterable[tuple[Tensor, Tensor]], samples: int = 1) -> MelboResult:
    """MELBO over all ``(tokens, lengths)`` batches of a split (one target distribution T(x))."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    was_training = model.training
    model.eval()
    means, end_means, tokens = [], [], 0
    try:
        for batch_tokens, lengths in batches:
            z = model.posterior(batch_tokens, lengths).sample((samples,))  # type: ignore[operator]  # (N_z, B, D)
            whole, end = model.log_likelihood_terms(batch_tokens, lengths, z)  # type: ignore[operator]
            means.append(whole.mean(0))
            end_means.append(None if end is None else end.mean(0))
            tokens += int(lengths.sum())
    finally:
        model.train(was_training)
    per_sentence = torch.cat(means)
    nll = melbo_nll(per_sentence)
    words = None
    if all(e is not None for e in end_means):
        words = melbo_nll(per_sentence - torch.cat(end_means))  # type: ignore[arg-type]
    n = per_sentence.numel()
    return MelboResult(
        nll=nll,
        ppl=math.exp(min(n * nll / tokens, 700.0)),
        reconstruction=-float(per_sentence.double().mean()),
        log_n=math.log(n),
        sentences=n,
        tokens=tokens,
        samples=samples,
        nll_words=words,
    )
