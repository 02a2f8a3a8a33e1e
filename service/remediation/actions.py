"""Remediation actions and their audit trail, on the shared state (the service's SQLite
file, or PostgreSQL shared by replicas: service.storage.state_db). An action's id is a hash of
what it is about (node, alert fingerprint, kind, episode), so asking twice for the same episode
finds the first action instead of acting twice; starting one is a compare-and-set on its state,
so two replicas that both see it planned never both run it. The audit table is append-only,
enforced by triggers, so not even a bug in this process can rewrite what was done."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal

from service.errors import Conflict, NotFound
from service.storage.sql import Database
from service.storage.state_db import StateStore, StateTarget

Kind = Literal["migrate", "release"]


class ActionState(StrEnum):
    PLANNED = "planned"
    AWAITING_APPROVAL = "awaiting_approval"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABORTED = "aborted"
    EXPIRED = "expired"
    DRY_RUN = "dry_run"  # what dry-run would have done; terminal


_S = ActionState
INITIAL = frozenset({_S.PLANNED, _S.AWAITING_APPROVAL, _S.DRY_RUN})
_NEXT: dict[ActionState, frozenset[ActionState]] = {
    _S.PLANNED: frozenset({_S.EXECUTING, _S.EXPIRED, _S.ABORTED}),
    _S.AWAITING_APPROVAL: frozenset({_S.PLANNED, _S.EXPIRED, _S.ABORTED}),
    # back to PLANNED: a transient failure to retry, or a restart that reconciled it
    _S.EXECUTING: frozenset({_S.SUCCEEDED, _S.FAILED, _S.ABORTED, _S.EXPIRED, _S.PLANNED}),
}
OPEN = frozenset(_NEXT)  # states that still move


class ActionNotFound(NotFound, LookupError):
    """No such action (the API answers 404)."""

    slug = "action-not-found"


class ActionConflict(Conflict, RuntimeError):
    """The request does not fit the action's state (the API answers 409)."""

    slug = "action-conflict"


def action_id(node: str, fingerprint: str, kind: Kind, episode: str) -> str:
    key = "\x1f".join((node, fingerprint, kind, episode))
    return "act-" + hashlib.sha256(key.encode()).hexdigest()[:20]


@dataclass(frozen=True, slots=True)
class Action:
    id: str
    kind: Kind
    episode: str  # the alert episode (alert id); for a release, the drain action's id
    node: str
    alert_id: int
    fingerprint: str
    summary: str
    mode: str
    state: ActionState
    requested_at: float
    deadline: float | None  # must start by (planned/awaiting) or finish by (executing)
    level: int = 0
    risk: float = 0.0
    approved_at: float | None = None
    attempts: int = 0  # hook executions started
    next_try_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    plan: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    actor: str | None = None  # the human who approved or aborted it
    abort_requested: bool = False
    drained: bool = False  # the hook reported our drain in place
    refusals: list[str] = field(default_factory=list)  # guard reasons already audited

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["state"] = str(self.state)
        return d


@dataclass(frozen=True, slots=True)
class AuditEntry:
    at: float
    actor: str
    event: str  # requested, dry_run, approved, started, succeeded, refused, expired, ...
    action_id: str | None = None
    node: str | None = None
    mode: str | None = None
    dry_run: bool = False
    steps: list[dict[str, Any]] = field(default_factory=list)  # calls made or planned
    result: str = ""
    duration_s: float | None = None
    seq: int = 0  # assigned by the store

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS actions (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL CHECK (kind IN ('migrate', 'release')),
    episode TEXT NOT NULL, node TEXT NOT NULL, alert_id INTEGER NOT NULL,
    fingerprint TEXT NOT NULL, summary TEXT NOT NULL, mode TEXT NOT NULL, state TEXT NOT NULL,
    requested_at REAL NOT NULL, deadline REAL, level INTEGER NOT NULL, risk REAL NOT NULL,
    approved_at REAL, attempts INTEGER NOT NULL, next_try_at REAL, started_at REAL,
    finished_at REAL, plan TEXT NOT NULL, result TEXT, actor TEXT,
    abort_requested INTEGER NOT NULL, drained INTEGER NOT NULL, refusals TEXT NOT NULL,
    UNIQUE (node, fingerprint, kind, episode)
);
CREATE INDEX IF NOT EXISTS actions_state ON actions (state, requested_at);
CREATE INDEX IF NOT EXISTS actions_node ON actions (node, started_at);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, actor TEXT NOT NULL,
    action_id TEXT, node TEXT, event TEXT NOT NULL, mode TEXT, dry_run INTEGER NOT NULL,
    steps TEXT NOT NULL, result TEXT NOT NULL, duration_s REAL
);
CREATE INDEX IF NOT EXISTS audit_action ON audit (action_id, event);
CREATE INDEX IF NOT EXISTS audit_node_event ON audit (node, event, at);
"""
# The audit's guard in each dialect's own words (trigger bodies hold `;`, so neither goes
# through the portable DDL translation).
_SQLITE_TRIGGERS = """
CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END;
"""
_PG_TRIGGERS = (
    "CREATE OR REPLACE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'audit is append-only'; END $$",
    "CREATE OR REPLACE TRIGGER audit_no_update BEFORE UPDATE ON audit "
    "FOR EACH ROW EXECUTE FUNCTION audit_append_only()",
    "CREATE OR REPLACE TRIGGER audit_no_delete BEFORE DELETE ON audit "
    "FOR EACH ROW EXECUTE FUNCTION audit_append_only()",
)
_COLS = [f.name for f in Action.__dataclass_fields__.values()]
_JSON = {"plan", "result", "refusals"}
_BOOL = {"abort_requested", "drained"}


def _encode(name: str, v: Any) -> Any:
    if name in _JSON:
        return None if v is None else json.dumps(v)
    if name in _BOOL:
        return int(v)
    return str(v) if isinstance(v, ActionState) else v


def _action(r: Any) -> Action:
    d: dict[str, Any] = dict(zip(_COLS, r, strict=True))
    for c in _JSON:
        d[c] = None if d[c] is None else json.loads(d[c])
    for c in _BOOL:
        d[c] = bool(d[c])
    d["state"] = ActionState(d["state"])
    return Action(**d)


def write_audit(db: Database, e: AuditEntry) -> None:
    """Append one audit row inside the caller's transaction."""
    db.execute(
        "INSERT INTO audit (at, actor, action_id, node, event, mode, dry_run, steps, result, "
        "duration_s) VALUES (?,?,?,?,?,?,?,?,?,?)",
        (e.at, e.actor, e.action_id, e.node, e.event, e.mode, int(e.dry_run),
         json.dumps(e.steps), e.result, e.duration_s))


class ActionStore(StateStore):
    def __init__(self, target: StateTarget = ":memory:") -> None:
        # API threads read while the scoring tick and hook workers write; one lock serialises.
        super().__init__(target, _SCHEMA)
        self._lock = threading.RLock()  # the controller reads again inside a transaction
        self._depth = 0  # transactions open on this connection (nested ones join the outer)
        if self._db.dialect == "postgres":
            with self._db.transaction() as db:  # serialised: replicas may start together
                for statement in _PG_TRIGGERS:
                    db.execute(statement)
        else:
            self._db.script(_SQLITE_TRIGGERS)

    @contextmanager
    def transaction(self) -> Iterator[Database]:
        """One transaction under the store's lock (also used by the breaker's tables). A
        transaction opened inside one joins it: claiming an action and counting it in the
        breaker's window commit together."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._db
                finally:
                    self._depth -= 1
                return
            self._depth = 1
            try:
                with self._db.transaction() as db:
                    yield db
            finally:
                self._depth = 0

    @contextmanager
    def read(self) -> Iterator[Database]:
        """The connection under the store's lock, for reads outside a transaction."""
        with self._lock:
            yield self._db

    def insert(self, action: Action, audit: AuditEntry) -> tuple[Action, bool]:
        """Store a new action, or return the one already stored for its id (created False)."""
        if action.state not in INITIAL:
            raise ValueError(f"an action cannot start in state {action.state}")
        with self.transaction() as db:
            got = self._get(db, action.id)
            if got is not None:
                return got, False
            db.execute(f"INSERT INTO actions ({', '.join(_COLS)}) VALUES "
                       f"({', '.join('?' * len(_COLS))})",
                       [_encode(c, getattr(action, c)) for c in _COLS])
            write_audit(db, audit)
        return action, True

    def update(self, action_id: str, audit: AuditEntry | None = None, *,
               expect: Action | None = None, **changes: Any) -> Action:
        """Change an action's fields; a state change must be a legal transition. With
        `expect`, only while the stored action is still in that snapshot's state and attempt
        (ActionConflict if another writer, e.g. another replica, moved it first)."""
        unknown = set(changes) - set(_COLS) | ({"id"} & set(changes))
        if unknown:
            raise ValueError(f"cannot update {sorted(unknown)}")
        with self.transaction() as db:
            cur = self._get(db, action_id)
            if cur is None:
                raise ActionNotFound(action_id)
            if expect is not None and (cur.state, cur.attempts) != (expect.state,
                                                                    expect.attempts):
                raise ActionConflict(f"{action_id} moved on to {cur.state} (attempt "
                                     f"{cur.attempts}) before this change")
            if "state" in changes:
                changes["state"] = new = ActionState(changes["state"])
                if new != cur.state and new not in _NEXT.get(cur.state, frozenset()):
                    raise ValueError(f"illegal transition {cur.state} -> {new} of {action_id}")
            if changes:
                db.execute(f"UPDATE actions SET {', '.join(f'{c} = ?' for c in changes)} "
                           "WHERE id = ?", [*(_encode(c, v) for c, v in changes.items()),
                                            action_id])
            if audit is not None:
                write_audit(db, audit)
            return replace(cur, **changes) if changes else cur

    def append_audit(self, entry: AuditEntry) -> None:
        with self.transaction() as db:
            write_audit(db, entry)

    def _get(self, db: Database, action_id: str) -> Action | None:
        r = db.execute(f"SELECT {', '.join(_COLS)} FROM actions WHERE id = ?",
                       (action_id,)).fetchone()
        return None if r is None else _action(r)

    def get(self, action_id: str) -> Action | None:
        with self._lock:
            return self._get(self._db, action_id)

    def find(self, *, state: ActionState | str | None = None, node: str | None = None,
             kind: str | None = None, mode: str | None = None,
             states: frozenset[ActionState] | None = None, limit: int = 100,
             offset: int = 0, after: tuple[float, str] | None = None) -> list[Action]:
        """Newest first (requested_at descending, then id); `after` is the (requested_at, id)
        of the last action of the previous page, a keyset cursor."""
        where: list[str] = []
        args: list[Any] = []
        if after is not None:
            where.append("(requested_at < ? OR (requested_at = ? AND id > ?))")
            args += [after[0], after[0], after[1]]
        for col, val in (("state", state), ("node", node), ("kind", kind), ("mode", mode)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(str(val))
        if states is not None:
            where.append(f"state IN ({', '.join('?' * len(states))})")
            args.extend(str(s) for s in states)
        sql = f"SELECT {', '.join(_COLS)} FROM actions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY requested_at DESC, id LIMIT ? OFFSET ?"
        with self._lock:
            return [_action(r) for r in self._db.execute(sql, (*args, limit, offset))]

    def open_actions(self) -> list[Action]:
        """Actions that still move, oldest first."""
        return sorted(self.find(states=OPEN, limit=1_000_000), key=lambda a: a.requested_at)

    def counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT state, COUNT(*) FROM actions GROUP BY state")
            got = {r[0]: int(r[1]) for r in rows}
        return {str(s): got.get(str(s), 0) for s in ActionState}

    def drains(self, node: str) -> list[Action]:
        """Migrations whose drain of `node` is in place (not released since), newest first."""
        return [a for a in self.find(node=node, kind="migrate", limit=10_000) if a.drained]

    def started_on_node(self, node: str, since: float, *, exclude: str = "") -> int:
        """Migrations started on `node` at or after `since` (the per-node attempt cap)."""
        with self._lock:
            r = self._db.execute(
                "SELECT COUNT(*) FROM actions WHERE node = ? AND kind = 'migrate' AND "
                "started_at >= ? AND id != ?", (node, since, exclude)).fetchone()
        return int(r[0])

    def has_audit(self, action_id: str, event: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM audit WHERE action_id = ? AND event = ? "
                                    "LIMIT 1", (action_id, event)).fetchone() is not None

    def audit(self, *, action_id: str | None = None, node: str | None = None,
              after_seq: int = 0, limit: int = 1000) -> list[AuditEntry]:
        """Oldest first; `after_seq` pages forward (e.g. to export annotations)."""
        where: list[str] = ["seq > ?"]
        args: list[Any] = [after_seq]
        for col, val in (("action_id", action_id), ("node", node)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, at, actor, action_id, node, event, mode, dry_run, steps, result, "
                f"duration_s FROM audit WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?",
                (*args, limit)).fetchall()
        return [AuditEntry(at=r[1], actor=r[2], action_id=r[3], node=r[4], event=r[5],
                           mode=r[6], dry_run=bool(r[7]), steps=json.loads(r[8]),
                           result=r[9], duration_s=r[10], seq=r[0]) for r in rows]
