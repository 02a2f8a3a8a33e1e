"""Where a `serve --replay` got to, kept beside the alerts, so the same command after a restart
resumes there. Replaying the trace from its start again re-raised, and re-paged, every failure
in it: the alert store had resolved them long ago in data time.

On resume the rounds before the checkpoint are fed to ingest and the detectors only (the warm
start's path: no alerts, no sinks, no messages), for as much history as a warm start would
load, so windows and detector state continue; scoring goes on from the first round after it.
A trace that changed since (its files' sizes or times) starts over, and says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from collectors.base import Collector
from collectors.frames import Batch
from collectors.replay import ReplaySource
from collectors.trace import TraceReader
from service.pipeline import Pipeline
from service.runtime.scheduler import DataClock
from service.runtime.warm import warm_start
from service.storage.state_db import StateStore, StateTarget
from service.tick import TickResult

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS replay_progress (
    trace TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    at REAL NOT NULL,          -- data time of the newest scored tick
    updated_at REAL NOT NULL   -- wall time it was saved
);
"""
SAVE_EVERY_S = 1.0  # of wall time: a crash replays at most this much again (idempotently)


def trace_identity(reader: TraceReader) -> str:
    """Names, sizes and modification times of the trace's files."""
    parts = []
    for f in reader.files:
        st = f.stat()
        parts.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
    return "|".join(parts)


class ReplayProgress(StateStore):
    """A tick observer that saves the data time of the newest scored tick of one trace."""

    def __init__(self, db: StateTarget, reader: TraceReader,
                 wall: Callable[[], float] = time.monotonic) -> None:
        super().__init__(db, _SCHEMA)
        self.trace = str(reader.path.resolve())
        self.identity = trace_identity(reader)
        self._wall = wall
        self._saved_wall = -float("inf")
        self._at: float | None = None

    def resume_at(self) -> float | None:
        """The checkpoint of this trace, None when there is none or the trace changed."""
        with self._lock:
            row = self._db.execute("SELECT identity, at FROM replay_progress WHERE trace = ?",
                                   (self.trace,)).fetchone()
        if row is None:
            return None
        if row[0] != self.identity:
            log.warning("trace %s changed since it was last replayed: replaying it from its "
                        "start", self.trace)
            return None
        return float(row[1])

    def observe(self, tick: TickResult) -> None:
        self._at = tick.at
        if self._wall() - self._saved_wall >= SAVE_EVERY_S:
            self._save()

    def _save(self) -> None:
        if self._at is None or self._at != self._at:  # no tick yet, or one before any data
            return
        self._saved_wall = self._wall()
        with self._lock:
            self._db.execute(
                "INSERT INTO replay_progress (trace, identity, at, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (trace) DO UPDATE "
                "SET identity = excluded.identity, at = excluded.at, "
                "updated_at = excluded.updated_at",
                (self.trace, self.identity, self._at, time.time()))

    def close(self) -> None:
        self._save()
        super().close()


class TraceRounds:
    """A trace as warm-start history (service.runtime.warm.HistoryRounds)."""

    def __init__(self, reader: TraceReader) -> None:
        self.reader = reader

    def rounds(self, start: float, end: float, step_s: float) -> Iterator[tuple[float, Batch]]:
        for rnd in self.reader.rounds():
            if rnd.time is None or rnd.time < start:
                continue
            if rnd.time >= end:
                return
            yield rnd.time, rnd.batch


def resumable_replay(pipeline: Pipeline, trace: Path, *, speed: float, clock: DataClock,
                     from_start: bool = False) -> list[Collector]:
    """The replay collector of `serve --replay`, resuming after the trace's checkpoint unless
    `from_start`; the pipeline saves the checkpoint on every tick from now on."""
    step = pipeline.settings.window.step_s
    progress = ReplayProgress(pipeline.db, TraceReader(trace, step_s=step))
    at = None if from_start else progress.resume_at()
    if at is not None:
        s = pipeline.settings.storage
        # Rounds up to and including the checkpoint's (warm_start reads [start, end)).
        warm = warm_start(pipeline, TraceRounds(TraceReader(trace, step_s=step)),
                          at + step / 2, max(s.warm_start_s, step), s.warm_start_tick_s)
        clock.advance(at)
        log.info("resuming the replay of %s after %s (data time); %d rounds before it fed to "
                 "the detectors (--from-start replays it all again)", trace, at, warm.rounds)
    pipeline.observers.append(progress)
    return [ReplaySource(TraceReader(trace, step_s=step), speed=speed, skip_through=at)]
