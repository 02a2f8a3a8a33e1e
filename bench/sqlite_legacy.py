"""The SQLite sample writer and reader as they were before issue 18 (a row per entity and
sample), kept so bench/sqlite_sink.py times the old write path beside the new one and the tests
prove the new tables answer every history query as the old ones did."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import numpy as np

from collectors.catalog import CATALOG, Scope
from collectors.frames import EntityTable
from service.history.history import Agg, NotStored, SeriesOut, SeriesQuery, ValueOrigin, Wanted
from service.history.risk_history import read_buckets
from service.stages.ingest import IngestResult

_SQL_AGG = {Agg.MEAN: "AVG", Agg.MAX: "MAX", Agg.MIN: "MIN", Agg.COUNT: "COUNT"}
_SAMPLED = (Scope.GPU, Scope.NVLINK, Scope.IB_PORT)


def _col(name: str) -> str:
    # Metric names come from the catalog (validated by build_query); quoted all the same.
    return '"' + name.replace('"', '""') + '"'


def _bucketed(table: str, value: str, agg: Agg) -> str:
    """SQL giving (bucket, value) rows for one entity and range; params (step, entity, start,
    end). `last` uses SQLite's documented rule that a bare column beside MAX() comes from the
    row holding the maximum."""
    b = "CAST(ts / ? AS INTEGER)"
    where = f"entity = ? AND ts >= ? AND ts < ? AND {value} IS NOT NULL"
    if agg is Agg.LAST:
        return (f"SELECT b, v FROM (SELECT {b} AS b, {value} AS v, MAX(ts) FROM {table} "
                f"WHERE {where} GROUP BY b) ORDER BY b")
    return f"SELECT {b} AS b, {_SQL_AGG[agg]}({value}) FROM {table} WHERE {where} " \
           "GROUP BY b ORDER BY b"


def _rate_sql(table: str, col: str, agg: Agg, resets: bool) -> str:
    """Per-second rate between consecutive readings (the reading before `start` included, so
    the first bucket has its rate), bucketed; params (entity, start, entity, end, step,
    start). A drop of a counter that never resets is bad data: no rate, as ingest does."""
    on_drop = "v / (ts - pts)" if resets else "NULL"
    inner = (
        f"WITH s AS (SELECT ts, {col} AS v FROM {table} WHERE entity = ?1 AND {col} IS NOT NULL"
        f" AND ts >= COALESCE((SELECT MAX(ts) FROM {table} WHERE entity = ?1 AND {col} IS NOT"
        f" NULL AND ts < ?2), ?2) AND ts < ?3), "
        "p AS (SELECT ts, v, LAG(v) OVER w AS pv, LAG(ts) OVER w AS pts FROM s "
        "WINDOW w AS (ORDER BY ts)), "
        f"r AS (SELECT ts, CASE WHEN v >= pv THEN (v - pv) / (ts - pts) ELSE {on_drop} END "
        "AS v FROM p WHERE pv IS NOT NULL AND ts > pts AND ts >= ?2) ")
    b = "CAST(ts / ?4 AS INTEGER)"
    if agg is Agg.LAST:
        return inner + (f"SELECT b, v FROM (SELECT {b} AS b, v, MAX(ts) FROM r WHERE v IS NOT "
                        "NULL GROUP BY b) ORDER BY b")
    return inner + f"SELECT {b} AS b, {_SQL_AGG[agg]}(v) FROM r WHERE v IS NOT NULL " \
                   "GROUP BY b ORDER BY b"


class LegacySQLiteHistory:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection | None:
        if not self.path.exists():
            return None  # nothing stored yet
        # One short-lived read-only connection per question: no lock shared with the sink,
        # and threads of the API never share a connection.
        return sqlite3.connect(self.path.resolve().as_uri() + "?mode=ro", uri=True)

    def series(self, query: SeriesQuery) -> list[SeriesOut]:
        if query.scope not in _SAMPLED and any(w.origin is not ValueOrigin.RISK
                                               for w in query.metrics):
            raise NotStored("a node's own metrics are kept only in InfluxDB: set "
                            "storage.influxdb.url; the embedded SQLite store keeps a node's "
                            "risk and level")
        derived = [w.name for w in query.metrics if w.derived]
        if derived:
            raise NotStored(f"{', '.join(derived)}: derived at ingest and kept only in "
                            "InfluxDB; the SQLite store keeps what was measured")
        db = self._connect()
        out = [SeriesOut(w) for w in query.metrics]
        if db is None:
            return out
        try:
            for s in out:
                try:
                    rows = self._rows(db, query, s.metric)
                except sqlite3.OperationalError as exc:
                    if "no such table" in str(exc):  # history switched off, or not yet made
                        continue
                    raise
                for b, v in rows:
                    if v is not None:
                        s.times.append(float(b * query.step))
                        s.values.append(float(v))
        finally:
            db.close()
        return out

    @staticmethod
    def _rows(db: sqlite3.Connection, q: SeriesQuery, w: Wanted) -> list[tuple[int, float]]:
        if w.origin is ValueOrigin.RISK:
            return read_buckets(db, q, w)
        key, table = q.entity.key, f"{q.scope.value}_samples"
        if w.origin is ValueOrigin.EVENT:
            sql = ("SELECT CAST(ts / ? AS INTEGER) AS b, COUNT(*) FROM events WHERE entity = ? "
                   "AND metric = ? AND ts >= ? AND ts < ? GROUP BY b ORDER BY b")
            return db.execute(sql, (q.step, key, w.name, q.start, q.end)).fetchall()
        col = _col(w.name)
        if w.origin is ValueOrigin.RATE:
            return db.execute(_rate_sql(table, col, w.agg, w.resets),
                              (key, q.start, q.end, q.step)).fetchall()
        return db.execute(_bucketed(table, col, w.agg),
                          (q.step, key, q.start, q.end)).fetchall()


class LegacySQLiteSink:
    """The writer before issue 18: every row it is given, one row per entity and time (a
    resent one merges into the stored one), into a plain sqlite3 file of its own."""

    def __init__(self, path: str | Path) -> None:
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._lock = threading.Lock()
        self._insert: dict[Scope, str] = {}
        for scope in (Scope.GPU, Scope.NVLINK, Scope.IB_PORT):
            cols = [m.name for m in CATALOG.columns(scope)]
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {scope}_samples (ts REAL NOT NULL, entity TEXT NOT "
                f"NULL, node TEXT NOT NULL, {', '.join(c + ' REAL' for c in cols)})")
            self._db.execute(f"CREATE INDEX IF NOT EXISTS {scope}_by_entity ON {scope}_samples "
                             "(entity, ts)")
            self._unique(f"{scope}_samples")
            marks = ",".join("?" * (len(cols) + 3))
            merge = ", ".join(f"{c} = coalesce(excluded.{c}, {c})" for c in cols)
            self._insert[scope] = (f"INSERT INTO {scope}_samples VALUES ({marks}) "
                                   f"ON CONFLICT (entity, ts) DO UPDATE SET {merge}")
        self._db.execute("CREATE TABLE IF NOT EXISTS events (ts REAL NOT NULL, entity TEXT NOT "
                         "NULL, metric TEXT NOT NULL, value REAL NOT NULL)")
        # Collectors reuse one (immutable) entity table per topology: its keys are built once.
        self._names: dict[Scope, tuple[EntityTable, list[str], list[str]]] = {}

    def _unique(self, table: str) -> None:
        """One row per entity and time (a file written before this rule is reduced to its
        newest rows by service.storage.schema's version 1)."""
        self._db.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS {table}_point ON {table} "
                         "(entity, ts)")

    def _keys(self, scope: Scope, table: EntityTable) -> tuple[list[str], list[str]]:
        cached = self._names.get(scope)
        if cached is None or cached[0] is not table:
            cached = (table, [e.key for e in table.entities], [e.node for e in table.entities])
            self._names[scope] = cached
        return cached[1], cached[2]

    def write(self, result: IngestResult) -> None:
        batch = result.clean
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # a deferred one cannot upgrade under WAL
            for scope, f in batch.frames.items():
                keys, nodes = self._keys(scope, f.entities)
                vals = f.values.astype(object)
                vals[np.isnan(f.values)] = None
                rows = ((float(t), keys[r], nodes[r], *v)
                        for t, r, v in zip(f.ts, f.rows, vals.tolist(), strict=True))
                self._db.executemany(self._insert[scope], rows)
            ev = batch.events
            self._db.executemany("INSERT INTO events VALUES (?,?,?,?)",
                                 zip(ev.ts, ev.keys, ev.metrics, ev.values, strict=True))
            self._db.execute("COMMIT")

    def count(self, scope: Scope) -> int:
        with self._lock:
            row = self._db.execute(f"SELECT COUNT(*) FROM {scope}_samples").fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
