"""A real PostgreSQL server (Debian's `postgresql`) on a loopback port with a data directory of
its own, started by the tests. Each test gets a fresh schema in it (a DSN whose search_path
names it), so tests never see each other's tables and the server starts once per session.

PostgreSQL refuses to run as root: as root (CI) the server runs as the `postgres` user the
package creates."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.loopback import Daemon


def _bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return versions[-1] if versions else None


POSTGRES, INITDB = _bin("postgres"), _bin("initdb")
MISSING = "PostgreSQL is not installed (apt-get install postgresql; .ci/run does)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user() -> tuple[int, int] | None:
    """The uid/gid to run the server as when we are root, else None (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    pw = pwd.getpwnam("postgres")
    return pw.pw_uid, pw.pw_gid


class PostgresServer(Daemon):
    user = "gpuhealth"
    database = "gpuhealth"

    def __init__(self, root: Path) -> None:
        if POSTGRES is None or INITDB is None:
            raise RuntimeError(MISSING)
        super().__init__(root, "postgres")
        self.port = free_port()
        self.data = root / "data"
        self.sockets = root / "sockets"
        self._ids = _as_server_user()
        if not self.data.exists():
            self._initdb()

    def _preexec(self) -> None:
        if self._ids is not None:
            os.setgid(self._ids[1])
            os.setuid(self._ids[0])

    def _initdb(self) -> None:
        assert INITDB is not None
        for d in (self.root, self.data, self.sockets):
            d.mkdir(parents=True, exist_ok=True)
            if self._ids is not None:
                os.chown(d, *self._ids)
        subprocess.run([INITDB, "-D", str(self.data), "-U", self.user, "--auth=trust",
                        "-E", "UTF8", "--no-sync"], check=True, capture_output=True,
                       preexec_fn=self._preexec)

    def start(self, timeout_s: float = 60.0) -> None:
        assert POSTGRES is not None
        log_path = self.root / "postgres.log"
        if self._ids is not None and log_path.exists():
            os.chown(log_path, *self._ids)
        argv = [POSTGRES, "-D", str(self.data), "-p", str(self.port), "-k", str(self.sockets),
                "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                "-c", "max_connections=300"]
        if self._ids is not None:
            argv = ["setpriv", f"--reuid={self._ids[0]}", f"--regid={self._ids[1]}",
                    "--clear-groups", *argv]
        self.launch(argv, self._ready, timeout_s)
        self._ensure_database()

    def stop(self) -> None:
        """Fast shutdown (SIGINT): open connections are dropped, not waited for."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        super().stop()

    def _ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.dsn("postgres"), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def _ensure_database(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            (self.database,)).fetchone() is None:
                conn.execute(f"CREATE DATABASE {self.database}")

    def dsn(self, database: str | None = None, schema: str | None = None) -> str:
        base = (f"postgresql://{self.user}@127.0.0.1:{self.port}/"
                f"{database or self.database}")
        return f"{base}?options=-csearch_path%3D{schema}" if schema else base

    def fresh_schema(self) -> str:
        """A DSN on a new, empty schema of its own."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return self.dsn(schema=name)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    if POSTGRES is None or INITDB is None:
        pytest.skip(MISSING)
    pytest.importorskip("psycopg", reason="psycopg is not installed (make test installs it)")
    # Not under pytest's own temporary root: as root that is 0700, and the server runs as
    # `postgres`, which must reach its data directory.
    root = Path(tempfile.mkdtemp(prefix="gpuhealth-pg-"))
    try:
        server = PostgresServer(root)
        server.start()
        yield server
        server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_dsn(postgres_server: PostgresServer) -> str:
    """A DSN on an empty schema of this test's own."""
    return postgres_server.fresh_schema()


@pytest.fixture(params=["sqlite", "postgres"])
def state_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a shared-state store lives: the SQLite file, then PostgreSQL. A store test that
    takes this runs on both (the same suite against both implementations)."""
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.fresh_schema()
