"""Replays a trace as a live collector: one round per collect(), paced like the original.

Pacing keeps an absolute schedule from the first round (round k is due at
start + (t_k - t_0) / speed), so time spent by the caller between calls does not add drift.
A caller that falls behind gets the next rounds at once rather than a slowed-down replay.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from collectors.base import CollectorStatus
from collectors.frames import Batch, EventFrame, Frame
from collectors.trace import Round, TraceReader

log = logging.getLogger(__name__)


class ReplaySource:
    """A Collector over a TraceReader. `speed` 1 is real time, 10 ten times faster, None or 0
    as fast as the caller asks. `clock` and `sleep` are injectable so tests need not wait.

    `start_at` rebases the trace: every timestamp is shifted by one constant so that the first
    round is stamped `start_at` (epoch seconds), and pacing then runs on the epoch clock
    (`clock` defaults to time.time), each round due when the clock reaches its new stamp
    (at speed 1). A start in the past replays the rounds already due at once, then goes on in
    real time, so a recorded trace looks like a live one (no stamp more than a round ahead).

    `skip_through` drops every round stamped at or before it (a replay resumed after a
    restart); pacing starts from the first round after it."""

    def __init__(
        self,
        trace: TraceReader | str | os.PathLike[str],
        *,
        speed: float | None = 1.0,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        name: str = "replay",
        start_at: float | None = None,
        skip_through: float | None = None,
    ) -> None:
        if speed is not None and speed < 0:
            raise ValueError(f"replay speed must be positive, 0 or None, not {speed}")
        self.name = name
        self.status = CollectorStatus()
        self.reader = trace if isinstance(trace, TraceReader) else TraceReader(trace)
        self.speed = speed or None
        self._clock = clock or (time.monotonic if start_at is None else time.time)
        self._sleep = sleep
        self._rounds: Iterator[Round] = self.reader.rounds()
        self._anchor: tuple[float, float] | None = None  # (clock at first round, its trace time)
        self.start_at = start_at
        self.shift_s = 0.0  # added to every timestamp; set from the first round when rebasing
        self.rounds_replayed = 0
        self.skip_through = skip_through
        self.rounds_skipped = 0

    def collect(self) -> Batch:
        if self.status.exhausted:
            return Batch()
        try:
            rnd = next(self._rounds)
            while (self.skip_through is not None and rnd.time is not None
                   and rnd.time <= self.skip_through):
                self.rounds_skipped += 1
                rnd = next(self._rounds)
        except StopIteration:
            self.status.exhausted = True
            log.info("%s: trace %s exhausted after %d rounds", self.name, self.reader.path,
                     self.rounds_replayed)
            return Batch()
        except OSError as exc:  # the trace vanished or broke mid-replay: report, do not raise
            self.status.up, self.status.reason = False, f"reading {self.reader.path}: {exc}"
            self.status.exhausted = True
            return Batch()
        if self.start_at is not None and self._anchor is None and rnd.time is not None:
            self.shift_s = self.start_at - rnd.time
            self._anchor = (self.start_at, rnd.time)  # due on the epoch clock, not from now
        self._pace(rnd.time)
        self.rounds_replayed += 1
        return shifted(rnd.batch, self.shift_s) if self.shift_s else rnd.batch

    def _pace(self, t: float | None) -> None:
        if self.speed is None or t is None:
            return
        if self._anchor is None:
            self._anchor = (self._clock(), t)
            return
        wall0, t0 = self._anchor
        delay = wall0 + (t - t0) / self.speed - self._clock()
        if delay > 0:
            self._sleep(delay)


def shifted(batch: Batch, shift_s: float) -> Batch:
    """The batch with every timestamp moved by `shift_s` seconds (a GPU identity's time too:
    it is the round's)."""
    frames = {scope: Frame(f.entities, f.rows, f.ts + shift_s, f.values)
              for scope, f in batch.frames.items()}
    ev = batch.events
    events = EventFrame(list(ev.keys), [t + shift_s for t in ev.ts], list(ev.metrics),
                        list(ev.values))
    idents = {k: replace(v, at=v.at + shift_s) for k, v in batch.identity.items()}
    return Batch(frames, events, list(batch.rejected), idents)
