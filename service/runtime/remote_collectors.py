"""The latest status node agents reported for their collectors (collectors.collector_status),
per (host, collector), for /metrics and for an InfluxDB sink's `collector` points.

An agent that stops reporting cannot say so itself: a report older than `stale_after_s` on the
service's clock reads as down with reason "no report for N s". Reports older than `forget_after_s`
are dropped, so renamed or retired nodes do not stay down forever.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from collectors.base import CollectorStatus
from collectors.collector_status import CollectorReport

STALE_AFTER_ROUNDS = 3  # agent rounds without a report before a collector reads as down
FORGET_AFTER_S = 24 * 3600.0
# (host, collector) pairs remembered at once: names come from the wire, and each is a series
# on /metrics. Sized for fleets of thousands of nodes with a few collectors each.
MAX_COLLECTORS = 50_000


@dataclass(frozen=True, slots=True)
class RemoteStatus:
    host: str
    collector: str
    up: bool
    reason: str  # why it is down; empty while up
    scrape_seconds: float  # of the last report; NaN when it did not say
    samples: int
    at: float  # time of the last report (epoch seconds)


class RemoteCollectors:
    """Thread-safe: the write endpoint records from its worker threads, /metrics reads."""

    def __init__(self, stale_after_s: float, forget_after_s: float = FORGET_AFTER_S,
                 max_collectors: int = MAX_COLLECTORS) -> None:
        if not 0 < stale_after_s <= forget_after_s:
            raise ValueError("need 0 < stale_after_s <= forget_after_s")
        self.stale_after_s = stale_after_s
        self.forget_after_s = forget_after_s
        self._latest: dict[tuple[str, str], CollectorReport] = {}
        self._lock = threading.Lock()
        self.max_collectors = max_collectors
        self.refused = 0  # reports of new pairs past max_collectors

    def record(self, reports: Iterable[CollectorReport]) -> None:
        """Keep each collector's newest report; a late (spooled) older one changes nothing."""
        with self._lock:
            for r in reports:
                key = (r.host, r.collector)
                old = self._latest.get(key)
                if old is None and len(self._latest) >= self.max_collectors:
                    self.refused += 1
                    continue
                if old is None or r.ts >= old.ts:
                    self._latest[key] = r

    def statuses(self, now: float) -> list[RemoteStatus]:
        """Every remembered collector as of `now`, sorted by host then collector."""
        with self._lock:
            if not math.isnan(now):
                for key in [k for k, r in self._latest.items()
                            if now - r.ts > self.forget_after_s]:
                    del self._latest[key]
            reports = sorted(self._latest.items())
        out = []
        for (host, name), r in reports:
            age = now - r.ts
            up, reason = r.up, "" if r.up else r.error
            if age > self.stale_after_s:
                up, reason = False, f"no report for {age:.0f} s"
            out.append(RemoteStatus(host, name, up, reason, r.scrape_seconds, r.samples, r.ts))
        return out

    def as_collector_statuses(self, now: float) -> dict[tuple[str, str], CollectorStatus]:
        """The (host, collector) -> status view an InfluxDB sink's track_collectors takes."""
        return {(s.host, s.collector): CollectorStatus(s.up, s.reason)
                for s in self.statuses(now)}
