"""One way to open the service's SQLite file: the sample tables, risk history and (through
service.storage.state_db, when no PostgreSQL is configured) every shared-state store keep their
own connection on the same file, each behind its store's own lock."""

from __future__ import annotations

import sqlite3
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
