"""Sinks: where accepted samples are kept for history. One verb, `write`, given what ingest
accepted (and the rates it derived). SQLite is the embedded default; the InfluxDB sink
(service/history/influx/sink.py) speaks the v1 HTTP API (docs/influxdb.md)."""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
from pathlib import Path
from typing import Protocol

import numpy as np

from collectors.catalog import Scope
from service.stages.ingest import IngestResult
from service.storage.samples_sqlite import (
    HEARTBEAT_S,
    SAMPLED,
    Rows,
    ScopeState,
    create_sql,
    register,
    write_rows,
)
from service.storage.sqlite_db import open_db

log = logging.getLogger(__name__)

PRUNE_EVERY_S = 60.0  # wall seconds between the pruning thread's passes
PRUNE_BATCH = 5000  # rows a pruning transaction deletes at most


class Sink(Protocol):
    def write(self, result: IngestResult) -> None: ...


class SQLiteSink:
    """A table of sample rows per scope (an entity's values at a time, packed in one BLOB) and
    one table of events, written change-only (service.storage.samples_sqlite says how the
    reader rebuilds every sample): a 10,000-GPU round writes the rows that moved, not 200,000.
    A sample resent for the same entity and time merges into the stored one, each value it
    carries replacing the stored value (InfluxDB's last write wins): it never doubles.

    Rows older than `retention_s` (from the newest sample time seen; sample rows HEARTBEAT_S
    older, as they stand for the samples after them) are deleted by
    `prune`, in batches of PRUNE_BATCH rows each its own short transaction; a background
    thread calls it every PRUNE_EVERY_S, so a round's write never carries the deletes."""

    def __init__(self, path: str | Path, retention_s: float = 0.0,
                 background: bool = True) -> None:
        self._db = open_db(path)
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._lock = threading.Lock()
        self.retention_s = retention_s
        register(self._db)
        for scope in SAMPLED:
            for sql in create_sql(scope):
                self._db.execute(sql)
        self._state = {s: ScopeState(s, self._db) for s in SAMPLED}
        self._db.execute("CREATE TABLE IF NOT EXISTS events (ts REAL NOT NULL, entity TEXT NOT "
                         "NULL, metric TEXT NOT NULL, value REAL NOT NULL)")
        self.newest = -math.inf
        self.rows_written = 0
        self._stop = threading.Event()
        self._pruner: threading.Thread | None = None
        if background and retention_s > 0:
            self._pruner = threading.Thread(target=self._prune_loop, name="sqlite-prune",
                                            daemon=True)
            self._pruner.start()

    def write(self, result: IngestResult) -> None:
        batch = result.clean
        with self._lock:
            planned = [(scope, self._state[scope].plan(f)) for scope, f in batch.frames.items()
                       if scope in self._state]
            self._db.execute("BEGIN IMMEDIATE")  # a deferred one cannot upgrade under WAL
            try:
                for scope, rows in planned:
                    write_rows(self._db, scope, rows)
                    self.rows_written += len(rows.samples) + len(rows.late)
                ev = batch.events
                self._db.executemany("INSERT INTO events VALUES (?,?,?,?)",
                                     zip(ev.ts, ev.keys, ev.metrics, ev.values, strict=True))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")  # new entities' rows stay unsaved: written next
                raise
            for st in self._state.values():
                st.unsaved.clear()
            for f in batch.frames.values():
                if len(f.ts):
                    self.newest = max(self.newest, float(np.max(f.ts)))

    def count(self, scope: Scope) -> int:
        """Rows written for a scope (the samples they stand for are more)."""
        with self._lock:
            row = self._db.execute(f"SELECT COUNT(*) FROM {scope}_samples").fetchone()
        return int(row[0])

    def prune(self, now: float | None = None) -> int:
        """Delete rows older than the retention, PRUNE_BATCH at a time; returns how many."""
        if self.retention_s <= 0:
            return 0
        cutoff = (self.newest if now is None else now) - self.retention_s
        if not math.isfinite(cutoff):
            return 0
        # A change-only row stands for its entity's samples up to HEARTBEAT_S after it (and
        # needs its node's rounds there): those written that long before the cutoff stay.
        tables = [(f"{s}_{k}", cutoff - HEARTBEAT_S) for s in SAMPLED for k in ("samples",
                                                                               "rounds")]
        tables += [(f"{s}_late", cutoff) for s in SAMPLED] + [("events", cutoff)]
        done = 0
        for table, upto in tables:
            while not self._stop.is_set():
                with self._lock:
                    n = prune_batch(self._db, table, upto, PRUNE_BATCH)
                done += n
                if n < PRUNE_BATCH:
                    break
        return done

    def _prune_loop(self) -> None:
        while not self._stop.wait(PRUNE_EVERY_S):
            try:
                self.prune()
            except sqlite3.Error as exc:  # history is a convenience: ingest goes on
                log.warning("sample retention: pruning failed: %s", exc)

    def close(self) -> None:
        self._stop.set()
        if self._pruner is not None:
            self._pruner.join(timeout=5)
        with self._lock:
            rows: list[tuple[Scope, Rows]] = []
            for scope, st in self._state.items():
                r = Rows([], [], [], st.unsaved)  # ids a failed write left unsaved
                st.close_all(r)
                rows.append((scope, r))
            try:
                self._db.execute("BEGIN IMMEDIATE")
                for scope, r in rows:
                    write_rows(self._db, scope, r)
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                log.warning("sample history: closing rows not written: %s", exc)
            self._db.close()


def prune_batch(db: sqlite3.Connection, table: str, cutoff: float, limit: int) -> int:
    """Rows are appended in time order, so the oldest are the first rowids: everything before
    the first row at or after the cutoff goes, `limit` rows at a time (no index on ts)."""
    first = db.execute(f"SELECT rowid FROM {table} WHERE ts >= ? ORDER BY rowid LIMIT 1",
                       (cutoff,)).fetchone()
    below = "" if first is None else f"WHERE rowid < {int(first[0])} "
    cur = db.execute(f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} {below}"
                     f"ORDER BY rowid LIMIT {int(limit)})")
    return int(cur.rowcount)
