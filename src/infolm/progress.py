"""Progress of long work (training, sweeps, long evaluations) for a user who is not watching a terminal.

When stdout is a terminal, a tqdm bar; otherwise (a log file, a pipe, CI) one line on stderr every
``$INFOLM_PROGRESS_SECONDS`` seconds (30 by default), e.g.::

    infolm train runs/x: step 400/1328 (30.1%), epoch 0, loss 5.8123, 2,345 tokens/s, ETA 6m36s

stdout stays for results (``--json``). Imports nothing of infolm, so every package may use it.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol, TextIO

DEFAULT_INTERVAL_S = 30.0


class Reporter(Protocol):
    def update(self, done: int, tokens: int = 0, **fields: Any) -> None: ...

    def close(self) -> None: ...


def format_duration(seconds: float) -> str:
    """``1h02m``, ``6m36s``, ``42s``."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def eta_seconds(done: int, total: int | None, initial: int, elapsed: float) -> float | None:
    """Time left at the average rate since ``initial`` (None while unknown)."""
    if total is None or done <= initial or elapsed <= 0:
        return None
    rate = (done - initial) / elapsed
    return max(total - done, 0) / rate


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if math.isfinite(value) and abs(value) < 1e6 else f"{value:.4g}"
    return str(value)


class ProgressLine:
    """One line on ``stream`` at most every ``interval`` seconds: done/total, fields, tokens/s, ETA."""

    def __init__(
        self,
        what: str,
        total: int | None,
        initial: int = 0,
        unit: str = "step",
        interval: float | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what, self.total, self.initial, self.unit = what, total, initial, unit
        self.interval = interval_from_env() if interval is None else interval
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = self.last = clock()
        self.tokens = 0  # since the last line

    def line(self, done: int, tokens_per_s: float | None, eta: float | None, fields: dict[str, Any]) -> str:
        parts = [f"{self.unit} {done}" + (f"/{self.total} ({100 * done / self.total:.1f}%)" if self.total else "")]
        parts += [f"{key} {_value(value)}" for key, value in fields.items()]
        if tokens_per_s is not None:
            parts.append(f"{tokens_per_s:,.0f} tokens/s")
        if eta is not None:
            parts.append(f"ETA {format_duration(eta)}")
        return f"infolm {self.what}: " + ", ".join(parts)

    def update(self, done: int, tokens: int = 0, **fields: Any) -> None:
        self.tokens += tokens
        now = self.clock()
        if now - self.last < self.interval:
            return
        rate = self.tokens / (now - self.last) if self.tokens and now > self.last else None
        eta = eta_seconds(done, self.total, self.initial, now - self.start)
        self.stream.write(self.line(done, rate, eta, fields) + "\n")
        self.stream.flush()
        self.last, self.tokens = now, 0

    def close(self) -> None:
        pass


class _Bar:
    """tqdm on an interactive terminal."""

    def __init__(self, what: str, total: int | None, initial: int, unit: str) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=initial, unit=unit, desc=what, dynamic_ncols=True)
        self.done = initial

    def update(self, done: int, tokens: int = 0, **fields: Any) -> None:
        del tokens
        self.bar.update(done - self.done)
        self.done = done
        if fields:
            self.bar.set_postfix({key: _value(value) for key, value in fields.items()})

    def close(self) -> None:
        self.bar.close()


def interval_from_env() -> float:
    raw = os.environ.get("INFOLM_PROGRESS_SECONDS")
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        return float(raw)
    except ValueError:
        return DEFAULT_INTERVAL_S


def reporter(what: str, total: int | None, initial: int = 0, unit: str = "step") -> Reporter:
    """A tqdm bar when stdout is a terminal, else a ``ProgressLine`` on stderr."""
    if sys.stdout.isatty():
        return _Bar(what, total, initial, unit)
    return ProgressLine(what, total, initial, unit)
