"""The scheduler: ticks never overlap or queue up, a raising collector is reported down and
the rest go on, and every tick runs at the injected clock's time."""

from __future__ import annotations

import threading
import time
from itertools import pairwise

import pytest

from collectors.catalog import Scope
from models.detectors.findings import Finding
from models.detectors.view import FleetView
from service.assembly import Wiring, default_detectors
from service.pipeline import build_pipeline
from service.runtime.scheduler import DataClock, TickScheduler, batch_time
from service.settings import Settings
from tests.support.fleet import STEP, T0, BrokenCollector, Fleet, FleetCollector, ManualClock

INTERVAL = 0.05
TICK = 0.25  # five intervals: every tick overlaps the next four scheduled runs
RUN_FOR = 1.2


class SlowDetector:
    """A detector slower than the tick interval, recording when each call enters and leaves."""

    name = "slow"

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self._active = 0
        self.max_active = 0
        self._lock = threading.Lock()

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        with self._lock:
            self._active += 1
            self.max_active = max(self.max_active, self._active)
        start = time.monotonic()
        time.sleep(TICK)
        with self._lock:
            self._active -= 1
            self.spans.append((start, time.monotonic()))
        return []


@pytest.mark.slow
def test_slow_ticks_neither_overlap_nor_queue(settings: Settings) -> None:
    slow = SlowDetector()
    pipeline = build_pipeline(settings, Wiring(detectors=[*default_detectors(settings), slow]))
    sched = TickScheduler(pipeline, score_interval_s=INTERVAL, clock=ManualClock())
    try:
        sched.start()
        time.sleep(RUN_FOR)
        sched.shutdown(wait=True)
        ran = len(slow.spans)
        time.sleep(3 * TICK)
        assert len(slow.spans) == ran, "runs kept coming after shutdown: they were queued"
    finally:
        sched.shutdown()
        pipeline.close()
    assert slow.max_active == 1
    spans = sorted(slow.spans)
    for (_, end), (start, _) in pairwise(spans):
        assert start >= end, "two ticks overlapped"
    # Every tick takes TICK seconds, so no more than RUN_FOR / TICK of them fit (plus the one
    # running at shutdown); the runs they overlapped were skipped and counted, not deferred.
    assert 2 <= ran <= RUN_FOR / TICK + 1
    counts = sched.counts()["score"]
    assert counts.runs == ran
    assert counts.skipped >= ran  # at least one skipped run behind every tick but the last
    assert counts.runs + counts.skipped >= 0.5 * RUN_FOR / INTERVAL  # each slot accounted for
    assert pipeline.stats.ticks == ran


def test_a_raising_collector_is_marked_down_and_the_rest_go_on(settings: Settings) -> None:
    fleet, clock = Fleet({"n001": 8}), ManualClock()
    broken = BrokenCollector()
    pipeline = build_pipeline(settings)
    sched = TickScheduler(pipeline, [FleetCollector(fleet, clock), broken],
                          collect_interval_s=INTERVAL, score_interval_s=INTERVAL, clock=clock)
    try:
        sched.start()
        deadline = time.monotonic() + 10
        while (broken.calls < 3 or pipeline.stats.ticks < 3) and time.monotonic() < deadline:
            time.sleep(0.01)
            clock.now += STEP  # a fresh round each time, so no duplicates
        assert sched.running
    finally:
        sched.shutdown()
        pipeline.close()
    assert broken.calls >= 3 and pipeline.stats.ticks >= 3
    status = sched.statuses()
    assert status["fleet"].up
    assert not status["broken"].up and "/dev/nvidiactl" in status["broken"].reason
    assert sched.counts()["collect:broken"].errors == broken.calls
    assert pipeline.stats.samples_ingested > 0


def test_ticks_run_at_the_injected_clock(settings: Settings) -> None:
    fleet, clock = Fleet({"n001": 8}), ManualClock(T0 + 42)
    pipeline = build_pipeline(settings)
    try:
        sched = TickScheduler(pipeline, [FleetCollector(fleet, clock)], clock=clock)
        assert sched.collect_once("fleet") > 0
        result = sched.score_once()
        assert result is not None and result.at == T0 + 42
        assert pipeline.risk is not None and pipeline.risk.at == T0 + 42
    finally:
        pipeline.close()


def test_a_data_clock_follows_the_replayed_data(settings: Settings) -> None:
    fleet, wall = Fleet({"n001": 8}), ManualClock(T0 + 100)
    pipeline = build_pipeline(settings)
    data = DataClock()
    try:
        sched = TickScheduler(pipeline, [FleetCollector(fleet, wall)], clock=data)
        assert sched.score_once() is None  # nothing replayed yet: no time to score at
        sched.collect_once("fleet")
        result = sched.score_once()
        assert result is not None and result.at == T0 + 100
        assert pipeline.risk is not None and len(pipeline.risk.scopes[Scope.GPU].risk) == 8
    finally:
        pipeline.close()
    assert batch_time(fleet.batch(T0)) == T0


def test_collector_names_must_be_unique(settings: Settings) -> None:
    pipeline = build_pipeline(settings)
    try:
        with pytest.raises(ValueError, match="unique"):
            TickScheduler(pipeline, [BrokenCollector("x"), BrokenCollector("x")])
    finally:
        pipeline.close()
