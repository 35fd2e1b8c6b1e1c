"""Linear warmup then linear decay to 0 (BERT, Devlin et al. Sec. A.2; InfoWord, Kong et al. App. B).

The rate of the update made after ``step`` completed updates of a run of ``total`` updates is
``peak * step / warmup`` while ``step < warmup``, then ``peak * (total - step) / (total - warmup)``:
the peak is reached at ``step == warmup`` and 0 at ``step == total``. This is the continuous form
(``transformers.get_linear_schedule_with_warmup``); BERT's TensorFlow code computes the decay from
step 0 (``peak * (1 - step / total)``) and overrides it during warmup, which jumps at the end of
warmup. As in both, the first update of a run with warmup has rate 0.
"""

from __future__ import annotations

import math


def warmup_steps_of(total: int, warmup_steps: int, warmup_fraction: float) -> int:
    """The warmup length in updates: ``warmup_steps``, or ``warmup_fraction`` of ``total`` rounded up."""
    if warmup_steps:
        return min(warmup_steps, total)
    return min(math.ceil(warmup_fraction * total), total)


def warmup_linear_factor(step: int, total: int, warmup: int) -> float:
    """The factor of the peak rate for the update after ``step`` completed updates (0 past the end)."""
    if step < warmup:
        return step / warmup
    if step >= total:
        return 0.0
    return (total - step) / (total - warmup)
