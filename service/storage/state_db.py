"""Where the shared state lives, and the base every shared-state store builds on.

A store is given a target: a path (or ":memory:") is the service's SQLite file, opened as
before (schema versions and migrations in service.storage.schema); a `postgresql://` URL is the
database replicas and shards share (`storage.postgres.dsn`), brought to this release's layout
when opened (service.storage.pg_schema). The store's SQL is the same on both
(service.storage.sql), and so is a change to its tables (service.storage.state_changes)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from service.storage.pg_schema import STATE_VERSION, migrate_state
from service.storage.postgres_db import PostgresDatabase, is_postgres
from service.storage.sql import Database, SqliteDatabase
from service.storage.sqlite_db import open_db

__all__ = ["STATE_VERSION", "StateStore", "StateTarget", "open_state"]

StateTarget = str | Path


def open_state(target: StateTarget, schema: str = "", *,
               connect_timeout_s: float = 5.0) -> Database:
    """The database behind `target` at this release's layout (a newer one is refused), its
    tables created when missing (`schema`: SQLite DDL)."""
    if is_postgres(target):
        db: Database = PostgresDatabase(str(target), connect_timeout_s=connect_timeout_s)
        try:
            migrate_state(db)
            if schema:
                db.script(schema)
        except BaseException:
            db.close()
            raise
        return db
    return SqliteDatabase(open_db(target, schema))


class StateStore:
    """A store on the shared state: its own connection, and one lock that serialises the
    scoring thread, the sender and API worker threads of this process (other processes are
    kept apart by the database: see Database.begin)."""

    def __init__(self, target: StateTarget = ":memory:", schema: str = "") -> None:
        self._db = open_state(target, schema)
        self._lock: threading.Lock | threading.RLock = threading.Lock()

    @property
    def dialect(self) -> str:
        return self._db.dialect

    @contextmanager
    def transaction(self) -> Iterator[Database]:
        """The store's lock and one write transaction: committed when the block ends, rolled
        back if it raises."""
        with self._lock, self._db.transaction() as db:
            yield db

    def ping(self) -> None:
        """A round trip to the database (readiness): raises when it cannot answer."""
        with self._lock:
            self._db.execute("SELECT 1").fetchone()

    def close(self) -> None:
        with self._lock:
            self._db.close()
