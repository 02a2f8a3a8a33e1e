"""Forward migrations of the shared state on a real PostgreSQL: a database the previous release
laid out (the committed dump previous_release_pg.sql) is upgraded with its rows kept and ends
with the layout of a fresh one; replicas opening it together apply each change once; a database
at a newer layout is refused untouched; a migration that fails leaves it as it was. And the
SQLite file and PostgreSQL run the same list of shared-state changes."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from service.remediation.actions import ActionStore
from service.storage.pg_schema import FIRST, STATE_VERSION, migrate_state, version_of
from service.storage.postgres_db import PostgresDatabase
from service.storage.schema import (
    CURRENT,
    MIGRATIONS,
    Migration,
    MigrationFailed,
    SchemaTooNew,
    migrate,
)
from service.storage.schema import version_of as sqlite_version_of
from service.storage.sql import Database
from service.storage.state_changes import CHANGES, StateChange
from tests.storage.state_stores import OPENED, open_every_state_store, state_store_classes
from tests.storage.test_schema_versions import previous_release as sqlite_release

DUMP = Path(__file__).with_name("previous_release_pg.sql")


def _conn(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


def previous_release(dsn: str) -> str:
    with _conn(dsn) as conn:
        conn.execute(DUMP.read_text())  # no parameters: the statements run as one script
    return dsn


def rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with _conn(dsn) as conn:
        return [tuple(r) for r in conn.execute(sql)]


def tables(dsn: str) -> list[str]:
    return [r[0] for r in rows(dsn, "SELECT table_name FROM information_schema.tables WHERE "
                                    "table_schema = current_schema() ORDER BY 1")]


def contents(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    return {t: sorted(rows(dsn, f"SELECT * FROM {t}"), key=repr) for t in tables(dsn)}


def layout(dsn: str) -> dict[str, object]:
    """Columns (order aside: an added column comes last), indexes, constraints, triggers and
    functions of the DSN's schema, with the schema's own name taken out."""
    with _conn(dsn) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()[0]

        def q(sql: str) -> list[tuple[Any, ...]]:
            return sorted(tuple(str(v).replace(f"{schema}.", "") for v in r)
                          for r in conn.execute(sql, (schema,)))

        return {
            "columns": q("SELECT table_name, column_name, data_type, is_nullable, "
                         "column_default, is_identity, identity_generation "
                         "FROM information_schema.columns WHERE table_schema = %s"),
            "indexes": q("SELECT tablename, indexname, indexdef FROM pg_indexes "
                         "WHERE schemaname = %s"),
            "constraints": q("SELECT c.relname, k.conname, pg_get_constraintdef(k.oid) "
                             "FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid "
                             "JOIN pg_namespace n ON n.oid = c.relnamespace "
                             "WHERE n.nspname = %s"),
            "triggers": q("SELECT event_object_table, trigger_name, event_manipulation, "
                          "action_timing, action_statement FROM information_schema.triggers "
                          "WHERE trigger_schema = %s"),
            "functions": q("SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n "
                           "ON n.oid = p.pronamespace WHERE n.nspname = %s"),
        }


def test_sqlite_and_postgres_run_the_same_shared_state_changes() -> None:
    """A change to a store's table is written once (state_changes) and listed in both: the
    SQLite file's migrations name each, in the same order, and PostgreSQL's layout counts them."""
    assert [m.change for m in MIGRATIONS if m.change is not None] == list(CHANGES)
    assert FIRST + len(CHANGES) == STATE_VERSION
    assert len({c.summary for c in CHANGES}) == len(CHANGES)


def test_every_shared_state_store_is_in_the_layout_checks() -> None:
    """The upgrade tests compare what every store creates: a new store must be opened there."""
    assert state_store_classes() == set(OPENED)


def test_the_previous_release_is_upgraded_with_its_rows(postgres_server: Any) -> None:
    old = previous_release(postgres_server.fresh_schema())
    assert rows(old, "SELECT version FROM gpuhealth_schema") == [(FIRST,)]
    assert "audit_node_event" not in str(layout(old)["indexes"])
    before = contents(old)
    assert all(before[t] for t in ("alerts", "alert_events", "actions", "audit", "nflog",
                                   "deliveries", "labels", "api_tokens", "silences"))
    open_every_state_store(old)
    assert rows(old, "SELECT version FROM gpuhealth_schema") == [(STATE_VERSION,)]
    after = contents(old)
    del before["gpuhealth_schema"], after["gpuhealth_schema"]
    # Every row kept, none added (the stores' seed rows were there); a store newer than the
    # dump creates its table empty.
    assert {t: r for t, r in after.items() if r or t in before} == before
    fresh = postgres_server.fresh_schema()
    open_every_state_store(fresh)
    assert rows(fresh, "SELECT version FROM gpuhealth_schema") == [(STATE_VERSION,)]
    # A store whose CREATE changed without a change in state_changes fails here.
    assert layout(old) == layout(fresh)
    # The audit index the repeat-offender history reads by: the store's CREATE made it.
    assert "audit_node_event" in str(layout(old)["indexes"])
    # The upgraded service works on it: the audit takes rows and is still append-only.
    store = ActionStore(old)
    try:
        assert [e.event for e in store.audit(node="n0")] == ["dry_run"]
    finally:
        store.close()
    with pytest.raises(Exception, match="append-only"):
        rows(old, "DELETE FROM audit")


def _counted(runs: str) -> StateChange:
    """A change that records each run of it (a test table) and holds its transaction a while,
    so a second replica arrives while the first is still migrating."""
    def step(db: Database) -> None:
        db.execute(f"CREATE TABLE IF NOT EXISTS {runs} (pid BIGINT NOT NULL)")
        db.execute(f"INSERT INTO {runs} (pid) SELECT pg_backend_pid()")
        db.execute("SELECT pg_sleep(0.3)")

    return StateChange("audit", "a change that counts its runs", (step,))


def test_replicas_opening_together_apply_each_change_once(postgres_server: Any) -> None:
    dsn = previous_release(postgres_server.fresh_schema())
    changes = (*CHANGES, _counted("change_runs"))
    start = threading.Barrier(3)
    found: list[int] = []
    errors: list[BaseException] = []

    def replica() -> None:
        db = PostgresDatabase(dsn)
        try:
            start.wait()
            found.append(migrate_state(db, changes))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=replica) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert rows(dsn, "SELECT count(*) FROM change_runs") == [(1,)]
    newest = FIRST + len(changes)
    assert sorted(found) == [FIRST, newest, newest]  # one migrated; the others found it done
    assert rows(dsn, "SELECT version FROM gpuhealth_schema") == [(newest,)]
    # And the service's own stores, opened together on an old database, all start.
    old = previous_release(postgres_server.fresh_schema())
    opened: list[BaseException | None] = []

    def store() -> None:
        try:
            start.wait()
            ActionStore(old).close()
            opened.append(None)
        except BaseException as exc:
            opened.append(exc)

    threads = [threading.Thread(target=store) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert opened == [None, None, None]
    assert rows(old, "SELECT version FROM gpuhealth_schema") == [(STATE_VERSION,)]


def test_a_newer_layout_is_refused_untouched(postgres_server: Any) -> None:
    dsn = previous_release(postgres_server.fresh_schema())
    with _conn(dsn) as conn:
        conn.execute("UPDATE gpuhealth_schema SET version = %s", (STATE_VERSION + 1,))
    before, shape = contents(dsn), layout(dsn)
    with pytest.raises(SchemaTooNew) as err:
        ActionStore(dsn)
    msg = str(err.value)
    assert f"at layout {STATE_VERSION + 1}, newer than this release's {STATE_VERSION}" in msg
    assert "upgrade gpuhealth" in msg
    with pytest.raises(SchemaTooNew):  # nor does any other store open it
        open_every_state_store(dsn)
    assert contents(dsn) == before and layout(dsn) == shape


def test_a_failed_migration_leaves_the_database_as_it_was(postgres_server: Any) -> None:
    dsn = previous_release(postgres_server.fresh_schema())
    before, shape = contents(dsn), layout(dsn)

    broken = StateChange("alerts", "a migration with a bug", (
        "ALTER TABLE alerts ADD COLUMN note TEXT; DELETE FROM nflog",
        "INSERT INTO no_such_table VALUES (1)"))
    changes = (*CHANGES, broken)
    db = PostgresDatabase(dsn)
    try:
        with pytest.raises(MigrationFailed, match=(
                rf"migration to layout {FIRST + len(changes)} \(a migration with a bug\) "
                rf"failed: .*no_such_table.*left at layout {FIRST}, unchanged")):
            migrate_state(db, changes)
        assert version_of(db) == FIRST
        assert db.execute("SELECT 1").fetchone()[0] == 1  # the connection is usable again
    finally:
        db.close()
    assert contents(dsn) == before and layout(dsn) == shape
    open_every_state_store(dsn)  # the released migrations still apply afterwards
    assert rows(dsn, "SELECT version FROM gpuhealth_schema") == [(STATE_VERSION,)]


def _noted() -> StateChange:
    """A change as the next release would write one: a column with a type to translate, and
    rows filled by a function over the dialect layer."""
    def fill(db: Database) -> None:
        db.execute("UPDATE alerts SET note = entity || ? WHERE state = ?", (" (noted)", "firing"))

    return StateChange("alerts", "alerts carry a note", (
        "ALTER TABLE alerts ADD COLUMN note TEXT NOT NULL DEFAULT ''; "
        "ALTER TABLE alerts ADD COLUMN weight REAL  -- a float64 on both", fill))


def test_a_change_written_once_runs_on_sqlite_and_postgres(
        postgres_server: Any, tmp_path: Path) -> None:
    change = _noted()
    file = sqlite_release(tmp_path / "old.db")
    conn = sqlite3.connect(file, isolation_level=None)
    try:
        assert migrate(conn, str(file), (*MIGRATIONS, Migration.of(CURRENT + 1, change))) == 0
        assert sqlite_version_of(conn) == CURRENT + 1
        assert conn.execute("SELECT entity, note FROM alerts").fetchall() == [
            ("n0:gpu0", "n0:gpu0 (noted)")]
        assert ("weight", "REAL") in {(r[1], r[2]) for r in conn.execute(
            "PRAGMA table_info(alerts)")}
    finally:
        conn.close()
    dsn = previous_release(postgres_server.fresh_schema())
    db = PostgresDatabase(dsn)
    try:
        assert migrate_state(db, (*CHANGES, change)) == FIRST
        assert version_of(db) == FIRST + len(CHANGES) + 1
    finally:
        db.close()
    assert rows(dsn, "SELECT entity, note FROM alerts") == [("n0:gpu0", "n0:gpu0 (noted)")]
    assert rows(dsn, "SELECT data_type FROM information_schema.columns WHERE table_schema = "
                     "current_schema() AND table_name = 'alerts' AND column_name = 'weight'"
                ) == [("double precision",)]


def test_a_change_skips_a_table_its_store_has_not_created(pg_dsn: str) -> None:
    """A fresh database: nothing to change, the version is stamped, the store creates the
    table in its current shape afterwards."""
    db = PostgresDatabase(pg_dsn)
    try:
        assert migrate_state(db, (_noted(),)) == FIRST
        assert version_of(db) == FIRST + 1
        assert db.columns("alerts") == set()
    finally:
        db.close()
