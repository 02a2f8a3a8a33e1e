"""Sinks: where accepted samples are kept for history. One verb, `write`, given what ingest
accepted (and the rates it derived). SQLite is the embedded default; the InfluxDB sink
(service/storage/influx/sink.py) speaks the v1 HTTP API (docs/influxdb.md)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

import numpy as np

from collectors.catalog import CATALOG, Scope
from collectors.frames import EntityTable
from service.stages.ingest import IngestResult
from service.storage.sqlite_db import open_db


class Sink(Protocol):
    def write(self, result: IngestResult) -> None: ...


class SQLiteSink:
    """One wide table per scope (a row per entity and time, a column per catalog metric) and
    one table of events: a 5-s round of a 32-GPU cluster is a few hundred rows, not thousands.
    A row written again for the same entity and time merges into the stored one, each value it
    carries replacing the stored value (InfluxDB's last write wins): a resent push never
    doubles a sample."""

    def __init__(self, path: str | Path) -> None:
        self._db = open_db(path)
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
