"""History from the embedded SQLite store (service.stages.sinks.SQLiteSink's tables), read through a
read-only connection of its own so the sink's write path is never blocked or touched.

The SQLite sink keeps samples and events, not rates or derived gauges: rates are derived here
with the ingest's rule (a reset's increase is the new value); derived gauges (ib_ber) and a
node's own metrics are NotStored. Risk and level come from service.storage.risk_history (one
value a minute)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from collectors.catalog import Scope
from service.storage.history import Agg, NotStored, SeriesOut, SeriesQuery, ValueOrigin, Wanted
from service.storage.risk_history import read_buckets

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


class SQLiteHistory:
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
