"""Progress of a long command (simulate, replay, evaluate), always on stderr.

On a terminal it is a tqdm bar; otherwise (a log file, CI, a pipe) a plain line every
`every_s` seconds of wall time, so a run of several minutes is never silent and a log is
not flooded. Nothing goes to stdout: with `--json` stdout must stay one parseable document.
Positions are absolute (`update(done)`), so a caller reports where it is, not how far it
moved: simulated hours, rounds replayed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, Any, Self

EVERY_S = 10.0  # seconds of wall time between plain lines


class Progress:
    """`total` None: no end known (a trace replayed as it is read); the count and rate are
    shown instead of a percentage."""

    def __init__(self, desc: str, total: float | None = None, unit: str = "", *,
                 stream: IO[str] | None = None, every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic, tty: bool | None = None) -> None:
        self.desc, self.total, self.unit = desc, total, unit
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = EVERY_S if every_s is None else every_s
        self.clock = clock
        self.done = 0.0
        self.note = ""
        self._started = clock()
        self._next_line = self._started + self.every_s
        self._lines = 0  # plain lines printed so far
        isatty = getattr(self.stream, "isatty", None)
        use_bar = tty if tty is not None else bool(callable(isatty) and isatty())
        self._bar: Any = None
        if use_bar:
            from tqdm import tqdm

            # A position in simulated hours is fractional: the bar shows the percentage only.
            fmt = ("{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}{postfix}]"
                   if total else None)
            self._bar = tqdm(total=total, desc=desc, unit=unit or "it", file=self.stream,
                             dynamic_ncols=True, leave=False, bar_format=fmt)

    def update(self, done: float, note: str = "") -> None:
        """Now at `done` (of `total`); `note` is a short status shown beside it."""
        self.done, self.note = done, note
        if self._bar is not None:
            if note:
                self._bar.set_postfix_str(note, refresh=False)
            self._bar.update(done - self._bar.n)  # tqdm redraws at most every 0.1 s
            return
        now = self.clock()
        if now >= self._next_line:
            self._say(now)
            self._next_line = now + self.every_s

    def write(self, message: str, file: IO[str] | None = None) -> None:
        """Print a line (an alert as it fires) without tearing the bar."""
        out = file if file is not None else sys.stdout
        if self._bar is not None:
            self._bar.write(message, file=out)
        else:
            print(message, file=out, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._lines:  # a run long enough to have reported says that it ended
            self._say(self.clock(), final=True)

    def _say(self, now: float, final: bool = False) -> None:
        elapsed = now - self._started
        count = f"{_num(self.done)}{'/' + _num(self.total) if self.total else ''} {self.unit}"
        line = f"{self.desc}: "
        if final:
            line += f"done after {_duration(elapsed)} ({count.rstrip()})"
        elif self.total:
            frac = min(max(self.done / self.total, 0.0), 1.0)
            line += f"{frac:.0%} ({count.rstrip()}) after {_duration(elapsed)}"
            if 0 < frac < 1:
                line += f", about {_duration(elapsed * (1 - frac) / frac)} left"
        else:
            line += f"{count.rstrip()} after {_duration(elapsed)}"
        if self.note:
            line += f"; {self.note}"
        print(line, file=self.stream, flush=True)
        self._lines += 1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 10 or float(x).is_integer() else f"{x:.1f}"


def _duration(s: float) -> str:
    s = max(s, 0.0)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"
