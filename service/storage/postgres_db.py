"""The shared state on PostgreSQL (psycopg 3): what replicas and shards of one fleet share.

A write transaction takes one transaction-scoped advisory lock, so writers of the shared state
are serialised across every process exactly as BEGIN IMMEDIATE serialises them on one SQLite
file: a store's read-then-write keeps the meaning it was written with, and no store needs a
PostgreSQL-only retry loop. The state is control-plane sized (alerts, notifications, actions),
so one writer at a time costs nothing that matters."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from decimal import Decimal
from functools import lru_cache
from typing import Any

from service.errors import GpuhealthError
from service.storage.sql import Cursor, Database, Dialect, Params, pg_ddl, pg_sql

log = logging.getLogger(__name__)

WRITE_LOCK = 0x67707568  # "gpuh": the advisory lock key every write transaction takes
SCHEMA_TABLE = "gpuhealth_schema"


class PostgresUnavailable(GpuhealthError):
    """The shared state cannot be reached. A client is told that much only (the driver's
    message names the server's host, port, user and database); `str()` keeps the driver's
    reason (its password cut out) for the operator: the command line's refusal and the log
    line the API's handler writes (service.api.problems)."""

    status, slug, title = 503, "state-unavailable", "Shared state database unavailable"

    def __init__(self, public: str, reason: str = "") -> None:
        super().__init__(f"{public} (the service log says why)" if reason else public)
        self.reason = f"{public}: {reason}" if reason else public

    def __str__(self) -> str:
        return self.reason


def is_postgres(target: object) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


@lru_cache(maxsize=4096)
def _translated(sql: str) -> str:
    return pg_sql(sql)


class PostgresDatabase(Database):
    dialect: Dialect = "postgres"

    def __init__(self, dsn: str, *, connect_timeout_s: float = 5.0) -> None:
        self.dsn, self.connect_timeout_s = dsn, connect_timeout_s
        self._in_tx = False
        self._guard = threading.Lock()  # reconnects, from whichever thread notices
        self.conn = self._connect()

    def _connect(self) -> Any:
        import psycopg
        from psycopg.types.numeric import IntDumper

        # A connect_timeout in the DSN (storage.postgres.connect_timeout_s puts one there)
        # wins over the default here.
        timeout: dict[str, Any] = (
            {} if "connect_timeout" in _conninfo(self.dsn)
            else {"connect_timeout": max(1, int(self.connect_timeout_s))})
        try:
            conn = psycopg.connect(self.dsn, autocommit=True, **timeout)
        except psycopg.Error as exc:  # unreachable, refused, or a DSN psycopg cannot read
            raise PostgresUnavailable("cannot connect to PostgreSQL", _redact(exc)) from None
        # SQLite keeps booleans as 0/1 in INTEGER columns; the stores pass Python bools there.
        conn.adapters.register_dumper(bool, IntDumper)
        conn.adapters.register_loader("numeric", _numeric_loader())  # SUM() of BIGINT
        return conn

    def _live(self) -> Any:
        """The connection, opened again when it broke (a restarted server), unless a
        transaction was running on it: that one is lost and its caller is told."""
        conn = self.conn
        if conn.closed or conn.broken:
            with self._guard:
                if self.conn.closed or self.conn.broken:
                    if self._in_tx:
                        raise PostgresUnavailable("the connection broke inside a transaction")
                    log.warning("PostgreSQL connection lost; reconnecting")
                    self.conn = self._connect()
                conn = self.conn
        return conn

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        import psycopg

        try:
            if params:
                return self._live().execute(_translated(sql), params)  # type: ignore[no-any-return]
            return self._live().execute(sql)  # type: ignore[no-any-return]
        except psycopg.OperationalError as exc:
            raise PostgresUnavailable("PostgreSQL failed to answer", _redact(exc)) from None

    def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        rows = list(rows)
        if rows:
            with self._live().cursor() as cur:
                cur.executemany(_translated(sql), rows)

    def script(self, ddl: str) -> None:
        with self.transaction():
            for statement in pg_ddl(ddl):
                self.execute(statement)

    def begin(self) -> None:
        self.execute("BEGIN")
        self._in_tx = True
        try:
            self.execute("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,))
        except BaseException:
            self.rollback()
            raise

    def commit(self) -> None:
        try:
            self.execute("COMMIT")
        finally:
            self._in_tx = False

    def rollback(self) -> None:
        try:
            if not (self.conn.closed or self.conn.broken):
                self.conn.execute("ROLLBACK")
        finally:
            self._in_tx = False

    def columns(self, table: str) -> set[str]:
        rows = self.execute("SELECT column_name FROM information_schema.columns "
                            "WHERE table_schema = current_schema() AND table_name = ?", (table,))
        return {r[0] for r in rows}

    def json_text(self, column: str, key: str) -> str:
        from service.storage.sql import _ident

        return f"(({_ident(column)})::json ->> '{_ident(key)}')"

    def now(self) -> float:
        return float(self.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0])

    def close(self) -> None:
        self.conn.close()


def _conninfo(dsn: str) -> dict[str, Any]:
    from psycopg.conninfo import conninfo_to_dict

    try:
        return conninfo_to_dict(dsn)
    except Exception:  # a malformed DSN: psycopg.connect says what is wrong with it
        return {}


def _redact(exc: Exception) -> str:
    """The driver's message without the DSN's password (psycopg can echo connection info)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.split("password=")[0][:300]


@lru_cache(maxsize=1)
def _numeric_loader() -> Any:
    """NUMERIC (what SUM() of BIGINT returns) as int when whole, else float, as SQLite
    returns it: the stores never hold money, and a Decimal would leak into JSON. Built on
    first use: psycopg is imported only where PostgreSQL is configured."""
    from psycopg.adapt import Loader

    class NumericLoader(Loader):
        def load(self, data: Any) -> int | float:
            d = Decimal(bytes(data).decode())
            return int(d) if d == d.to_integral_value() else float(d)

    return NumericLoader
