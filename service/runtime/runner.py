"""Replay a finite source through the pipeline round by round, without the HTTP server or the
scheduler: what `gpuhealth replay` and the demo run.

Each round is ingested and scored at its own data time (its newest timestamp), so every rule
that looks back from `now` sees the trace as it happened, however fast it is replayed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from collectors.base import Collector
from service.pipeline import Pipeline
from service.runtime.scheduler import Clock, batch_time
from service.tick import TickResult

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ReplaySummary:
    rounds: int = 0
    samples: int = 0  # accepted by ingest
    rejected: int = 0
    transitions: int = 0  # alert level changes
    alerts_opened: int = 0  # transitions from level 0
    first_ts: float | None = None  # data time of the first and last scored rounds
    last_ts: float | None = None
    wall_s: float = 0.0
    stopped: bool = False  # `stop` ended the run before the source was exhausted
    error: str = ""  # the source reported itself down
    peak_level: dict[str, int] = field(default_factory=dict)  # per entity that alerted

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_replay(pipeline: Pipeline, source: Collector, *, clock: Clock = time.monotonic,
               on_tick: Callable[[TickResult], None] | None = None,
               stop: Callable[[], bool] | None = None) -> ReplaySummary:
    """Pull rounds from `source` until it is exhausted (or reports itself down, or `stop()`
    says so); ingest and score each one at its data time. `clock` only measures wall time;
    pacing, if any, is the source's business (ReplaySource's `speed`)."""
    summary = ReplaySummary()
    started = clock()
    try:
        while not source.status.exhausted:
            if stop is not None and stop():
                summary.stopped = True
                break
            batch = source.collect()
            if not source.status.up:
                summary.error = source.status.reason
                log.error("replay source %s is down: %s", source.name, summary.error)
                break
            now = batch_time(batch)
            if now is None:  # an empty round, or only lines that were refused: no time to score
                summary.rejected += len(batch.rejected)
                continue
            res = pipeline.ingest(batch, now)
            result = pipeline.tick(now)
            summary.rounds += 1
            summary.samples += res.accepted
            summary.rejected += res.rejected
            summary.transitions += len(result.transitions)
            if summary.first_ts is None:
                summary.first_ts = now
            summary.last_ts = now
            for t in result.transitions:
                summary.alerts_opened += t.old == 0
                summary.peak_level[t.entity] = max(summary.peak_level.get(t.entity, 0), t.new)
            if on_tick is not None:
                on_tick(result)
    finally:
        summary.wall_s = clock() - started
    return summary
