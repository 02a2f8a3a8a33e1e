"""History from the embedded SQLite store (service.history.sinks.SQLiteSink's tables), read
through a read-only connection of its own so the sink's write path is never blocked or touched.

The SQLite sink keeps samples (written change-only; service.history.samples_read rebuilds each
one) and events, not rates or derived gauges: rates are derived here with the ingest's rule (a
reset's increase is the new value); derived gauges (ib_ber) are NotStored. Risk and level come
from service.history.risk_history (one value a minute)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from service.history.history import NotStored, SeriesOut, SeriesQuery, ValueOrigin, Wanted
from service.history.risk_history import read_buckets
from service.history.samples_read import before, bucketed, rates, samples
from service.storage.samples_sqlite import SAMPLED


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
        if query.scope not in SAMPLED and any(w.origin is not ValueOrigin.RISK
                                              for w in query.metrics):
            raise NotStored(f"{query.scope} metrics are not kept in the embedded SQLite store")
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
        key = q.entity.key
        if w.origin is ValueOrigin.EVENT:
            sql = ("SELECT CAST(ts / ? AS INTEGER) AS b, COUNT(*) FROM events WHERE entity = ? "
                   "AND metric = ? AND ts >= ? AND ts < ? GROUP BY b ORDER BY b")
            return db.execute(sql, (q.step, key, w.name, q.start, q.end)).fetchall()
        got = samples(db, q.scope, key, q.entity.node, q.start, q.end, [w.name])
        points = [(ts, float(v[0])) for ts, v in got if v[0] is not None]
        if w.origin is ValueOrigin.RATE:
            first = before(db, q.scope, key, q.entity.node, q.start, w.name)
            readings = ([(first[0], float(first[1][0]))] if first and first[1][0] is not None
                        else []) + points
            return bucketed(rates(readings, q.start, w.resets), q.step, w.agg)
        return bucketed(points, q.step, w.agg)
