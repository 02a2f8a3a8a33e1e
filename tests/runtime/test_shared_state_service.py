"""`storage.postgres`: the settings (a DSN of the right scheme, never repeated in an error)
and the service built by its own assembly with the shared state on a real PostgreSQL: a token
made by `gpuhealth token create`, a write, a tick, an alert through the API, an acknowledgement
with the token, and every row of it in PostgreSQL, none in the SQLite file."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.commands.cli import main
from service.runtime.redact import RedactingFilter
from service.settings import Settings, SettingsError, StorageSettings, load
from tests.support.fleet import STEP, T0, ManualClock

SECRET = "hunter2-pg-password"


def test_without_a_dsn_the_state_is_the_sqlite_file(tmp_path: Path) -> None:
    s = StorageSettings(data_dir=tmp_path)
    assert s.state_target == tmp_path / "gpuhealth.db" == s.sqlite_path


def test_a_dsn_is_the_state_target_with_its_connect_timeout() -> None:
    s = StorageSettings.model_validate({"postgres": {
        "dsn": f"postgresql://gh:{SECRET}@db:5432/gpuhealth", "connect_timeout_s": 3}})
    assert s.state_target == f"postgresql://gh:{SECRET}@db:5432/gpuhealth?connect_timeout=3"
    assert SECRET not in repr(s) and SECRET not in str(s.model_dump())
    own = StorageSettings.model_validate({"postgres": {
        "dsn": "postgres://db/g?sslmode=require&connect_timeout=9"}})
    assert own.state_target == "postgres://db/g?sslmode=require&connect_timeout=9"
    other = StorageSettings.model_validate({"postgres": {"dsn": "postgresql://db/g?x=1"}})
    assert other.state_target == "postgresql://db/g?x=1&connect_timeout=5"


@pytest.mark.parametrize("dsn", [f"mysql://gh:{SECRET}@db/gpuhealth",
                                 f"host=db password={SECRET}", f"/var/lib/{SECRET}.db"])
def test_a_dsn_of_another_scheme_is_refused_without_echoing_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dsn: str) -> None:
    with pytest.raises(ValueError, match="postgresql://") as direct:
        Settings.model_validate({"storage": {"postgres": {"dsn": dsn}}})
    assert SECRET not in str(direct.value)
    with pytest.raises(ValueError) as nested:
        StorageSettings.model_validate({"postgres": {"dsn": dsn}})
    assert SECRET not in str(nested.value)
    monkeypatch.setenv("GPUHEALTH_STORAGE__POSTGRES__DSN", dsn)
    with pytest.raises(SettingsError, match=r"storage\.postgres\.dsn") as loaded:
        load(None)
    assert SECRET not in str(loaded.value)


@pytest.fixture(autouse=True)
def _root_filters_restored() -> Iterator[None]:
    """main() configures logging, which filters the root handlers (pytest's among them)."""
    yield
    for h in logging.getLogger().handlers:
        for f in [f for f in h.filters if isinstance(f, RedactingFilter)]:
            h.removeFilter(f)


def _rows(dsn: str, sql: str) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return [tuple(r) for r in conn.execute(sql)]


def _file_rows(path: Path, table: str) -> int:
    """Rows of `table` in the SQLite file (0 when it lacks the table)."""
    db = sqlite3.connect(path)
    try:
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone() is None:
            return 0
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        db.close()


@pytest.mark.slow
def test_the_service_keeps_its_shared_state_in_postgres(
        tmp_path: Path, pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gpuhealth.yaml"
    config.write_text(yaml.safe_dump({
        "storage": {"data_dir": str(tmp_path / "data"), "postgres": {"dsn": pg_dsn}},
        "notify": {"route": {"receiver": "record", "group_wait_s": 0}}}))
    assert main(["token", "create", "--name", "oncall", "--scope", "operate",
                 "--config", str(config)]) == 0
    token = capsys.readouterr().out.strip()
    settings = load(config)
    clock = ManualClock(T0)
    app = create_app(settings, clock=clock, schedule=False)
    with TestClient(app) as client:
        running = app.state.gpuhealth
        for k, dbe in enumerate((0, 0, 2)):
            ns = int((T0 + k * STEP) * 1e9)
            body = "\n".join(f"gpu,host=n001,gpu={g} gpu_temp=60,ecc_dbe_volatile="
                             f"{dbe if g == 3 else 0}i {ns}" for g in range(4))
            r = client.post("/write", content=body)
            assert r.status_code == 204, r.text
            clock.now = T0 + k * STEP
            running.scheduler.score_once()
        r = client.get("/v1/alerts")
        assert r.status_code == 200, r.text
        (alert,) = [a for a in r.json()["alerts"] if a["entity"] == "n001:gpu3"]
        assert alert["level"] == 3
        ack = client.post(f"/v1/alerts/{alert['id']}/ack", json={"comment": "on it"},
                          headers={"Authorization": f"Bearer {token}",
                                   "Idempotency-Key": "ack-1"})
        assert ack.status_code == 200, ack.text
        assert ack.json()["acked_by"] == "oncall"
    # Everything shared is in PostgreSQL ...
    assert _rows(pg_dsn, "SELECT entity, acked_by FROM alerts") == [("n001:gpu3", "oncall")]
    assert _rows(pg_dsn, "SELECT name, last_used_at IS NOT NULL FROM api_tokens") == [
        ("oncall", True)]
    assert _rows(pg_dsn, "SELECT key, status FROM api_idempotency") == [("ack-1", 200)]
    assert _rows(pg_dsn, "SELECT count(*) FROM alert_events")[0][0] >= 1
    # ... and none of it in the SQLite file, which keeps the sample history only.
    db = settings.storage.sqlite_path
    assert db.exists()
    for table in ("alerts", "alert_events", "api_tokens", "api_idempotency", "nflog",
                  "actions", "model_entries"):
        assert _file_rows(db, table) == 0, table
