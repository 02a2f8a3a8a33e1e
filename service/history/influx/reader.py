"""Reading back from InfluxDB: History (bucketed series of one entity, for the API) and raw
samples and events of a cluster in time chunks (for `gpuhealth export`).

Every name and value reaches InfluxQL through service.history.influx.influxql; entity names come
from URLs and tag values from the network, so none is ever pasted into a query as it is."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace

import numpy as np

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, EventFrame, Frame
from service.history.history import (
    Agg,
    HistoryUnavailable,
    QueryError,
    SeriesOut,
    SeriesQuery,
    ValueOrigin,
    Wanted,
)
from service.history.influx.client import InfluxClient, InfluxError, Series
from service.history.influx.influxql import duration, ident, parse_duration, string, time_ns
from service.history.influx.lines import ENTITY_TAGS, EVENT_FIELD, RATE_SUFFIX, entity_tags
from service.history.influx.links import LOOKBACK_S, bucket, fill, mask_query, read_masks
from service.history.influx.schema import ROLLED_UP, ROLLUP_EVERY_S, ROLLUP_RP
from service.history.influx.settings import InfluxSettings

RISK_MEASUREMENT = "risk"
_NUMERIC_TAGS = frozenset(("gpu", "link", "port"))


def _missing_db(exc: InfluxError) -> bool:
    # Nothing written yet: the sink creates the database with its first delivery.
    return "database not found" in str(exc)


def _series(client: InfluxClient, statement: str, epoch: str) -> list[Series]:
    """The series of one statement; none from a database not yet written to."""
    try:
        results = client.query(statement, epoch=epoch)
    except InfluxError as exc:
        if _missing_db(exc):
            return []
        raise
    return results[0] if results else []


class InfluxHistory:
    """Bucketed series from the raw policy; with `raw_keep_s` (the raw retention, when the
    rollup policy exists), the part of a range older than raw retention is read from the
    5-minute rollups instead, so a 90-day chart still has its first 76 days."""

    def __init__(self, client: InfluxClient, cluster: str, *, raw_keep_s: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.cluster = cluster
        self.raw_keep_s = raw_keep_s
        self.clock = clock

    @classmethod
    def from_settings(cls, cfg: InfluxSettings) -> InfluxHistory:
        # Rollups exist where gpuhealth manages the schema (1.x); elsewhere raw only.
        keep = parse_duration(cfg.raw_retention) if cfg.manage_schema else None
        return cls(InfluxClient(cfg), cfg.cluster, raw_keep_s=keep)

    def series(self, query: SeriesQuery) -> list[SeriesOut]:
        out = [SeriesOut(w) for w in query.metrics]
        split = self._rollup_until(query)
        if split is None:
            self._read(query, out, rollup=False)
            return out
        # Whole buckets before `split` from the rollups, the rest from raw; an aggregation the
        # rollups do not keep (min, last, counts) is read from raw over the whole range.
        old = replace(query, end=split)
        rolled = [s for s in out if _rolled(query.scope, s.metric)]
        self._read(old, rolled, rollup=True)
        if split < query.end:
            self._read(replace(query, start=split), rolled, rollup=False)
        rest = [s for s in out if not _rolled(query.scope, s.metric)]
        if rest:
            self._read(query, rest, rollup=False)
        return out

    def _rollup_until(self, q: SeriesQuery) -> float | None:
        """Where raw data begins, on the query's bucket grid; None: raw covers the range."""
        if self.raw_keep_s is None or q.step % ROLLUP_EVERY_S:
            return None
        horizon = self.clock() - self.raw_keep_s
        if q.start >= horizon:
            return None
        return min(q.end, math.ceil(horizon / q.step) * q.step)

    def _read(self, query: SeriesQuery, outs: Sequence[SeriesOut], *, rollup: bool) -> None:
        if not rollup and query.scope is Scope.NVLINK:
            links = [s for s in outs if s.metric.origin in (ValueOrigin.SAMPLE, ValueOrigin.RATE)]
            for m in {self._measurement(query.scope, s.metric) for s in links}:
                self._read_link(query, m, [s for s in links
                                           if self._measurement(query.scope, s.metric) == m])
            outs = [s for s in outs if s not in links]
        groups: dict[str, list[SeriesOut]] = {}
        for s in outs:
            groups.setdefault(self._measurement(query.scope, s.metric), []).append(s)
        try:
            statements = [self._select(query, m, [s.metric for s in ss], rollup)
                          for m, ss in groups.items()]
        except ValueError as exc:  # influxql refused a name: nothing stored can have it
            raise QueryError(str(exc)) from None
        # One statement per request: InfluxDB 1.x answers a multi-statement query on a missing
        # database with a bare "not executed", which could not be told from a real failure.
        for ss, stmt in zip(groups.values(), statements, strict=True):
            for series in self._query(stmt):
                _fill(ss, series)

    def _read_link(self, q: SeriesQuery, measurement: str, outs: Sequence[SeriesOut]) -> None:
        """A link's rows, the rounds the sink did not write filled in, bucketed here (InfluxDB
        would aggregate the stored points only)."""
        e = q.entity
        try:
            fields = ", ".join(ident(s.metric.name) for s in outs)
            tags = " AND ".join(f"{ident(k)} = {string(v)}" for k, v in entity_tags(e).items())
        except ValueError as exc:
            raise QueryError(str(exc)) from None
        cluster = f"{ident('cluster')} = {string(self.cluster)}"
        a, b = round(q.start * 1e9), round(q.end * 1e9)
        stored = self._query(f"SELECT {fields} FROM {ident(measurement)} WHERE {cluster} AND "
                             f"{tags} AND time >= {a - round(LOOKBACK_S * 1e9)} AND time < {b} "
                             f"GROUP BY *", "ns")
        masks = read_masks(self._query(mask_query(
            f"{cluster} AND time >= {a} AND time < {b}", e.node, e.unit), "ns"))
        rows = fill(stored, masks, a)
        for s in outs:
            for t, v in bucket(rows, s.metric.name, s.metric.agg.value, round(q.step * 1e9)):
                s.times.append(t / 1e9)
                s.values.append(v)

    def _query(self, statement: str, epoch: str = "s") -> list[Series]:
        try:
            return _series(self.client, statement, epoch)
        except InfluxError as exc:
            raise HistoryUnavailable(f"InfluxDB could not answer: {exc}") from None

    @staticmethod
    def _measurement(scope: Scope, w: Wanted) -> str:
        if w.origin is ValueOrigin.RISK:
            return RISK_MEASUREMENT
        if w.origin is ValueOrigin.EVENT:
            return w.name
        return scope.value + (RATE_SUFFIX if w.origin is ValueOrigin.RATE else "")

    def _select(self, q: SeriesQuery, measurement: str, metrics: Sequence[Wanted],
                rollup: bool = False) -> str:
        fields = ", ".join((_rollup_expr(w) if rollup else _expr(w)) + " AS " + ident(w.name)
                           for w in metrics)
        source = ident(measurement)
        if rollup:
            source = f"{ident(self.client.cfg.database)}.{ident(ROLLUP_RP)}.{source}"
        if measurement == RISK_MEASUREMENT:
            tags = {"scope": q.scope.value, "entity": q.entity.key}
        else:
            tags = entity_tags(q.entity)
        cond = " AND ".join([f"{ident('cluster')} = {string(self.cluster)}",
                             *(f"{ident(k)} = {string(v)}" for k, v in tags.items()),
                             f"time >= {time_ns(q.start)}", f"time < {time_ns(q.end)}"])
        return (f"SELECT {fields} FROM {source} WHERE {cond} "
                f"GROUP BY time({duration(q.step)}) fill(none)")

    def close(self) -> None:
        self.client.close()


def _expr(w: Wanted) -> str:
    if w.origin is ValueOrigin.EVENT:
        return f"count({ident(EVENT_FIELD)})"
    return f"{w.agg.value}({ident(w.name)})"  # Agg values are InfluxQL function names


def _rolled(scope: Scope, w: Wanted) -> bool:
    """Whether the rollups keep this aggregation of this metric (mean and max, not events)."""
    # A link's stored points are its changes (and heartbeats), whose mean is not the mean of
    # its rounds: its means are read from raw, where they are filled in (the max is the same).
    return (w.agg in (Agg.MEAN, Agg.MAX) and w.origin is not ValueOrigin.EVENT
            and InfluxHistory._measurement(scope, w) in ROLLED_UP
            and not (scope is Scope.NVLINK and w.agg is Agg.MEAN))


def _rollup_expr(w: Wanted) -> str:
    # The continuous query names its fields mean_<field> and max_<field>; a bucket of whole
    # 5-minute rollups is the mean of their means (equal sample counts) or the max of maxes.
    return f"{w.agg.value}({ident(w.agg.value + '_' + w.name)})"


def _fill(outs: Sequence[SeriesOut], series: Series) -> None:
    cols = {c: i for i, c in enumerate(series.columns)}
    t = cols["time"]
    for s in outs:
        j = cols.get(s.metric.name)
        if j is None:
            continue
        for row in series.values:
            v = row[j]
            if isinstance(v, int | float) and not isinstance(v, bool):
                s.times.append(float(row[t]))
                s.values.append(float(v))



# ---- raw export -------------------------------------------------------------------------------

class RawReader:
    """Samples and events of one cluster as Batches in time order, one chunk of time per
    request, so memory is bounded by a chunk however long the range."""

    def __init__(self, client: InfluxClient, cluster: str) -> None:
        self.client = client
        self.cluster = cluster
        self.skipped = 0  # points whose tags name no entity of our schema

    def batches(self, start: float, end: float, scopes: Iterable[Scope],
                chunk_s: float = 600.0) -> Iterator[tuple[float, float, Batch]]:
        if not (math.isfinite(chunk_s) and chunk_s > 0):
            raise ValueError(f"chunk_s must be positive, got {chunk_s!r}")
        scopes = list(scopes)
        n = max(1, math.ceil((end - start) / chunk_s))
        # Each edge is formatted once, so chunk k ends exactly where chunk k+1 begins.
        edges = [start + k * chunk_s for k in range(n)] + [end]
        for a, b in itertools.pairwise(edges):
            if a < b:
                yield a, b, self.chunk(time_ns(a), time_ns(b), scopes)

    def chunk(self, a_ns: str, b_ns: str, scopes: Sequence[Scope]) -> Batch:
        cond = (f"{ident('cluster')} = {string(self.cluster)} AND time >= {a_ns} "
                f"AND time < {b_ns}")
        plan: list[tuple[Scope, str | None]] = []
        statements = []
        for scope in scopes:
            plan.append((scope, None))
            statements.append(f"SELECT * FROM {ident(scope.value)} WHERE {cond} GROUP BY *")
            for ev in CATALOG.events(scope):
                plan.append((scope, ev.name))
                statements.append(f"SELECT {ident(EVENT_FIELD)} FROM {ident(ev.name)} "
                                  f"WHERE {cond} GROUP BY *")
        batch = Batch()
        for (scope, event), stmt in zip(plan, statements, strict=True):
            if scope is Scope.NVLINK and event is None:
                result = self.links(cond, int(a_ns), int(b_ns))
            else:
                result = self._query(stmt)
            if event is None:
                frame = self._frame(scope, result)
                if frame is not None:
                    batch.add(frame)
            else:
                self._events(scope, event, result, batch.events)
        return batch

    def _query(self, statement: str) -> list[Series]:
        return _series(self.client, statement, "ns")

    def links(self, cond: str, a: int, b: int, where: str = "") -> list[Series]:
        """NVLink series of [a, b) (ns) with the rounds the sink did not write filled in;
        `where`: a further condition on the stored links (` AND ...`), as `cond` has."""
        since = f"{ident('cluster')} = {string(self.cluster)} AND time >= " \
                f"{a - round(LOOKBACK_S * 1e9)} AND time < {b}{where}"
        stored = self._query(f"SELECT * FROM {ident(Scope.NVLINK.value)} WHERE {since} GROUP BY *")
        return fill(stored, read_masks(self._query(mask_query(cond))), a)

    def _entity(self, scope: Scope, tags: dict[str, str], points: int) -> Entity | None:
        names = [tags.get(t, "") for t in ENTITY_TAGS[scope]]
        ok = all(names) and not any(":" in v for v in names) and all(
            (v.isascii() and v.isdigit()) for t, v in zip(ENTITY_TAGS[scope], names, strict=True)
            if t in _NUMERIC_TAGS)
        if not ok:
            self.skipped += points
            return None
        try:
            return Entity(scope, *names)
        except ValueError:  # stored before names were checked at ingest: never an entity now
            self.skipped += points
            return None

    def _frame(self, scope: Scope, result: list[Series]) -> Frame | None:
        cols = {m.name: j for j, m in enumerate(CATALOG.columns(scope))}
        width = len(cols)
        slots: dict[Entity, int] = {}
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for s in result:
            e = self._entity(scope, s.tags, len(s.values))
            if e is None or not s.values:
                continue
            take = [(i, cols[c]) for i, c in enumerate(s.columns) if c in cols]
            t = s.columns.index("time")
            vals = np.full((len(s.values), width), np.nan)
            if take:
                src, dst = zip(*take, strict=True)
                # dtype=float turns InfluxDB's nulls (fields a point did not carry) into NaN.
                vals[:, list(dst)] = np.array([[row[i] for i in src] for row in s.values],
                                              dtype=float)
            ts = np.array([row[t] for row in s.values], dtype=np.int64) / 1e9
            some = ~np.isnan(vals).all(axis=1)  # a GPU point with only its NVLink mask: no row
            if not some.any():
                continue
            vals, ts = vals[some], ts[some]
            slot = slots.setdefault(e, len(slots))
            parts.append((np.full(len(ts), slot, np.int32), ts, vals))
        if not parts:
            return None
        rows = np.concatenate([p[0] for p in parts])
        ts = np.concatenate([p[1] for p in parts])
        vals = np.concatenate([p[2] for p in parts])
        order = np.lexsort((rows, ts))  # time order, entity order within a time
        return Frame(EntityTable(scope, slots), rows[order], ts[order], vals[order])

    def _events(self, scope: Scope, metric: str, result: list[Series], into: EventFrame) -> None:
        found: list[tuple[int, str, float]] = []
        for s in result:
            e = self._entity(scope, s.tags, len(s.values))
            if e is None:
                continue
            t, c = s.columns.index("time"), s.columns.index(EVENT_FIELD)
            found += [(row[t], e.key, float(row[c])) for row in s.values
                      if isinstance(row[c], int | float)]
        for t_ns, key, code in sorted(found):
            into.add(key, t_ns / 1e9, metric, code)

    def close(self) -> None:
        self.client.close()
