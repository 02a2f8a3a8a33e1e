"""Schema versions of the service's SQLite file: a file written by the previous release (the
committed dump previous_release.sql) is upgraded in place with its rows kept and ends with the
same layout as a fresh file; a file from a newer release is refused untouched; a migration
that fails leaves the file as it was."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from service.api.auth import TokenStore
from service.api.idempotency import IdempotencyStore
from service.pipeline import build_pipeline
from service.runtime import replay_progress
from service.settings import Settings, StorageSettings
from service.stages.alert_store import AlertStore
from service.storage.sample_codec import decode
from service.storage.schema import (
    CURRENT,
    MIGRATIONS,
    Migration,
    MigrationFailed,
    SchemaTooNew,
    migrate,
    version_of,
)
from service.storage.sqlite_db import open_db
from tests.storage.state_stores import open_every_state_store

DUMP = Path(__file__).with_name("previous_release.sql")


def previous_release(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.executescript(DUMP.read_text())
    db.close()
    return path


def open_everything(data_dir: Path) -> Path:
    """Every store of the service on the settings' file, as a running service opens them."""
    s = Settings(storage=StorageSettings(data_dir=data_dir))
    build_pipeline(s).close()
    TokenStore(s.storage.sqlite_path).close()
    IdempotencyStore(s.storage.sqlite_path).close()
    db = open_db(s.storage.sqlite_path, replay_progress._SCHEMA)
    db.close()
    open_every_state_store(s.storage.sqlite_path)  # and those the pipeline leaves closed
    return s.storage.sqlite_path


def layout(path: Path) -> dict[str, object]:
    """Tables with their columns (order aside: an added column comes last), indexes, triggers."""
    db = sqlite3.connect(path)
    try:
        out: dict[str, object] = {}
        for kind, name, table in db.execute("SELECT type, name, tbl_name FROM sqlite_master "
                                            "WHERE name NOT LIKE 'sqlite_%'"):
            if kind == "table":
                out[name] = sorted(tuple(r[1:]) for r in db.execute(f"PRAGMA table_info({name})"))
            elif kind == "index":
                cols = [r[2] for r in db.execute(f"PRAGMA index_info({name})")]
                out[name] = (table, cols)
            else:
                out[name] = (kind, table)
        return out
    finally:
        db.close()


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def packed_rows(path: Path, metrics: list[str]) -> list[tuple[object, ...]]:
    """gpu_samples of version 3 as the wide rows of before: (ts, entity, node, *metrics)."""
    db = sqlite3.connect(path)
    try:
        pos = dict(db.execute("SELECT name, pos FROM gpu_layout"))
        assert db.execute("SELECT DISTINCT since, gone FROM gpu_samples").fetchall() == [(None, 0)]
        return sorted((ts, e, n, *decode(v, [pos[m] for m in metrics])) for ts, e, n, v in
                      db.execute("SELECT ts, entity, node, vals FROM gpu_samples JOIN "
                                 "gpu_entities USING (id)"))
    finally:
        db.close()


def test_migrations_are_numbered_in_order() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, CURRENT + 1))


def test_a_file_of_the_previous_release_is_upgraded_with_its_rows(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    old = previous_release(tmp_path / "old" / "gpuhealth.db")
    assert rows(old, "PRAGMA user_version") == [(0,)]
    assert "risk_history" not in layout(old)
    before = {t: rows(old, f"SELECT * FROM {t} ORDER BY 1, 2")
              for t in ("alerts", "alert_events", "nflog", "actions", "audit", "gpu_samples",
                        "events", "deliveries", "breaker_state")}
    wide = [r[1] for r in rows(old, "PRAGMA table_info(gpu_samples)")]
    upgraded = open_everything(tmp_path / "old")
    assert upgraded == old
    assert rows(old, "PRAGMA user_version") == [(CURRENT,)]
    for table, kept in before.items():
        if table == "gpu_samples":  # version 3: a row per sample still, values packed
            now = packed_rows(old, wide[3:])
        else:
            now = rows(old, f"SELECT * FROM {table} ORDER BY 1, 2")
        assert kept and now == kept, table
    fresh = open_everything(tmp_path / "fresh")
    assert rows(fresh, "PRAGMA user_version") == [(CURRENT,)]
    # A store whose CREATE statement changed without a migration fails here.
    assert layout(old) == layout(fresh)
    assert "risk_history" in layout(old)
    # The upgraded service works on it: the open alert is still there to be resolved.
    assert rows(old, "SELECT entity, state, level FROM alerts") == [("n0:gpu0", "firing", 3)]


def test_duplicate_samples_of_an_older_file_are_reduced_to_the_newest(tmp_path: Path) -> None:
    path = tmp_path / "dup.db"
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE gpu_samples (ts REAL NOT NULL, entity TEXT NOT NULL, "
                     "node TEXT NOT NULL, gpu_temp REAL);"
                     "INSERT INTO gpu_samples VALUES (1, 'n0:gpu0', 'n0', 50), "
                     "(1, 'n0:gpu0', 'n0', 51), (2, 'n0:gpu0', 'n0', 52);")
    db.close()
    open_db(path).close()
    assert packed_rows(path, ["gpu_temp"]) == [(1, "n0:gpu0", "n0", 51), (2, "n0:gpu0", "n0", 52)]
    with pytest.raises(sqlite3.IntegrityError):
        rows(path, "INSERT INTO gpu_samples (bucket, id, ts) SELECT 0, id, 2 FROM gpu_entities")


def test_a_file_from_a_newer_release_is_refused_untouched(tmp_path: Path) -> None:
    path = previous_release(tmp_path / "new.db")
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {CURRENT + 1}")
    db.close()
    before = path.read_bytes()
    with pytest.raises(SchemaTooNew) as err:
        open_db(path)
    msg = str(err.value)
    assert f"has schema version {CURRENT + 1}" in msg
    assert f"knows versions up to {CURRENT}" in msg
    assert "newer release" in msg and "storage.data_dir" in msg
    assert path.read_bytes() == before
    with pytest.raises(SchemaTooNew):  # nor does any store open it
        build_pipeline(Settings(storage=StorageSettings(data_dir=tmp_path,
                                                        sqlite_file="new.db"))).close()
    assert rows(path, "PRAGMA user_version") == [(CURRENT + 1,)]


def test_the_cli_says_why_it_refuses_a_newer_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from service.commands.cli import main

    path = tmp_path / "gpuhealth.db"
    db = open_db(path)
    db.execute(f"PRAGMA user_version = {CURRENT + 5}")
    db.close()
    monkeypatch.setenv("GPUHEALTH_STORAGE__DATA_DIR", str(tmp_path))
    monkeypatch.delenv("GPUHEALTH_CONFIG", raising=False)
    assert main(["token", "list"]) == 2
    assert f"schema version {CURRENT + 5}" in capsys.readouterr().err


def test_a_failed_migration_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = previous_release(tmp_path / "old.db")
    before = layout(path)

    def half_done(db: sqlite3.Connection) -> None:
        db.execute("ALTER TABLE alerts ADD COLUMN note TEXT")
        db.execute("DELETE FROM gpu_samples")
        db.execute("INSERT INTO no_such_table VALUES (1)")

    broken = (*MIGRATIONS, Migration(CURRENT + 1, "a migration with a bug", half_done))
    db = sqlite3.connect(path, isolation_level=None)
    with pytest.raises(MigrationFailed, match=rf"schema version {CURRENT + 1} \(a migration "
                                              r"with a bug\) failed: no such table.*left at "
                                              r"version 0, unchanged"):
        migrate(db, str(path), broken)
    assert version_of(db) == 0
    db.close()
    assert layout(path) == before  # not even the earlier migrations' risk_history
    assert len(rows(path, "SELECT * FROM gpu_samples")) == 3
    open_db(path).close()  # the released migrations still apply afterwards
    assert rows(path, "PRAGMA user_version") == [(CURRENT,)]


def test_a_first_release_alerts_table_gains_its_later_columns(tmp_path: Path) -> None:
    """Migration 4: the alert store once added these columns itself at every open; a file of
    the first release gets them from the file's migrations, its rows kept."""
    path = tmp_path / "gpuhealth.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE alerts (id INTEGER PRIMARY KEY AUTOINCREMENT, entity TEXT NOT NULL,
            scope TEXT NOT NULL, node TEXT NOT NULL, level INTEGER NOT NULL,
            peak_level INTEGER NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('firing', 'resolved')), risk REAL NOT NULL,
            started_at REAL NOT NULL, updated_at REAL NOT NULL, resolved_at REAL,
            explanation TEXT NOT NULL);
        INSERT INTO alerts (entity, scope, node, level, peak_level, state, risk, started_at,
            updated_at, explanation) VALUES ('n0:gpu0', 'gpu', 'n0', 3, 3, 'firing', 1.0, 1.0,
            1.0, '[]');""")
    db.close()
    store = AlertStore(path)
    try:
        [alert] = store.find(state="firing")
    finally:
        store.close()
    # A first-release alert had no name of its own: its scope's.
    assert (alert.entity, alert.name, alert.flapping, alert.acked_by) == (
        "n0:gpu0", "GpuFailureRisk", False, None)
    assert rows(path, "PRAGMA user_version") == [(CURRENT,)]
    cols = {r[1] for r in rows(path, "PRAGMA table_info(alerts)")}
    assert {"alertname", "flapping", "stale", "corroborated", "acked_by", "acked_at",
            "ack_comment"} <= cols
