"""One way to open the service's SQLite file: every store (alerts, notification log,
silences, actions, tokens, ...) keeps its own connection on the same file, shared between the
scoring thread, the sender and API worker threads behind the store's own lock."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from service.storage.schema import migrate, refuse_newer

BUSY_TIMEOUT_S = 30.0  # several connections write the one file; wait rather than fail


def open_db(path: str | Path, schema: str = "") -> sqlite3.Connection:
    """Autocommit (stores open their own transactions), WAL so readers never block the writer,
    the file brought to this release's schema version (service.storage.schema; a newer file is
    refused), and `schema` (CREATE ... IF NOT EXISTS statements) applied."""
    if str(path) != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None,
                         timeout=BUSY_TIMEOUT_S)
    try:
        refuse_newer(db, str(path))
        db.execute("PRAGMA journal_mode=WAL")
        migrate(db, str(path))
    except BaseException:
        db.close()
        raise
    if schema:
        db.executescript(schema)
    return db


class SqliteStore:
    """A store on the service's SQLite file: its own connection, and one lock that serialises
    the scoring thread, the sender and API worker threads."""

    def __init__(self, path: str | Path = ":memory:", schema: str = "") -> None:
        self._db = open_db(path, schema)
        self._lock: threading.Lock | threading.RLock = threading.Lock()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The store's lock and one write transaction: committed when the block ends, rolled
        back if it raises. IMMEDIATE: a deferred one cannot upgrade to a writer under WAL."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            self._db.close()
