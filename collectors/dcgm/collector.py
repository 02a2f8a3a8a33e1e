"""DcgmExporterCollector: scrape a dcgm-exporter `/metrics` endpoint over HTTP.

Every failure (connection refused, timeout, non-200 status, a page that does not parse, a page
without any DCGM field) becomes `status.up = False` with the reason and an empty Batch.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable

import httpx

from collectors.base import CollectorStatus
from collectors.dcgm.exposition import ExpositionError, ParseStats, parse_exposition
from collectors.frames import Batch, Rejection
from collectors.lineprotocol import Point
from collectors.schema import SchemaMapper

log = logging.getLogger(__name__)

_XID = "xid"


class XidTracker:
    """Turns DCGM's last-Xid reading into Xid events: one when the value changes to a new,
    non-zero code. The first reading of a GPU is a baseline, not an event: after a restart of
    this service the exporter still shows the Xid of hours ago, and replaying it would fire the
    critical-Xid rule again. Two Xids with the same code in a row are indistinguishable here
    (DCGM_EXP_XID_ERRORS_COUNT would tell them apart, but dcgm-exporter ships it disabled)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], int] = {}

    def events(self, readings: Iterable[Point]) -> list[Point]:
        out: list[Point] = []
        for p in readings:
            code = p.fields.get("code")
            if not isinstance(code, int):
                continue
            key = (p.tags["host"], p.tags["gpu"])
            before = self._last.get(key)
            self._last[key] = code
            if before is not None and code != before and code != 0:
                out.append(p)
        return out


class DcgmExporterCollector:
    """Scrapes `url` (e.g. http://node:9400/metrics) once per collect().

    `host` names the node in the emitted entities; None takes dcgm-exporter's `Hostname` label,
    unless that is a pod name (collectors.node_names), whose samples are refused.
    `client` and `clock` are injectable so tests drive them; the default client is created here
    and owned by the collector (close() releases it)."""

    def __init__(
        self,
        url: str,
        timeout_s: float = 2.0,
        *,
        host: str | None = None,
        name: str = "dcgm-exporter",
        client: httpx.Client | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.host = host
        self.name = name
        self.status = CollectorStatus()
        self.last_stats = ParseStats()
        self.unknown_fields: Counter[str] = Counter()  # over the collector's life
        self._own_client = client is None
        self._client = client if client is not None else httpx.Client()
        self._clock = clock
        self._mapper = SchemaMapper()
        self._xids = XidTracker()

    def collect(self) -> Batch:
        text = self._fetch()
        if text is None:
            return Batch()
        stats = ParseStats()
        refused: list[Rejection] = []  # bad lines of a cut or broken page; the rest is read
        try:
            points = parse_exposition(text, self.host, self._clock(), stats=stats,
                                      rejected=refused)
        except ExpositionError as exc:
            return self._down(f"{self.url}: {exc}")
        self.last_stats = stats
        self.unknown_fields.update(stats.unknown)
        if stats.samples == 0:
            return self._down(f"{self.url}: no DCGM_FI_* samples in the page")
        readings = [p for p in points if p.measurement != _XID]
        readings += self._xids.events(p for p in points if p.measurement == _XID)
        self.status.up, self.status.reason = True, ""
        return self._mapper.to_batch(readings, refused)

    def close(self) -> None:
        if self._own_client:
            self._client.close()

    def _fetch(self) -> str | None:
        try:
            r = self._client.get(self.url, timeout=self.timeout_s)
        except httpx.TimeoutException:
            self._down(f"{self.url}: no answer within {self.timeout_s:g} s")
            return None
        except httpx.ConnectError as exc:
            self._down(f"{self.url}: cannot connect: {exc}")
            return None
        except httpx.HTTPError as exc:
            self._down(f"{self.url}: {type(exc).__name__}: {exc}")
            return None
        if r.status_code != 200:
            self._down(f"{self.url}: HTTP {r.status_code} {r.reason_phrase}".rstrip())
            return None
        return r.text

    def _down(self, reason: str) -> Batch:
        if self.status.up or self.status.reason != reason:
            log.warning("%s: %s", self.name, reason)
        self.status.up, self.status.reason = False, reason
        return Batch()
