"""Alerts persisted in the shared state (the SQLite file, or PostgreSQL shared by replicas): one
row per alert episode of an instance, plus its history of level changes, its flags (flapping,
stale telemetry, corroborated) and its acknowledgement. A restart reloads the open alerts so it
neither re-pages nor loses a resolve."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from collectors.catalog import Scope
from models.detectors.findings import Signal
from service.stages.alert_identity import identity_fingerprint
from service.stages.alert_machine import Transition
from service.storage.state_db import StateStore, StateTarget

_SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    entity TEXT NOT NULL,
    scope TEXT NOT NULL,
    node TEXT NOT NULL,
    level INTEGER NOT NULL,
    peak_level INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('firing', 'resolved')),
    risk REAL NOT NULL,
    started_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    resolved_at REAL,
    explanation TEXT NOT NULL,
    alertname TEXT NOT NULL DEFAULT '',
    flapping INTEGER NOT NULL DEFAULT 0,
    stale INTEGER NOT NULL DEFAULT 0,
    corroborated INTEGER NOT NULL DEFAULT 0,
    acked_by TEXT,
    acked_at REAL,
    ack_comment TEXT
);
CREATE INDEX IF NOT EXISTS alerts_open ON alerts (state, entity);
CREATE INDEX IF NOT EXISTS alerts_node ON alerts (node, started_at);
CREATE TABLE IF NOT EXISTS alert_events (
    alert_id INTEGER NOT NULL REFERENCES alerts (id),
    at REAL NOT NULL,
    old_level INTEGER NOT NULL,
    new_level INTEGER NOT NULL,
    risk REAL NOT NULL
);
"""


# Columns added after the first release: an older SQLite file gains them at open (no release
# wrote these tables to PostgreSQL without them).
_ADDED = {"alertname": "TEXT NOT NULL DEFAULT ''", "flapping": "INTEGER NOT NULL DEFAULT 0",
          "stale": "INTEGER NOT NULL DEFAULT 0", "corroborated": "INTEGER NOT NULL DEFAULT 0",
          "acked_by": "TEXT", "acked_at": "REAL", "ack_comment": "TEXT"}

# A risk alert's name by its entity's scope; NodeAtRisk is the node's own sensors' (its inlet
# temperature, redundancy, host memory errors, SXids): node and fleet alerts that predict no
# failure (NodeNoData, FleetStorm) carry their own name.
ALERTNAMES = {Scope.GPU: "GpuFailureRisk", Scope.NVLINK: "NvlinkFailureRisk",
              Scope.IB_PORT: "IbPortFailureRisk", Scope.PSU: "PsuFailureRisk",
              Scope.FAN: "FanFailureRisk", Scope.NODE: "NodeAtRisk"}


@functools.lru_cache(maxsize=1 << 16)  # every flush asks for every firing alert's
def fingerprint(alertname: str, entity: str) -> str:
    """An instance's identity: its identifying labels (Alertmanager: labels identify)."""
    return identity_fingerprint({"alertname": alertname, "entity": entity})


@dataclass(frozen=True, slots=True)
class Alert:
    id: int
    entity: str
    scope: Scope
    node: str
    level: int
    peak_level: int
    state: str
    risk: float
    started_at: float
    updated_at: float
    resolved_at: float | None
    explanation: list[dict[str, Any]]
    alertname: str = ""
    flapping: bool = False
    stale: bool = False
    corroborated: bool = False
    acked_by: str | None = None
    acked_at: float | None = None
    ack_comment: str | None = None

    @property
    def name(self) -> str:
        return self.alertname or ALERTNAMES.get(self.scope, "FailureRisk")

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.name, self.entity)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "alertname": self.name, "fingerprint": self.fingerprint,
            "entity": self.entity, "scope": str(self.scope), "node": self.node,
            "level": self.level, "peak_level": self.peak_level, "state": self.state,
            "risk": self.risk, "started_at": self.started_at, "updated_at": self.updated_at,
            "resolved_at": self.resolved_at, "explanation": self.explanation,
            "flapping": self.flapping, "stale": self.stale, "corroborated": self.corroborated,
            "acked_by": self.acked_by, "acked_at": self.acked_at, "ack_comment": self.ack_comment,
        }


_COLS = ("id, entity, scope, node, level, peak_level, state, risk, started_at, updated_at, "
         "resolved_at, explanation, alertname, flapping, stale, corroborated, acked_by, "
         "acked_at, ack_comment")


def _row(r: tuple[Any, ...]) -> Alert:
    return Alert(r[0], r[1], Scope(r[2]), r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10],
                 json.loads(r[11]), r[12], bool(r[13]), bool(r[14]), bool(r[15]), r[16], r[17],
                 r[18])


# An alert's history reads in the order it was written: SQLite's rowid says so; PostgreSQL
# has no rowid, so there the events table gains a sequence of its own.
_PG_EVENT_SEQ = ("ALTER TABLE alert_events ADD COLUMN IF NOT EXISTS seq BIGINT "
                 "GENERATED BY DEFAULT AS IDENTITY")
_EVENT_ORDER = {"sqlite": "rowid", "postgres": "seq"}


class AlertStore(StateStore):
    def __init__(self, target: StateTarget = ":memory:") -> None:
        super().__init__(target, _SCHEMA)
        if self._db.dialect == "sqlite":
            have = self._db.columns("alerts")
            for col, decl in _ADDED.items():
                if col not in have:
                    self._db.execute(f"ALTER TABLE alerts ADD COLUMN {col} {decl}")
        elif "seq" not in self._db.columns("alert_events"):
            with self._db.transaction():  # replicas starting together add it once
                self._db.execute(_PG_EVENT_SEQ)

    def apply(self, transitions: list[Transition],
              explain: dict[tuple[str, str], list[Signal]]) -> list[tuple[Transition, Alert]]:
        """Record level changes; returns each transition with the alert it opened or changed.
        `explain`: signals by (alertname, entity) of the transition (a GPU can have its risk
        alert and a GpuMissing alert at once)."""
        out: list[tuple[Transition, Alert]] = []
        with self.transaction():
            for t in transitions:
                out.append((t, self._apply_one(t, explain.get((t.alertname, t.entity), []))))
        return out

    def _apply_one(self, t: Transition, signals: list[Signal]) -> Alert:
        expl = json.dumps([s.as_dict() for s in signals])
        name = t.alertname or ALERTNAMES.get(t.scope, "FailureRisk")
        cur = self._db.execute(
            f"SELECT {_COLS} FROM alerts WHERE entity = ? AND state = 'firing' AND "
            "alertname IN (?, '')", (t.entity, name))
        row = cur.fetchone()
        if row is None:
            if t.new == 0:
                raise ValueError(f"resolve of {t.entity} without an open alert")
            cur = self._db.execute(
                "INSERT INTO alerts (entity, scope, node, level, peak_level, state, risk, "
                "started_at, updated_at, explanation, alertname, flapping, corroborated) "
                "VALUES (?,?,?,?,?,'firing',?,?,?,?,?,?,?) RETURNING id",
                (t.entity, str(t.scope), t.node, t.new, t.new, t.risk, t.at, t.at, expl, name,
                 int(t.flapping),
                 int(t.corroborated)))
            alert_id = int(cur.fetchone()[0])
        else:
            alert_id = row[0]
            if t.new == 0:
                self._db.execute(
                    "UPDATE alerts SET level = 0, state = 'resolved', risk = ?, updated_at = ?, "
                    "resolved_at = ? WHERE id = ?", (t.risk, t.at, t.at, alert_id))
            else:
                # The row was read in this transaction: its peak and corroboration stand.
                self._db.execute(
                    "UPDATE alerts SET level = ?, peak_level = ?, risk = ?, "
                    "updated_at = ?, explanation = ?, flapping = ?, "
                    "corroborated = ? WHERE id = ?",
                    (t.new, max(row[5], t.new), t.risk, t.at, expl, int(t.flapping),
                     max(row[15], int(t.corroborated)), alert_id))
        self._db.execute("INSERT INTO alert_events (alert_id, at, old_level, new_level, risk) "
                         "VALUES (?,?,?,?,?)", (alert_id, t.at, t.old, t.new, t.risk))
        got = self.get_unlocked(alert_id)
        assert got is not None
        return got

    def get_unlocked(self, alert_id: int) -> Alert | None:
        r = self._db.execute(f"SELECT {_COLS} FROM alerts WHERE id = ?", (alert_id,)).fetchone()
        return None if r is None else _row(r)

    def get(self, alert_id: int) -> Alert | None:
        with self._lock:
            return self.get_unlocked(alert_id)

    def find(self, *, level: int | None = None, state: str | None = None,
             node: str | None = None, entity: str | None = None, limit: int = 100,
             offset: int = 0, before: tuple[float, int] | None = None) -> list[Alert]:
        """Newest first (started_at, then id, descending); `before` is the (started_at, id)
        of the last alert of the previous page, a keyset cursor."""
        where: list[str] = []
        args: list[object] = []
        if before is not None:
            where.append("(started_at < ? OR (started_at = ? AND id < ?))")
            args += [before[0], before[0], before[1]]
        for col, val in (("state", state), ("node", node), ("entity", entity)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        if level is not None:
            where.append("peak_level >= ?")
            args.append(level)
        sql = f"SELECT {_COLS} FROM alerts"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at DESC, id DESC LIMIT ? OFFSET ?"
        with self._lock:
            return [_row(r) for r in self._db.execute(sql, (*args, limit, offset))]

    def open_alerts(self) -> list[Alert]:
        return self.find(state="firing", limit=1_000_000)

    def history(self, alert_id: int) -> list[dict[str, float]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT at, old_level, new_level, risk FROM alert_events WHERE alert_id = ? "
                f"ORDER BY {_EVENT_ORDER[self._db.dialect]}", (alert_id,)).fetchall()
        return [{"at": r[0], "old_level": r[1], "new_level": r[2], "risk": r[3]} for r in rows]

    def set_flags(self, entity: str, *, flapping: bool, stale: bool, at: float) -> Alert | None:
        """Mark the open alert of an entity flapping or stale; None when it has none."""
        with self.transaction():
            row = self._db.execute(
                "SELECT id FROM alerts WHERE entity = ? AND state = 'firing'", (entity,)).fetchone()
            if row is None:
                return None
            self._db.execute("UPDATE alerts SET flapping = ?, stale = ?, updated_at = ? "
                             "WHERE id = ?", (int(flapping), int(stale), at, row[0]))
            return self.get_unlocked(row[0])

    def set_explanation(self, alert_id: int, explanation: list[dict[str, Any]],
                        at: float) -> Alert | None:
        """Rewrite a firing alert's explanation without a level change (the storm's list of
        the hard faults under it); None when it is no longer firing."""
        with self.transaction():
            got = self.get_unlocked(alert_id)
            if got is None or got.state != "firing":
                return None
            self._db.execute("UPDATE alerts SET explanation = ?, updated_at = ? WHERE id = ?",
                             (json.dumps(explanation), at, alert_id))
            return self.get_unlocked(alert_id)

    def ack(self, alert_id: int, actor: str, comment: str, at: float) -> Alert:
        """Acknowledge a firing alert until it resolves: repeats stop, a new level re-arms."""
        with self.transaction():  # not resolved meanwhile by another replica
            got = self.get_unlocked(alert_id)
            if got is None:
                raise KeyError(alert_id)
            if got.state != "firing":
                raise ValueError(f"alert {alert_id} is {got.state}, not firing")
            self._db.execute("UPDATE alerts SET acked_by = ?, acked_at = ?, ack_comment = ? "
                             "WHERE id = ?", (actor, at, comment, alert_id))
            out = self.get_unlocked(alert_id)
            assert out is not None
            return out

    def recent(self, since: float) -> list[Alert]:
        """Firing alerts and those resolved at or after `since`: what the notifier groups."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLS} FROM alerts WHERE state = 'firing' OR resolved_at >= ?",
                (since,)).fetchall()
        return [_row(r) for r in rows]
