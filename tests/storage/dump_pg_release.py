"""Write the shared state's PostgreSQL dump of this release (tests/storage/
previous_release_pg.sql is one): a fresh schema on a throwaway server, every shared-state store
opened on it and the rounds of tests/history/test_history.feed run through the pipeline (an
alert, its notification, a dry-run action and its audit), a token, a silence, then `pg_dump`
with the schema's name taken out so the dump loads into any schema, at most 3 rows a table.

    python -m tests.storage.dump_pg_release tests/storage/previous_release_pg.sql

Run it at a release; the next release's migrations are tested against what it wrote."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote

from service.api.auth import TokenStore
from service.notify.silences import SilenceStore
from service.pipeline import build_pipeline
from service.settings import Settings, StorageSettings
from tests.history.test_history import feed
from tests.postgres import PostgresServer, _bin
from tests.storage.state_stores import open_every_state_store
from tests.support.fleet import T0

MAX_ROWS = 3


def dump(out: Path) -> None:
    root = Path(tempfile.mkdtemp(prefix="gpuhealth-pgdump-"))
    server = PostgresServer(root)
    server.start()
    try:
        dsn = server.fresh_schema()
        schema = unquote(dsn.rsplit("search_path%3D", 1)[1])
        data = Path(tempfile.mkdtemp(prefix="gpuhealth-pgdump-data-"))
        settings = Settings(storage=StorageSettings.model_validate(
            {"data_dir": str(data), "postgres": {"dsn": dsn}}),
            cluster={"replica_id": "r0"})
        open_every_state_store(dsn)
        pipeline = build_pipeline(settings)
        pipeline.cluster.step()  # its leases: the one replica writes and leads
        feed(pipeline)
        pipeline.close()
        tokens = TokenStore(dsn)
        tokens.create("oncall", "operate", T0)
        tokens.close()
        silences = SilenceStore(dsn)
        silences.create(["node=n9"], "oncall", "maintenance", T0, ends_at=T0 + 3600)
        silences.close()
        pg_dump = _bin("pg_dump")
        assert pg_dump is not None
        text = subprocess.run(
            [pg_dump, "--dbname", server.dsn(), "--schema", schema, "--no-owner",
             "--no-privileges", "--inserts", "--no-comments"],
            check=True, capture_output=True, text=True).stdout
        shutil.rmtree(data, ignore_errors=True)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    out.write_text(_portable(text, schema))


def _portable(text: str, schema: str) -> str:
    """The dump without its schema: no CREATE SCHEMA, no empty search_path, names unqualified;
    at most MAX_ROWS inserts a table, and no blank-line runs."""
    kept: list[str] = []
    rows: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith(("CREATE SCHEMA", "SELECT pg_catalog.set_config('search_path'",
                            "--", "\\")):
            continue
        line = line.replace(f"{schema}.", "")
        m = re.match(r"INSERT INTO (\w+) ", line)
        if m:
            rows[m[1]] = rows.get(m[1], 0) + 1
            if rows[m[1]] > MAX_ROWS:
                continue
        if line or (kept and kept[-1]):
            kept.append(line)
    head = ("-- The shared state on PostgreSQL as the release before its forward migrations "
            "left it\n-- (layout version 1): written by tests/storage/dump_pg_release.py; "
            "see its docstring.\n")
    return head + "\n".join(kept).strip() + "\n"


if __name__ == "__main__":
    dump(Path(sys.argv[1]))
