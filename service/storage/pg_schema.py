"""The shared state's layout version on PostgreSQL, and its forward migrations.

`gpuhealth_schema` holds the layout version. Layout 1 is the release before migrations (every
table as its store created it); each change of service.storage.state_changes.CHANGES, in
order, brings it one version forward. Whenever a replica opens the shared state, all pending
changes run in ONE transaction that holds the advisory lock every shared-state writer takes
(PostgresDatabase.begin: pg_advisory_xact_lock), with the version row updated in it: replicas
starting together apply each change once (the second waits for the lock, then finds the version
current), no writer sees half a migration, and a change that fails rolls everything back
(PostgreSQL's DDL is transactional), leaving the database as it was. A database at a newer
layout is refused before anything is written: its tables may mean what this code cannot know."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from service.storage.postgres_db import SCHEMA_TABLE, PostgresUnavailable
from service.storage.schema import MigrationFailed, SchemaTooNew
from service.storage.sql import Database
from service.storage.state_changes import CHANGES, StateChange

log = logging.getLogger(__name__)

FIRST = 1  # the layout of the release before migrations, and of a database with no version yet
STATE_VERSION = FIRST + len(CHANGES)


def version_of(db: Database) -> int | None:
    """The layout version recorded, None when there is none (a fresh database)."""
    if db.execute("SELECT to_regclass(?)", (SCHEMA_TABLE,)).fetchone()[0] is None:
        return None
    row = db.execute(f"SELECT max(version) FROM {SCHEMA_TABLE}").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def migrate_state(db: Database, changes: Sequence[StateChange] = CHANGES) -> int:
    """Bring the shared state on `db` to the newest layout; returns the version it had (a fresh
    database counts as FIRST: every change finds its table missing, and the stores create
    them in their current shape)."""
    newest = FIRST + len(changes)
    found = version_of(db)
    if found == newest:
        return found  # the common case: one read, no lock
    _refuse_newer(found, newest)
    with db.transaction():  # the writers' advisory lock: one replica migrates, the rest wait
        db.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (version BIGINT NOT NULL)")
        recorded = version_of(db)
        _refuse_newer(recorded, newest)
        found = FIRST if recorded is None else max(recorded, FIRST)
        for version, change in enumerate(changes[found - FIRST:], start=found + 1):
            log.info("upgrading the shared state to layout %d: %s", version, change.summary)
            try:
                change.apply(db)
            except PostgresUnavailable:
                raise
            except Exception as exc:
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise MigrationFailed(
                    f"the shared state database: migration to layout {version} "
                    f"({change.summary}) failed: {reason}; it was left at layout {found}, "
                    "unchanged") from exc
        if recorded != newest:
            db.execute(f"DELETE FROM {SCHEMA_TABLE}")
            db.execute(f"INSERT INTO {SCHEMA_TABLE} (version) VALUES (?)", (newest,))
    return found


def _refuse_newer(found: int | None, newest: int) -> None:
    if found is not None and found > newest:
        raise SchemaTooNew(
            f"the shared state database is at layout {found}, newer than this release's "
            f"{newest}: upgrade gpuhealth on this replica, or point it elsewhere")
