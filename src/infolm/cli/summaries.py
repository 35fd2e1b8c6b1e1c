"""One line a person reads at a glance after each extra evaluation of ``infolm evaluate``.

Each extra (dynamic evaluation, MC dropout, temperature, the induced n-gram, reverse perplexity,
segment MI, interpolation with an n-gram) returns a dict of raw numbers; :func:`extra_summaries` turns
each into a before/after line (``dynamic evaluation: test ppl 85.19 -> 73.12 (-14.2%), tuned on valid:
...``) from those numbers alone.
Perplexities for word data, bits per character for character data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def _in_unit(nll: float, level: str) -> float:
    """A per-token NLL (nats) in the unit the data is read in: bits per character, or perplexity."""
    return nll / math.log(2) if level == "char" else math.exp(min(nll, 700.0))


def _change(before: float, after: float) -> str:
    """Relative change, signed: ``-14.2%``."""
    if not (math.isfinite(before) and math.isfinite(after)) or before == 0:
        return "n/a"
    return f"{100.0 * (after - before) / before:+.1f}%"


def before_after(label: str, before_nll: float, after_nll: float, level: str) -> str:
    """``test ppl 85.19 -> 73.12 (-14.2%)`` (or ``test bpc 1.234 -> 1.200 (-2.8%)``) from two per-token NLLs."""
    before, after = _in_unit(before_nll, level), _in_unit(after_nll, level)
    unit, digits = ("bpc", 3) if level == "char" else ("ppl", 2)
    return f"{label} {unit} {before:.{digits}f} -> {after:.{digits}f} ({_change(before, after)})"


def dynamic_summary(result: dict[str, Any], level: str) -> str:
    change = before_after("test", result["static_test_nll"], result["test_nll"], level)
    return (
        f"dynamic evaluation: {change}, tuned on valid: lr={result['lr']:g}, lambda={result['decay']:g}, "
        f"epsilon={result['epsilon']:g}, max_time_steps={result['bptt']}"
    )


def mc_dropout_summary(result: dict[str, Any], level: str) -> str:
    change = before_after("test", result["standard_test_nll"], result["test_nll"], level)
    setting = f"dropout rate x{result['rate_scale']:g}, T={result['temperature']:g}"
    tuned = ", tuned on valid" if result["tuned_on_valid_tokens"] else " (not tuned)"
    return f"MC dropout ({result['samples']} masks vs dropout off): {change}, {setting}{tuned}"


def temperature_summary(result: dict[str, Any], level: str) -> str:
    change = before_after("test", result["test_nll_t1"], result["test_nll"], level)
    return f"softmax temperature: {change}, T={result['temperature']:.3f} tuned on valid"


def induced_summary(result: dict[str, Any], level: str, order: int) -> str:
    split = "test" if "test" in result else next(iter(result))
    row = result[split]
    return (
        f"induced {order}-gram: {split} ppl {row['induced_ppl']:.2f} (the model's) vs {row['kn_ppl']:.2f} "
        f"(Kneser-Ney {order}-gram of train) ({_change(row['kn_ppl'], row['induced_ppl'])})"
    )


def reverse_ppl_summary(result: dict[str, Any], level: str) -> str:
    return (
        f"reverse perplexity: test {result['test_ppl']:.2f}, valid {result['valid_ppl']:.2f} (a fresh LM trained "
        f"on {result['generated_tokens']:.0f} sampled tokens; {result['heldout_ppl']:.2f} on held-out samples)"
    )


def mi_summary(result: dict[str, Any], level: str) -> str:
    generated, real = result["generated"], result["real"]
    return (
        f"segment MI: sampled text {generated['mean']:.3f} ± {generated['std']:.3f} nats vs real text "
        f"{real['mean']:.3f} ± {real['std']:.3f} nats ({_change(real['mean'], generated['mean'])}), "
        f"{result['tokens']} tokens each"
    )


def interpolation_summary(result: dict[str, Any], level: str) -> str:
    change = before_after(result["split"], result["model_nll"], result["mixed_nll"], level)
    unit, digits = ("bpc", 3) if level == "char" else ("ppl", 2)
    alone = _in_unit(result["ngram_nll"], level)
    return (
        f"{result['order']}-gram interpolation: {change}, alpha={result['alpha']:.4f} tuned on "
        f"{result['tuned_on']} (the {result['order']}-gram alone: {unit} {alone:.{digits}f})"
    )


def extra_summaries(result: dict[str, Any], level: str, induced_order: int = 0) -> dict[str, str]:
    """``{result key: line}`` for every extra present in ``result`` (the dict ``infolm evaluate`` prints)."""
    writers: dict[str, Callable[[dict[str, Any], str], str]] = {
        "induced": lambda r, lv: induced_summary(r, lv, induced_order),
        "temperature": temperature_summary,
        "mc_dropout": mc_dropout_summary,
        "dynamic": dynamic_summary,
        "reverse_ppl": reverse_ppl_summary,
        "mi": mi_summary,
        "interpolate": interpolation_summary,
    }
    return {key: write(result[key], level) for key, write in writers.items() if key in result}
