"""Where the shared state lives, and the base every shared-state store builds on.

A store is given a target: a path (or ":memory:") is the service's SQLite file, opened as
before (schema versions and migrations in service.storage.schema); a `postgresql://` URL is the
database replicas and shards share (`storage.postgres.dsn`). The store's SQL is the same on
both (service.storage.sql)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from service.storage.postgres_db import SCHEMA_TABLE, PostgresDatabase, is_postgres
from service.storage.schema import SchemaTooNew
from service.storage.sql import Database, SqliteDatabase
from service.storage.sqlite_db import open_db

# The shared state's layout on PostgreSQL. It starts at the SQLite file's current shape (no
# release wrote an older one there); a change to a store's tables raises this, with the step.
STATE_VERSION = 1

StateTarget = str | Path


def open_state(target: StateTarget, schema: str = "", *,
               connect_timeout_s: float = 5.0) -> Database:
    """The database behind `target`, its tables created when missing (`schema`: SQLite DDL)."""
    if is_postgres(target):
        db: Database = PostgresDatabase(str(target), connect_timeout_s=connect_timeout_s)
        try:
            _check_version(db)
            if schema:
                db.script(schema)
        except BaseException:
            db.close()
            raise
        return db
    return SqliteDatabase(open_db(target, schema))


def _check_version(db: Database) -> None:
    """Stamp a fresh database; refuse one a newer release laid out (its tables may mean what
    this code cannot know)."""
    with db.transaction():
        db.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (version BIGINT NOT NULL)")
        row = db.execute(f"SELECT max(version) FROM {SCHEMA_TABLE}").fetchone()
        found = row[0] if row else None
        if found is None:
            db.execute(f"INSERT INTO {SCHEMA_TABLE} (version) VALUES (?)", (STATE_VERSION,))
        elif int(found) > STATE_VERSION:
            raise SchemaTooNew(
                f"the shared state database is at layout {found}, newer than this release's "
                f"{STATE_VERSION}: upgrade gpuhealth on this replica, or point it elsewhere")


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
