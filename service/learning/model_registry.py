"""Which model the service runs, and which one it runs in shadow: the active model, a challenger
scored beside it without alerting, the models that were active before (for rollback), and an
audit of every change, kept on the shared state (the service's SQLite file, or PostgreSQL
shared by replicas).

Until anything is promoted the active model is the one the settings name
(`detectors.model.path`, the shipped model by default); promoting records it as the previous
one, so a rollback returns to it. The CLI (`gpuhealth model`) and the API change the registry;
the running service follows it at its next model check (service.learning.model_roles)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from service.storage.state_db import StateStore, StateTarget

Role = Literal["active", "challenger", "retired"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS model_entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    version TEXT NOT NULL,
    path TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('active', 'challenger', 'retired')),
    since REAL NOT NULL,         -- when it took this role
    added_by TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS model_entries_role ON model_entries (role, since);
CREATE TABLE IF NOT EXISTS model_audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,        -- shadow, stop, promote, rollback
    version TEXT NOT NULL,       -- the model the action is about
    previous TEXT NOT NULL DEFAULT '',  -- the active model before (promote, rollback)
    forced INTEGER NOT NULL DEFAULT 0,
    reason TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT '{}'   -- the scores and judgement a promotion was decided on
);
CREATE TABLE IF NOT EXISTS shadow_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    challenger TEXT NOT NULL,    -- model_entries.id of the challenger
    started_at REAL NOT NULL,    -- data time of its first scored tick
    updated_at REAL NOT NULL,
    ended_at REAL,
    node_seconds REAL NOT NULL DEFAULT 0,  -- nodes observed x time, for alarms per node-day
    outcome TEXT NOT NULL DEFAULT 'running'  -- running, promoted, stopped
);
CREATE TABLE IF NOT EXISTS shadow_alarms (
    run_id INTEGER NOT NULL,
    stream TEXT NOT NULL,        -- active:fused, active:model, challenger:fused, challenger:model
    time REAL NOT NULL,
    entity TEXT NOT NULL,
    scope TEXT NOT NULL,
    node TEXT NOT NULL,
    level INTEGER NOT NULL,
    prev INTEGER NOT NULL,
    rule TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS shadow_alarms_run ON shadow_alarms (run_id, stream, time);
"""


@dataclass(frozen=True, slots=True)
class ModelEntry:
    id: int
    version: str
    path: str
    role: str
    since: float
    added_by: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ShadowRun:
    id: int
    challenger: int
    started_at: float
    updated_at: float
    ended_at: float | None
    node_seconds: float
    outcome: str

    @property
    def node_days(self) -> float:
        return self.node_seconds / 86400.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"node_days": self.node_days}


@dataclass(frozen=True, slots=True)
class AuditRow:
    id: int
    at: float
    actor: str
    action: str
    version: str
    previous: str
    forced: bool
    reason: str
    detail: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class RegistryError(ValueError):
    """The change cannot be made as asked (nothing to promote or roll back to)."""


_ENTRY = "id, version, path, role, since, added_by"
_RUN = "id, challenger, started_at, updated_at, ended_at, node_seconds, outcome"


class ModelRegistry(StateStore):
    def __init__(self, target: StateTarget = ":memory:") -> None:
        super().__init__(target, _SCHEMA)

    # -- reads ----------------------------------------------------------------------------
    def active(self) -> ModelEntry | None:
        """The promoted model; None: the settings' model is active."""
        return self._one("role = 'active'")

    def challenger(self) -> ModelEntry | None:
        return self._one("role = 'challenger'")

    def previous(self) -> ModelEntry | None:
        """The model a rollback returns to: the one most recently retired from active."""
        retired = self._db.json_text("detail", "retired_entry")
        with self._lock:
            r = self._db.execute(
                f"SELECT {_ENTRY} FROM model_entries WHERE role = 'retired' AND id IN (SELECT "
                f"CAST({retired} AS INTEGER) FROM model_audit "
                "WHERE action IN ('promote', 'rollback')) ORDER BY since DESC, id DESC LIMIT 1"
            ).fetchone()
        return None if r is None else ModelEntry(*r)

    def _one(self, where: str) -> ModelEntry | None:
        with self._lock:
            r = self._db.execute(f"SELECT {_ENTRY} FROM model_entries WHERE {where} "
                                 "ORDER BY id DESC LIMIT 1").fetchone()
        return None if r is None else ModelEntry(*r)

    def run(self) -> ShadowRun | None:
        """The challenger's shadow run (the running one, else the newest)."""
        with self._lock:
            r = self._db.execute(f"SELECT {_RUN} FROM shadow_runs ORDER BY "
                                 "(outcome = 'running') DESC, id DESC LIMIT 1").fetchone()
        return None if r is None else ShadowRun(*r)

    def run_by_id(self, run_id: int) -> ShadowRun | None:
        with self._lock:
            r = self._db.execute(f"SELECT {_RUN} FROM shadow_runs WHERE id = ?",
                                 (run_id,)).fetchone()
        return None if r is None else ShadowRun(*r)

    def audit(self, limit: int = 100) -> list[AuditRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, at, actor, action, version, previous, forced, reason, detail FROM "
                "model_audit ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [AuditRow(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]), r[7], json.loads(r[8]))
                for r in rows]

    def alarms(self, run_id: int, stream: str) -> list[tuple[float, str, str, str, int, int, str]]:
        """(time, entity, scope, node, level, prev, rule) of a run's stream, oldest first."""
        with self._lock:
            return [tuple(r) for r in self._db.execute(
                "SELECT time, entity, scope, node, level, prev, rule FROM shadow_alarms WHERE "
                "run_id = ? AND stream = ? ORDER BY time", (run_id, stream))]

    # -- changes --------------------------------------------------------------------------
    def shadow(self, version: str, path: str, actor: str, now: float) -> ModelEntry:
        """Make a model the challenger (a running shadow run of another one ends, stopped)."""
        with self.transaction():
            self._end_challenger(now, "stopped")
            entry = int(self._db.execute(
                "INSERT INTO model_entries (version, path, role, since, added_by) "
                "VALUES (?,?,?,?,?) RETURNING id", (version, path, "challenger", now, actor)
            ).fetchone()[0])
            self._db.execute("INSERT INTO shadow_runs (challenger, started_at, updated_at) "
                             "VALUES (?,?,?)", (str(entry), now, now))
            self._audit(now, actor, "shadow", version)
        got = self.challenger()
        assert got is not None
        return got

    def stop(self, actor: str, now: float, reason: str = "") -> ModelEntry:
        """End the shadow run without promoting."""
        ch = self.challenger()
        if ch is None:
            raise RegistryError("no challenger is in shadow")
        with self.transaction():
            self._end_challenger(now, "stopped")
            self._audit(now, actor, "stop", ch.version, reason=reason)
        return ch

    def promote(self, actor: str, now: float, *, current: tuple[str, str], forced: bool,
                reason: str, detail: dict[str, Any]) -> ModelEntry:
        """The challenger becomes active; `current` (version, path) is the model active until
        now, kept for rollback."""
        ch = self.challenger()
        if ch is None:
            raise RegistryError("no challenger to promote: put one in shadow first "
                                "(gpuhealth model shadow PATH)")
        with self.transaction():
            retired = self._retire_active(current, now, actor)
            self._end_challenger(now, "promoted", keep=True)
            self._db.execute("UPDATE model_entries SET role = 'active', since = ? "
                             "WHERE id = ?", (now, ch.id))
            self._audit(now, actor, "promote", ch.version, previous=current[0],
                        forced=forced, reason=reason,
                        detail=detail | {"retired_entry": retired})
        got = self.active()
        assert got is not None
        return got

    def rollback(self, actor: str, now: float, *, current: tuple[str, str],
                 reason: str) -> ModelEntry:
        """The model active before the last promotion or rollback becomes active again."""
        prev = self.previous()
        if prev is None:
            raise RegistryError("nothing to roll back to: no model was active before this one")
        with self.transaction():
            retired = self._retire_active(current, now, actor)
            self._db.execute("UPDATE model_entries SET role = 'active', since = ? "
                             "WHERE id = ?", (now, prev.id))
            self._audit(now, actor, "rollback", prev.version, previous=current[0],
                        reason=reason, detail={"retired_entry": retired})
        got = self.active()
        assert got is not None
        return got

    def add_alarms(self, run_id: int, rows: list[tuple[str, float, str, str, str, int, int, str]],
                   node_seconds: float, now: float) -> None:
        """A tick's level crossings per stream (stream, time, entity, scope, node, level,
        prev, rule), and the node-seconds it observed."""
        with self.transaction():
            self._db.executemany("INSERT INTO shadow_alarms (run_id, stream, time, entity, "
                                 "scope, node, level, prev, rule) VALUES (?,?,?,?,?,?,?,?,?)",
                                 [(run_id, *r) for r in rows])
            self._db.execute("UPDATE shadow_runs SET node_seconds = node_seconds + ?, "
                             "updated_at = ? WHERE id = ?", (node_seconds, now, run_id))

    def restart_run(self, run_id: int, at: float) -> None:
        """The first scored tick of a run (data time) starts its span."""
        with self._lock:
            self._db.execute("UPDATE shadow_runs SET started_at = ?, updated_at = ? WHERE id = ? "
                             "AND node_seconds = 0", (at, at, run_id))

    # -- inside a transaction ---------------------------------------------------------------
    def _retire_active(self, current: tuple[str, str], now: float, actor: str) -> int:
        row = self._db.execute("SELECT id FROM model_entries WHERE role = 'active'").fetchone()
        if row is not None:
            self._db.execute("UPDATE model_entries SET role = 'retired', since = ? WHERE id = ?",
                             (now, row[0]))
            return int(row[0])
        return int(self._db.execute(  # the settings' model, recorded so a rollback finds it
            "INSERT INTO model_entries (version, path, role, since, added_by) VALUES (?,?,?,?,?) "
            "RETURNING id", (current[0], current[1], "retired", now, actor)).fetchone()[0])

    def _end_challenger(self, now: float, outcome: str, keep: bool = False) -> None:
        row = self._db.execute("SELECT id FROM model_entries WHERE role = 'challenger'"
                               ).fetchone()
        if row is None:
            return
        self._db.execute("UPDATE shadow_runs SET ended_at = ?, outcome = ? WHERE challenger = ? "
                         "AND outcome = 'running'", (now, outcome, str(row[0])))
        if not keep:
            self._db.execute("UPDATE model_entries SET role = 'retired', since = ? WHERE id = ?",
                             (now, row[0]))

    def _audit(self, now: float, actor: str, action: str, version: str, *, previous: str = "",
               forced: bool = False, reason: str = "", detail: dict[str, Any] | None = None
               ) -> None:
        self._db.execute(
            "INSERT INTO model_audit (at, actor, action, version, previous, forced, reason, "
            "detail) VALUES (?,?,?,?,?,?,?,?)",
            (now, actor, action, version, previous, int(forced), reason,
             json.dumps(detail or {}, default=str)))
