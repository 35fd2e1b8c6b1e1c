"""KL annealing schedules for the sentence VAE ("+ kl" rows of SentenceMIM Tables 3-5, after Bowman
et al. 2015): the weight beta on the KL term of the ELBO as a function of the optimizer step.

``logistic``: beta(s) = 1 / (1 + exp(-k (s - x0))), k = 0.0025, x0 = 10,000 (the authors' public
code); beta is 0.5 at x0 and reaches 0.99 at x0 + ln(99) / k (11,838 steps) and 1 in float32 a
little later. ``linear``: beta(s) = min(1, s / steps), from 0 to 1 over 10,000 mini-batches (Sec. 4.2).
``none``: beta = 1 (the plain ELBO; the paper's PTB rows, where annealing over-fitted).
"""

from __future__ import annotations

import math

from infolm.errors import InfolmError

SCHEDULES = ("none", "logistic", "linear")


def kl_weight(step: int, schedule: str = "none", k: float = 0.0025, x0: float = 10_000, steps: int = 10_000) -> float:
    """beta after ``step`` optimizer steps (step 0 is the first batch)."""
    if schedule == "none":
        return 1.0
    if schedule == "logistic":
        exponent = -k * (step - x0)
        return 0.0 if exponent > 700 else 1.0 / (1.0 + math.exp(exponent))
    if schedule == "linear":
        return min(1.0, step / steps)
    raise InfolmError(f"KL annealing must be one of {', '.join(SCHEDULES)}; got {schedule!r}")
