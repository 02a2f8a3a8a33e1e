"""The shared state on a PostgreSQL that goes away, or was never there (issue 29, defect 10):
`/readyz` says not ready, problem details name no host, port, user or database, and `serve`
with a bad DSN refuses on one line with exit 2 instead of a startup traceback."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.commands.cli import main
from service.runtime.redact import RedactingFilter
from service.settings import Settings, StorageSettings
from tests.postgres import INITDB, MISSING, POSTGRES, PostgresServer, free_port
from tests.support.fleet import T0, Fleet, FleetCollector, ManualClock


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A server of this test's own: it is stopped mid-test."""
    if POSTGRES is None or INITDB is None:
        pytest.skip(MISSING)
    pytest.importorskip("psycopg")
    root = Path(tempfile.mkdtemp(prefix="gpuhealth-pg-down-"))
    try:
        server = PostgresServer(root)
        server.start()
        yield server
        server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _root_filters_restored() -> Iterator[None]:
    """main() configures logging, which filters the root handlers (pytest's among them)."""
    yield
    for h in logging.getLogger().handlers:
        for f in [f for f in h.filters if isinstance(f, RedactingFilter)]:
            h.removeFilter(f)


def test_readiness_and_problems_when_postgres_goes_down(own_server: PostgresServer,
                                                        tmp_path: Path) -> None:
    settings = Settings(storage=StorageSettings.model_validate({
        "data_dir": tmp_path / "data", "postgres": {"dsn": own_server.fresh_schema()}}))
    clock = ManualClock(T0)
    app = create_app(settings, clock=clock, schedule=False,
                     collectors=[FleetCollector(Fleet({"n001": 2}), clock)])
    with TestClient(app) as client:
        st = app.state.gpuhealth
        st.scheduler.collect_once("fleet")
        st.scheduler.score_once()
        assert client.get("/readyz").status_code == 200
        own_server.stop()
        r = client.get("/readyz")
        assert r.status_code == 503, r.text
        assert any("shared state" in why for why in r.json()["reasons"])
        r = client.get("/v1/alerts")
        assert r.status_code == 503 and r.json()["type"] == "/problems/state-unavailable"
        for body in (r.text, client.get("/readyz").text):
            for secret in ("127.0.0.1", str(own_server.port), own_server.user,
                           "Connection refused", "port"):
                assert secret not in body, (secret, body)


@pytest.mark.parametrize("dsn", ["postgresql://gpuhealth@127.0.0.1:{port}/gpuhealth",
                                 "postgresql://gpuhealth@127.0.0.1:notaport/gpuhealth",
                                 "postgresql://gpuhealth@nohost.invalid/gpuhealth"])
def test_serve_with_a_bad_dsn_refuses_on_one_line(tmp_path: Path, dsn: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gpuhealth.yaml"
    config.write_text(yaml.safe_dump({"storage": {
        "data_dir": str(tmp_path / "data"),
        "postgres": {"dsn": dsn.format(port=free_port()), "connect_timeout_s": 2}}}))
    assert main(["serve", "--config", str(config), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("gpuhealth serve: cannot connect to PostgreSQL: "), err
