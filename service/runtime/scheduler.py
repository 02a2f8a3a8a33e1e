"""The periodic driver of the pipeline: a collect job per collector and one score job.

APScheduler 3 (BackgroundScheduler) runs each job with max_instances=1 and coalesce=True: a
tick that outlasts its interval makes the runs it overlapped be skipped, and runs missed while
the process stalled are folded into one, so ticks never pile up or overlap. Each collector has
its own job so a slow source cannot starve the others or the scoring tick; the pipeline's lock
serialises ingest against scoring.

A collector that raises breaks its protocol (failures are data, docs/design.md, "The seams"): the
error is logged, the collector is reported down with the reason, and the scheduler goes on.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial

import numpy as np
from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from collectors.base import Collector, CollectorStatus
from collectors.frames import Batch
from service.pipeline import Pipeline
from service.runtime.metrics import ServiceMetrics
from service.tick import TickResult

log = logging.getLogger(__name__)

Clock = Callable[[], float]
SCORE_JOB = "score"


def batch_time(batch: Batch) -> float | None:
    """Data time of a batch: its newest finite timestamp, None when it holds none."""
    newest = -math.inf
    for f in batch.frames.values():
        ts = f.ts[np.isfinite(f.ts)]
        if len(ts):
            newest = max(newest, float(ts.max()))
    for t in batch.events.ts:
        if math.isfinite(t):
            newest = max(newest, t)
    return newest if math.isfinite(newest) else None


class DataClock:
    """The clock of a replay: the newest data time seen. Scoring at data time lets rules that
    look back from `now` (Xid hold, sustained windows) see the trace as it happened."""

    def __init__(self) -> None:
        self._now = math.nan
        self._lock = threading.Lock()

    def observe(self, batch: Batch) -> float:
        t = batch_time(batch)
        with self._lock:
            if t is not None and not t <= self._now:  # also true while _now is NaN
                self._now = t
            return self._now

    def advance(self, t: float) -> None:
        """Move to t unless already past it (a replay resumed at its checkpoint)."""
        with self._lock:
            if not t <= self._now:
                self._now = t

    def __call__(self) -> float:
        return self._now


@dataclass(frozen=True, slots=True)
class JobCounts:
    runs: int = 0
    skipped: int = 0  # overlapped a running instance or missed its grace: coalesced away
    errors: int = 0


class TickScheduler:
    def __init__(self, pipeline: Pipeline, collectors: Sequence[Collector] = (), *,
                 collect_interval_s: float = 5.0, score_interval_s: float = 5.0,
                 clock: Clock = time.time, metrics: ServiceMetrics | None = None,
                 misfire_grace_s: float | None = None) -> None:
        names = [c.name for c in collectors]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"collector names must be unique, repeated: {duplicates}")
        if collect_interval_s <= 0 or score_interval_s <= 0:
            raise ValueError("intervals must be positive")
        self.pipeline = pipeline
        self.collectors = {c.name: c for c in collectors}
        self.collect_interval_s = collect_interval_s
        self.score_interval_s = score_interval_s
        self.clock = clock
        self.metrics = metrics
        # A run later than one interval is stale; the next one will carry newer data anyway.
        self.misfire_grace_s = misfire_grace_s
        self._lock = threading.Lock()
        self._status = {n: replace(c.status) for n, c in self.collectors.items()}
        self._counts: dict[str, JobCounts] = {}
        self._scheduler: BackgroundScheduler | None = None

    # ---- state others read --------------------------------------------------------------------
    def statuses(self) -> dict[str, CollectorStatus]:
        with self._lock:
            return {n: replace(s) for n, s in self._status.items()}

    def counts(self) -> dict[str, JobCounts]:
        with self._lock:
            return dict(self._counts)

    @property
    def running(self) -> bool:
        return self._scheduler is not None and self._scheduler.running

    # ---- the jobs (also callable directly, which is what tests and replays do) -----------------
    def collect_once(self, name: str) -> int:
        """One round of one collector into the pipeline; returns the samples accepted."""
        collector = self.collectors[name]
        job = f"collect:{name}"
        t_scrape = time.perf_counter()
        try:
            batch = collector.collect()
        except Exception as exc:  # a broken collector must not stop the others
            log.exception("collector %s raised; marking it down", name)
            self._set_status(name, CollectorStatus(False, f"collect() raised {exc!r}"))
            self._count(job, errors=1)
            return 0
        if self.metrics is not None:
            self.metrics.scrape_seconds.labels(name).observe(time.perf_counter() - t_scrape)
        self._set_status(name, replace(collector.status))
        if isinstance(self.clock, DataClock):
            self.clock.observe(batch)
        now = self.clock()
        if math.isnan(now) or (not batch.frames and not batch.events and not batch.rejected):
            self._count(job)
            return 0
        t0 = time.perf_counter()
        try:
            res = self.pipeline.ingest(batch, now)
        except Exception:
            log.exception("ingest of a %s batch failed", name)
            self._count(job, errors=1)
            return 0
        if self.metrics is not None:
            self.metrics.ingest_seconds.labels(name).observe(time.perf_counter() - t0)
        self._count(job)
        return res.accepted

    def score_once(self) -> TickResult | None:
        """One scoring tick at the clock's time; None before there is any time to score at."""
        now = self.clock()
        if math.isnan(now):
            return None
        try:
            result = self.pipeline.tick(now)
        except Exception:
            log.exception("scoring tick at %s failed", now)
            self._count(SCORE_JOB, errors=1)
            return None
        if self.metrics is not None:
            self.metrics.tick_seconds.observe(result.duration_s)
        for t in result.transitions:
            log.info("alert %s %s level %d -> %d (risk %.2f)", t.scope, t.entity, t.old, t.new,
                     t.risk)
        self._count(SCORE_JOB)
        return result

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self, *, run_now: bool = True) -> None:
        """Start the jobs; with run_now the first collect and score run at once rather than
        one interval after start, so a fresh service becomes ready quickly."""
        if self._scheduler is not None:
            raise RuntimeError("scheduler already started")
        workers = len(self.collectors) + 2
        sched = BackgroundScheduler(executors={"default": ThreadPoolExecutor(workers)},
                                    timezone=UTC)
        sched.add_listener(self._on_skip, EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED)
        first = datetime.now(UTC) if run_now else None
        for name in self.collectors:
            self._add(sched, f"collect:{name}", self.collect_interval_s, first,
                      partial(self.collect_once, name))
        self._add(sched, SCORE_JOB, self.score_interval_s, first, self.score_once)
        sched.start()
        self._scheduler = sched
        log.info("scheduler started: %d collector(s) every %gs, scoring every %gs",
                 len(self.collectors), self.collect_interval_s, self.score_interval_s)

    def _add(self, sched: BackgroundScheduler, job: str, interval: float,
             first: datetime | None, func: Callable[[], object]) -> None:
        grace = self.misfire_grace_s if self.misfire_grace_s is not None else interval
        kwargs = {"next_run_time": first} if first is not None else {}
        sched.add_job(func, "interval", seconds=interval, id=job, name=job, max_instances=1,
                      coalesce=True, misfire_grace_time=max(1, math.ceil(grace)), **kwargs)

    def shutdown(self, *, wait: bool = True) -> None:
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.shutdown(wait=wait)
        self._scheduler = None

    # ---- bookkeeping -----------------------------------------------------------------------
    def _on_skip(self, event: JobEvent) -> None:
        log.debug("job %s skipped a run (still running or too late)", event.job_id)
        self._count(event.job_id, runs=0, skipped=1)
        if self.metrics is not None:
            self.metrics.skipped.labels(event.job_id).inc()

    def _set_status(self, name: str, status: CollectorStatus) -> None:
        with self._lock:
            old = self._status[name]
            self._status[name] = status
        if old.up and not status.up:
            log.warning("collector %s is down: %s", name, status.reason)
        elif status.up and not old.up:
            log.info("collector %s is up again", name)

    def _count(self, job: str, *, runs: int = 1, skipped: int = 0, errors: int = 0) -> None:
        with self._lock:
            c = self._counts.get(job, JobCounts())
            self._counts[job] = JobCounts(c.runs + runs, c.skipped + skipped, c.errors + errors)
        if errors and self.metrics is not None:
            self.metrics.job_errors.labels(job).inc(errors)
