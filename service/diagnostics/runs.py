"""Diagnostic runs on the shared state: one row per suite run on a node, with why it ran (a
gate, a sweep, an operator), the drain it gates, its result (pass, fail with the failing checks
and figures, or error with why) and the versions the tool reported. The gate reads the latest
runs of a drain; the API lists a node's; repeat offenders are counted from them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from collectors.diagnostics.result import SuiteResult, from_dict, to_dict
from service.diagnostics.site import Purpose
from service.storage.state_db import StateStore, StateTarget

_SCHEMA = """
CREATE TABLE IF NOT EXISTS diagnostic_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node TEXT NOT NULL,
    suite TEXT NOT NULL,
    purpose TEXT NOT NULL,
    drain_id TEXT NOT NULL DEFAULT '',  -- the drain action a gate run is for
    status TEXT NOT NULL,               -- running, pass, fail, error
    started_at REAL NOT NULL,
    finished_at REAL,
    result TEXT,                        -- SuiteResult as JSON
    site TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS diagnostic_runs_node ON diagnostic_runs (node, started_at);
CREATE INDEX IF NOT EXISTS diagnostic_runs_drain ON diagnostic_runs (drain_id);
"""
_COLS = "id, node, suite, purpose, drain_id, status, started_at, finished_at, result, site"
RUNNING = "running"


@dataclass(frozen=True, slots=True)
class Run:
    id: int
    node: str
    suite: str
    purpose: Purpose
    drain_id: str
    status: str  # running, pass, fail, error
    started_at: float
    finished_at: float | None
    result: SuiteResult | None
    site: str

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "node": self.node, "suite": self.suite,
                "purpose": str(self.purpose), "drain_id": self.drain_id or None,
                "status": self.status, "started_at": self.started_at,
                "finished_at": self.finished_at, "site": self.site,
                "result": None if self.result is None else to_dict(self.result)}


def _run(r: Any) -> Run:
    return Run(id=int(r[0]), node=r[1], suite=r[2], purpose=Purpose(r[3]), drain_id=r[4],
               status=r[5], started_at=float(r[6]),
               finished_at=None if r[7] is None else float(r[7]),
               result=None if r[8] is None else from_dict(json.loads(r[8])), site=r[9])


class RunStore(StateStore):
    def __init__(self, target: StateTarget = ":memory:") -> None:
        super().__init__(target, _SCHEMA)

    def start(self, node: str, suite: str, purpose: Purpose, drain_id: str, site: str,
              now: float) -> Run:
        with self.transaction() as db:
            cur = db.execute(
                "INSERT INTO diagnostic_runs (node, suite, purpose, drain_id, status, "
                "started_at, site) VALUES (?,?,?,?,?,?,?) RETURNING id",
                (node, suite, str(purpose), drain_id, RUNNING, now, site))
            rid = int(cur.fetchone()[0])
        got = self.get(rid)
        assert got is not None
        return got

    def finish(self, run_id: int, result: SuiteResult, now: float) -> Run:
        with self.transaction() as db:
            db.execute("UPDATE diagnostic_runs SET status = ?, finished_at = ?, result = ? "
                       "WHERE id = ?", (str(result.status), now, json.dumps(to_dict(result)),
                                        run_id))
        got = self.get(run_id)
        assert got is not None
        return got

    def get(self, run_id: int) -> Run | None:
        with self.transaction() as db:
            r = db.execute(f"SELECT {_COLS} FROM diagnostic_runs WHERE id = ?",
                           (run_id,)).fetchone()
        return None if r is None else _run(r)

    def for_node(self, node: str, limit: int = 100) -> list[Run]:
        """Newest first."""
        with self.transaction() as db:
            rows = db.execute(f"SELECT {_COLS} FROM diagnostic_runs WHERE node = ? "
                              "ORDER BY started_at DESC, id DESC LIMIT ?",
                              (node, limit)).fetchall()
        return [_run(r) for r in rows]

    def for_drain(self, drain_id: str) -> list[Run]:
        """Oldest first."""
        with self.transaction() as db:
            rows = db.execute(f"SELECT {_COLS} FROM diagnostic_runs WHERE drain_id = ? "
                              "ORDER BY started_at, id", (drain_id,)).fetchall()
        return [_run(r) for r in rows]

    def running(self) -> list[Run]:
        with self.transaction() as db:
            rows = db.execute(f"SELECT {_COLS} FROM diagnostic_runs WHERE status = ? "
                              "ORDER BY id", (RUNNING,)).fetchall()
        return [_run(r) for r in rows]
