"""History: what a store kept about one entity over a time range, in time buckets.

One verb, `History.series(query)`. A SeriesQuery is built and validated here, once, so InfluxDB
(service.history.influx.reader) and SQLite (service.history.history_sqlite) answer the same
questions the same way: which metrics a scope has, how each kind is aggregated into a bucket,
how many buckets a series may have. `service.history.histories` opens the store the settings
name.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from collectors.catalog import CATALOG, Kind, Metric, Scope
from collectors.frames import Entity
from service.errors import BadRequest, GpuhealthError

# A series longer than this is a mistake (a year at 5 s), not a chart: the caller is told the
# smallest step that fits instead of InfluxDB being asked for millions of buckets.
MAX_POINTS = 11_000
AUTO_POINTS = 720  # one hour at the 5-s sample step; a screen-wide chart at any range
DEFAULT_RANGE_S = 3600.0
NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
              43200, 86400)
# What the scoring tick records per entity (InfluxDB's `risk` measurement, SQLite's
# risk_history table).
RISK_FIELDS = {"risk": "0..1", "level": "alert level"}
_LAST_NS_TIME = 2.0**63 / 1e9  # InfluxDB's timestamps are signed 64-bit nanoseconds


class Agg(StrEnum):
    MEAN = "mean"
    MAX = "max"
    MIN = "min"
    LAST = "last"
    COUNT = "count"  # events only: how many fell in the bucket


class ValueOrigin(StrEnum):
    """What a series' bucket values are computed from."""

    SAMPLE = "sample"  # raw values as ingested (counters cumulative)
    RATE = "rate"  # per-second rate of a counter, reset-aware
    EVENT = "event"  # discrete events (Xid), counted
    RISK = "risk"  # the scoring tick's risk and level


class QueryError(BadRequest, ValueError):
    """A question the caller got wrong (HTTP 400); the message says how to ask it."""

    slug = "bad-history-query"


class NotStored(GpuhealthError):
    """History this store does not keep (HTTP 501), e.g. ib_ber in the embedded SQLite store."""

    status, slug, title = 501, "not-stored", "Not kept by this store"


class HistoryUnavailable(GpuhealthError):
    """The store could not answer (HTTP 502): unreachable, or it refused the query."""

    status, slug, title = 502, "history-unavailable", "History store did not answer"


@dataclass(frozen=True, slots=True)
class Wanted:
    """One requested metric and how its samples become one value per bucket."""

    name: str
    origin: ValueOrigin
    agg: Agg
    unit: str
    kind: str
    resets: bool = False  # counters: whether a decrease is a reset (rates)
    derived: bool = False  # computed at ingest (ib_ber): the InfluxDB sink keeps it, SQLite not


@dataclass(frozen=True, slots=True)
class SeriesQuery:
    entity: Entity
    metrics: tuple[Wanted, ...]
    start: float  # epoch seconds, inclusive
    end: float  # exclusive
    step: int  # bucket width in whole seconds; buckets align to multiples of it since the epoch

    @property
    def scope(self) -> Scope:
        return self.entity.scope


@dataclass(slots=True)
class SeriesOut:
    """One metric's buckets: `times` are bucket starts (epoch seconds); empty buckets are left
    out (missing is missing, never zero)."""

    metric: Wanted
    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


class History(Protocol):
    def series(self, query: SeriesQuery) -> list[SeriesOut]: ...


# ---- building a query --------------------------------------------------------------------------

def parse_time(text: str) -> float:
    """Epoch seconds (`1700000000`, `1700000000.5`) or RFC 3339 (`2023-11-14T22:13:20Z`)."""
    s = text.strip()
    if not s.isascii():  # float() and fromisoformat() would read other scripts' digits
        raise QueryError(f"time {text!r} is neither epoch seconds nor RFC 3339 "
                         "(2023-11-14T22:13:20Z): write it in ASCII")
    try:
        ts = float(s)
    except ValueError:
        try:
            dt = datetime.fromisoformat(s.upper())
        except ValueError:
            raise QueryError(f"time {text!r} is neither epoch seconds nor RFC 3339 "
                             "(2023-11-14T22:13:20Z)") from None
        if dt.tzinfo is None:
            raise QueryError(f"time {text!r} has no time zone: add Z or an offset") from None
        ts = dt.timestamp()
    if not math.isfinite(ts) or ts < 0:
        raise QueryError(f"time {text!r} is not a time after 1970")
    if ts >= _LAST_NS_TIME:
        raise QueryError(f"time {text!r} is past 2262, the end of nanosecond time")
    return ts


def valid_metrics(scope: Scope) -> list[str]:
    stored = [m.name for m in CATALOG if m.scope is scope and m.kind is not Kind.EVENT]
    return [*stored, *(m.name for m in CATALOG.events(scope)), *RISK_FIELDS]


def default_metrics(scope: Scope) -> list[str]:
    if scope is Scope.NODE:  # a node's page is first its risk; its sensors are asked by name
        return ["risk"]
    return [m.name for m in CATALOG.columns(scope)] or ["risk"]


def _wanted(scope: Scope, name: str, rate: bool, agg: Agg | None) -> Wanted:
    if name in RISK_FIELDS:
        return Wanted(name, ValueOrigin.RISK, agg or Agg.MAX, RISK_FIELDS[name], "risk")
    if name not in CATALOG:
        raise QueryError(f"unknown metric {name!r}; {scope} metrics are: "
                         + ", ".join(valid_metrics(scope)))
    m: Metric = CATALOG[name]
    if m.scope is not scope:
        raise QueryError(f"{name!r} is a metric of {m.scope}, not of {scope}; {scope} metrics "
                         "are: " + ", ".join(valid_metrics(scope)))
    if m.derived:
        return Wanted(name, ValueOrigin.SAMPLE, agg or Agg.MEAN, m.unit, m.kind.value, derived=True)
    if m.kind is Kind.EVENT:
        return Wanted(name, ValueOrigin.EVENT, Agg.COUNT, "events", m.kind.value)
    if rate and m.kind is Kind.COUNTER:
        return Wanted(name, ValueOrigin.RATE, agg or Agg.MEAN, m.unit + "/s", m.kind.value,
                      m.resets)
    default = {Kind.GAUGE: Agg.MEAN, Kind.COUNTER: Agg.MAX}.get(m.kind, Agg.MAX)
    return Wanted(name, ValueOrigin.SAMPLE, agg or default, m.unit, m.kind.value, m.resets)


def buckets(start: float, end: float, step: int) -> int:
    """How many step-aligned buckets [start, end) touches."""
    return math.floor(math.nextafter(end, -math.inf) / step) - math.floor(start / step) + 1


def auto_step(start: float, end: float) -> int:
    for s in NICE_STEPS:
        if buckets(start, end, s) <= AUTO_POINTS + 1:  # +1: a range off the bucket grid
            return s
    return math.ceil((end - start) / AUTO_POINTS)


def _no_control(what: str, s: str) -> None:
    # No real host or device name has them (line protocol cannot even carry a newline);
    # refusing them here keeps both stores' answers alike, as influxql's quoting refuses them.
    if any(ord(c) < 0x20 or c == "\x7f" for c in s):
        raise QueryError(f"{what} {s!r} contains a control character")


def build_query(entity: Entity, metrics: Sequence[str], *, start: float | None = None,
                end: float | None = None, step: int | None = None, rate: bool = False,
                agg: Agg | None = None, now: float) -> SeriesQuery:
    """Validate a request into a SeriesQuery. Defaults: the hour up to `now`, and a step that
    gives at most AUTO_POINTS buckets. Raises QueryError saying what was wrong."""
    for part in (entity.node, entity.unit, entity.sub):
        _no_control("entity", part)
    for name in metrics:
        _no_control("metric", name)
    if end is None:
        end = now if start is None or start < now else start + DEFAULT_RANGE_S
    if start is None:
        start = end - DEFAULT_RANGE_S
    if start >= end:
        raise QueryError(f"from ({start:g}) must be before to ({end:g})")
    names = list(dict.fromkeys(metrics)) or default_metrics(entity.scope)
    wanted = tuple(_wanted(entity.scope, n, rate, agg) for n in names)
    if rate and not any(w.origin is ValueOrigin.RATE for w in wanted):
        raise QueryError("rate=true applies to counters, and none of "
                         + ", ".join(names) + " is a counter")
    if step is None:
        step = auto_step(start, end)
    elif step < 1:
        raise QueryError(f"step must be a whole number of seconds >= 1, got {step}")
    n = buckets(start, end, step)
    if n > MAX_POINTS:
        least = math.ceil((end - start) / (MAX_POINTS - 1))
        raise QueryError(f"step {step}s gives {n} points per series over this range; at most "
                         f"{MAX_POINTS}: use step >= {least} or a shorter range")
    return SeriesQuery(canonical(entity), wanted, start, end, step)


def canonical(e: Entity) -> Entity:
    """`n1:gpu03` is `n1:gpu3`, as collectors.schema treats index tags."""
    if e.scope in (Scope.GPU, Scope.NVLINK):
        return Entity(e.scope, e.node, str(int(e.unit)), str(int(e.sub)) if e.sub else "")
    if e.scope is Scope.IB_PORT:
        return Entity(e.scope, e.node, e.unit, str(int(e.sub)))
    return e
