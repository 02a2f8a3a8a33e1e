"""Schema versions of the service's SQLite file: `PRAGMA user_version` says which layout the
file has, and MIGRATIONS, in order, bring an older file forward, all pending ones in one
transaction when the file is opened (service.storage.sqlite_db.open_db). A file written by a
newer release is refused instead of being half understood.

Who creates what: each store creates its own tables when they are missing (`CREATE ... IF NOT
EXISTS`, the current shape), so a fresh file needs no migration. A migration changes what an
older release left behind (a column, an index, rows) or adds a table that readers rely on before
any store has written. Changing a store's CREATE statement therefore needs a migration here that
does the same to an existing file; tests/storage/test_schema_versions.py fails until it exists
(an upgraded file must end with the same layout as a fresh one). A change to a shared-state
store's table is written once in service.storage.state_changes and listed here with
`Migration.of`: PostgreSQL runs the same change (service.storage.pg_schema).

Version 0 is the release before versions (every table as its stores created it).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from collectors.catalog import Scope
from service.errors import GpuhealthError
from service.storage.sql import SqliteDatabase
from service.storage.state_changes import StateChange

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Migration:
    version: int  # the file's user_version once this has run
    summary: str
    apply: Callable[[sqlite3.Connection], None]  # runs inside the caller's transaction
    change: StateChange | None = None  # a shared-state change PostgreSQL runs too

    @classmethod
    def of(cls, version: int, change: StateChange) -> Migration:
        """A shared-state store's change, at this file's `version`."""
        return cls(version, change.summary, lambda db: change.apply(SqliteDatabase(db)), change)


class SchemaError(GpuhealthError):
    """The file cannot be used at this release's schema version (the CLI says so and exits)."""


class SchemaTooNew(SchemaError):
    """The file was written by a newer release: its tables may mean what this code cannot
    know, so nothing is read or written."""

    status, slug, title = 500, "schema-too-new", "Database written by a newer release"


class MigrationFailed(SchemaError):
    status, slug, title = 500, "migration-failed", "Database upgrade failed"


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _v1_one_row_per_sample(db: sqlite3.Connection) -> None:
    """Sample tables written before the unique (entity, ts) index could hold a point twice (a
    resent push): the newest row of each stays, then the index makes it a rule."""
    for table in sorted(t for t in _tables(db) if t.endswith("_samples")):
        db.execute(f"DELETE FROM {table} WHERE rowid NOT IN "
                   f"(SELECT max(rowid) FROM {table} GROUP BY entity, ts)")
        db.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS {table}_point ON {table} (entity, ts)")


RISK_HISTORY_SQL = """
CREATE TABLE IF NOT EXISTS risk_history (
    scope TEXT NOT NULL,      -- gpu, nvlink, ib_port, node (the InfluxDB `risk` tags)
    entity TEXT NOT NULL,     -- entity key: n1:gpu3, n1:gpu3:nvlink7, n1:mlx5_0:1, n1
    ts REAL NOT NULL,         -- start of the minute (service.history.risk_history.RES_S)
    risk REAL NOT NULL,       -- the minute's highest risk
    level INTEGER NOT NULL,   -- the minute's highest alert level
    PRIMARY KEY (scope, entity, ts)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS risk_history_ts ON risk_history (ts);
"""


def _v2_risk_history(db: sqlite3.Connection) -> None:
    for statement in RISK_HISTORY_SQL.split(";"):
        if statement.strip():
            db.execute(statement)


def _v3_change_only_samples(db: sqlite3.Connection) -> None:
    """Sample tables written change-only with packed values (service.storage.samples_sqlite):
    a row per entity and time that changed, its entity an id in `{scope}_entities`, its values
    one BLOB. The wide rows of older files (one per sample: they fill no other round) are
    rewritten in chunks, each value kept bit for bit; columns the catalog no longer has go."""
    from service.storage import sample_codec, samples_sqlite  # the tables' own definitions

    for scope in ("gpu", "nvlink", "ib_port"):
        table, old = f"{scope}_samples", f"{scope}_samples_v2"
        if table not in _tables(db):
            continue
        have = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        for (index,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND "
                                   "tbl_name = ? AND sql IS NOT NULL", (table,)).fetchall():
            db.execute(f'DROP INDEX "{index}"')
        db.execute(f"ALTER TABLE {table} RENAME TO {old}")
        for sql in samples_sqlite.create_sql(Scope(scope)):
            db.execute(sql)
        names = samples_sqlite.layout(db, Scope(scope))
        metrics = [c for c in have if c in names]
        pos = [names.index(c) for c in metrics]
        db.execute(f"INSERT INTO {scope}_entities (entity, node) SELECT entity, MIN(node) "
                   f"FROM {old} GROUP BY entity ORDER BY entity")
        picked = ", ".join(f'o."{c}"' for c in metrics)
        cur = db.execute(f"SELECT e.id, o.ts{', ' if metrics else ''}{picked} FROM {old} o "
                         f"JOIN {scope}_entities e ON e.entity = o.entity ORDER BY o.rowid")
        while chunk := cur.fetchmany(50_000):
            vals = np.full((len(chunk), len(names)), np.nan)
            vals[:, pos] = np.array([r[2:] for r in chunk], np.float64).reshape(
                len(chunk), len(metrics))  # NULL reads as NaN: missing
            db.executemany(f"INSERT INTO {table} VALUES (?, ?, ?, NULL, 0, ?)",
                           zip([samples_sqlite.bucket(r[1]) for r in chunk],
                               [r[0] for r in chunk], [r[1] for r in chunk],
                               sample_codec.encode(vals), strict=True))
        db.execute(f"DROP TABLE {old}")
        db.execute(f"DROP INDEX IF EXISTS {scope}_by_entity")


# The alerts' columns added after the first release, as the alert store declared them. Each
# file of a release before this migration had them added by the store itself at every open; a
# PostgreSQL shared state never lacked them (none was written before they existed).
_V4_ALERT_COLUMNS = (
    ("alertname", "TEXT NOT NULL DEFAULT ''"), ("flapping", "INTEGER NOT NULL DEFAULT 0"),
    ("stale", "INTEGER NOT NULL DEFAULT 0"), ("corroborated", "INTEGER NOT NULL DEFAULT 0"),
    ("acked_by", "TEXT"), ("acked_at", "REAL"), ("ack_comment", "TEXT"))


def _v4_alert_columns(db: sqlite3.Connection) -> None:
    """Alerts of the first release's files gain the columns added since, where missing."""
    if "alerts" not in _tables(db):
        return
    have = {r[1] for r in db.execute("PRAGMA table_info(alerts)")}
    for col, decl in _V4_ALERT_COLUMNS:
        if col not in have:
            db.execute(f"ALTER TABLE alerts ADD COLUMN {col} {decl}")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "sample tables keep one row per entity and time", _v1_one_row_per_sample),
    Migration(2, "risk and alert level history (risk_history)", _v2_risk_history),
    Migration(3, "sample tables written change-only, values packed", _v3_change_only_samples),
    Migration(4, "alerts carry their name, flags and acknowledgement (first-release files)",
              _v4_alert_columns),
)
CURRENT = MIGRATIONS[-1].version


def version_of(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def refuse_newer(db: sqlite3.Connection, where: str = "") -> None:
    """Before anything touches the file (even turning WAL on rewrites its header)."""
    found = version_of(db)
    if found > CURRENT:
        raise SchemaTooNew(_too_new(where, found, CURRENT))


def _check(migrations: Sequence[Migration]) -> None:
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"migrations must be numbered 1, 2, ... in order, got {versions}")


def migrate(db: sqlite3.Connection, where: str = "",
            migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Bring the file on `db` (an autocommit connection) to the newest version; returns the
    version it had. `where` names the file in messages."""
    _check(migrations)
    newest = migrations[-1].version if migrations else 0
    found = version_of(db)
    if found == newest:
        return found  # the common case: one read, no lock
    if found > newest:
        raise SchemaTooNew(_too_new(where, found, newest))
    # IMMEDIATE: two processes (or two stores) opening one old file migrate it once; the
    # second waits here, then finds the version already current.
    db.execute("BEGIN IMMEDIATE")
    try:
        found = version_of(db)
        if found > newest:
            raise SchemaTooNew(_too_new(where, found, newest))
        for m in migrations:
            if m.version > found:
                log.info("upgrading %s to schema version %d: %s", where or "database",
                         m.version, m.summary)
                try:
                    m.apply(db)
                except sqlite3.Error as exc:
                    raise MigrationFailed(
                        f"{where or 'database'}: migration to schema version {m.version} "
                        f"({m.summary}) failed: {exc}; the file was left at version {found}, "
                        "unchanged") from exc
        db.execute(f"PRAGMA user_version = {int(newest)}")  # transactional: the file header
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return found


def _too_new(where: str, found: int, newest: int) -> str:
    return (f"{where or 'database'} has schema version {found}, and this gpuhealth knows "
            f"versions up to {newest}: it was written by a newer release. Run that release (or "
            "newer) on it, or point storage.data_dir at another directory; this release will "
            "not read or change it.")
