"""Blast-radius circuit breaker. When many nodes look bad at once the likely cause is shared
(a bad driver rollout, a fabric problem, our own model) and draining them all would take the
cluster down, so automatic action stops. Like NVSentinel's breaker it never closes by itself:
an admin resets it after looking. Its state and window live in the actions database, so a
restart cannot close it either, and replicas sharing PostgreSQL share one breaker."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from service.remediation.actions import ActionStore, AuditEntry, write_audit
from service.remediation.config import RemediationSettings
from service.storage.sql import pg_ddl

_SCHEMA = """
CREATE TABLE IF NOT EXISTS breaker_state (
    id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL CHECK (state IN ('closed', 'open')),
    reason TEXT NOT NULL, tripped_at REAL, tripped_by TEXT, reset_at REAL, reset_by TEXT
);
INSERT INTO breaker_state (id, state, reason) VALUES (1, 'closed', '')
ON CONFLICT (id) DO NOTHING;
CREATE TABLE IF NOT EXISTS breaker_window (
    node TEXT NOT NULL, action_id TEXT NOT NULL, at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS breaker_window_at ON breaker_window (at);
"""

SYSTEM = "gpuhealth"  # the actor of automatic side effects


@dataclass(frozen=True, slots=True)
class BreakerStatus:
    state: Literal["closed", "open"]
    reason: str
    tripped_at: float | None
    tripped_by: str | None
    reset_at: float | None
    reset_by: str | None
    nodes_in_window: list[str] = field(default_factory=list)
    window_s: float = 0.0
    max_nodes: int = 0
    max_fraction: float = 0.0
    fleet_size: int | None = None
    allowed_nodes: int | None = None  # nodes the window may hold for this fleet size

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class CircuitBreaker:
    def __init__(self, store: ActionStore, settings: RemediationSettings) -> None:
        self._store = store
        self._max_fraction = settings.breaker_max_fraction
        self._max_nodes = settings.breaker_max_nodes
        self._window_s = settings.breaker_window_s
        with store.transaction() as db:  # statement by statement: a script would commit
            statements = (pg_ddl(_SCHEMA) if db.dialect == "postgres" else
                          [s for s in _SCHEMA.split(";") if s.strip()])
            for stmt in statements:
                db.execute(stmt)

    def _row(self) -> tuple[str, str, float | None, str | None, float | None, str | None]:
        with self._store.read() as db:
            r = db.execute("SELECT state, reason, tripped_at, tripped_by, reset_at, reset_by "
                           "FROM breaker_state WHERE id = 1").fetchone()
        return r[0], r[1], r[2], r[3], r[4], r[5]

    @property
    def is_open(self) -> bool:
        return self._row()[0] == "open"

    @property
    def last_reset_at(self) -> float | None:
        """Actions requested before this were queued behind the open breaker: never run them."""
        return self._row()[4]

    def nodes_in_window(self, now: float) -> list[str]:
        # A reset starts a fresh window, or the breaker would re-trip on the very next node.
        since = max(now - self._window_s, self.last_reset_at or float("-inf"))
        with self._store.read() as db:
            rows = db.execute("SELECT DISTINCT node FROM breaker_window WHERE at > ?",
                              (since,)).fetchall()
        return sorted(r[0] for r in rows)  # by code point on both (a collation may differ)

    def allowed(self, fleet_size: int) -> int:
        """How many distinct nodes the window may hold: the tighter of both bounds."""
        return min(self._max_nodes, int(self._max_fraction * fleet_size + 1e-9))

    def admit(self, node: str, fleet_size: int, now: float, *, trip: bool = True) -> str | None:
        """None if acting on `node` now stays within the limits; else why not. Exceeding a
        limit trips the breaker unless `trip` is False (dry runs only look)."""
        state, reason, *_ = self._row()
        if state == "open":
            return f"circuit breaker open: {reason}"
        if fleet_size <= 0:
            return "fleet size unknown: no telemetry yet"
        window = self.nodes_in_window(now)
        if node in window:
            return None  # the same node again does not widen the blast radius
        n = len(window) + 1
        why = ""
        if n > self._max_nodes:
            why = f"{n} nodes in {self._window_s:g} s would exceed max_nodes={self._max_nodes}"
        elif n > self._max_fraction * fleet_size + 1e-9:
            why = (f"{n} of {fleet_size} nodes in {self._window_s:g} s would exceed "
                   f"max_fraction={self._max_fraction:g}")
        if not why:
            return None
        if trip:
            self.trip(why, now)
        return f"circuit breaker open: {why}"

    def record(self, node: str, action_id: str, now: float) -> None:
        """Count `node` as acted on (called as an execution starts)."""
        with self._store.transaction() as db:
            db.execute("INSERT INTO breaker_window (node, action_id, at) VALUES (?,?,?)",
                       (node, action_id, now))

    def trip(self, reason: str, now: float, actor: str = SYSTEM) -> bool:
        """Open the breaker (a fleet-wide alert storm does this too). False if already open:
        the first reason is the one worth reading."""
        with self._store.transaction() as db:
            cur = db.execute("UPDATE breaker_state SET state = 'open', reason = ?, "
                             "tripped_at = ?, tripped_by = ? WHERE id = 1 AND state = 'closed'",
                             (reason, now, actor))
            if cur.rowcount == 0:
                return False
            write_audit(db, AuditEntry(at=now, actor=actor, event="breaker_tripped",
                                       result=reason))
        return True

    def reset(self, actor: str, now: float) -> bool:
        """An admin closes the breaker. Actions requested before now will expire instead of
        running (NVSentinel #450: a reset replayed days-old events). False if it was closed."""
        with self._store.transaction() as db:
            cur = db.execute("UPDATE breaker_state SET state = 'closed', reset_at = ?, "
                             "reset_by = ? WHERE id = 1 AND state = 'open'", (now, actor))
            if cur.rowcount == 0:
                return False
            write_audit(db, AuditEntry(at=now, actor=actor, event="breaker_reset"))
        return True

    def status(self, now: float | None = None, fleet_size: int | None = None) -> BreakerStatus:
        state, reason, tripped_at, tripped_by, reset_at, reset_by = self._row()
        at = time.time() if now is None else now
        return BreakerStatus(
            state="open" if state == "open" else "closed", reason=reason,
            tripped_at=tripped_at, tripped_by=tripped_by, reset_at=reset_at, reset_by=reset_by,
            nodes_in_window=self.nodes_in_window(at), window_s=self._window_s,
            max_nodes=self._max_nodes, max_fraction=self._max_fraction, fleet_size=fleet_size,
            allowed_nodes=None if fleet_size is None else self.allowed(fleet_size))
