"""Labels learned from the fleet, kept beside the alerts: failures the hard rules saw (each with
its entity, mode and time, and the alert it fired), repairs (a condition that cleared, a node
returned to service) and the labels operators' verdicts give. `gpuhealth labels export` writes
them as a labels.jsonl (docs/trace-format.md) that `gpuhealth train` reads.

An auto failure is an episode: it opens when its rule first fires on an entity and stays open
while the evidence holds, so a rule firing on every tick (or again after a restart) is one label.
A verdict's labels are withdrawn, not deleted, when a later verdict on the same alert replaces
it; and a `false_alarm` or `maintenance` verdict overrules the auto failures of its alert."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from collectors.catalog import Scope
from collectors.labels import FailureMode, Label
from service.storage.state_db import StateStore, StateTarget

log = logging.getLogger(__name__)
Kind = Literal["failure", "benign", "repair"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS labels (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL CHECK (kind IN ('failure', 'benign', 'repair')),
    time REAL NOT NULL,          -- the failure or repair; a benign span's start
    end_time REAL,               -- a benign span's end
    node TEXT NOT NULL,
    entity TEXT NOT NULL,
    scope TEXT NOT NULL,
    mode TEXT,                   -- FailureMode of a failure (and of a repair, when known)
    action TEXT,                 -- a repair's action; a benign span's trap
    source TEXT NOT NULL,        -- rule:<rule>, missing, no_data, verdict, remediation
    detail TEXT NOT NULL DEFAULT '',
    alert_id INTEGER,
    episode_open INTEGER NOT NULL DEFAULT 0,  -- an auto failure whose evidence still holds
    withdrawn_at REAL,           -- a verdict's label, replaced by a later verdict
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS labels_time ON labels (time);
CREATE INDEX IF NOT EXISTS labels_alert ON labels (alert_id);
CREATE INDEX IF NOT EXISTS labels_episode ON labels (episode_open, entity);
"""

_COLS = ("id, kind, time, end_time, node, entity, scope, mode, action, source, detail, "
         "alert_id, episode_open, withdrawn_at, created_at")
# Verdicts that say an alert's auto failures were not failures of the hardware.
OVERRULING = ("false_alarm", "maintenance")


@dataclass(frozen=True, slots=True)
class StoredLabel:
    id: int
    kind: Kind
    time: float
    end_time: float | None
    node: str
    entity: str
    scope: Scope
    mode: FailureMode | None
    action: str | None
    source: str
    detail: str
    alert_id: int | None
    open: bool
    withdrawn_at: float | None
    created_at: float

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "time": self.time, "end_time": self.end_time,
                "node": self.node, "entity": self.entity, "scope": str(self.scope),
                "mode": None if self.mode is None else str(self.mode), "action": self.action,
                "source": self.source, "detail": self.detail, "alert_id": self.alert_id,
                "open": self.open, "withdrawn_at": self.withdrawn_at,
                "created_at": self.created_at}

    def label(self) -> Label:
        """As a labels.jsonl label; where it came from rides along as extra keys."""
        extra: dict[str, Any] = {"source": self.source, "label_id": self.id}
        if self.alert_id is not None:
            extra["alert_id"] = self.alert_id
        if self.kind == "failure":
            return Label("failure", self.node, self.entity, self.scope, time=self.time,
                         mode=self.mode, extra=extra)
        if self.kind == "repair":
            return Label("repair", self.node, self.entity, self.scope, time=self.time,
                         mode=self.mode, action=self.action or "unknown", extra=extra)
        return Label("benign", self.node, self.entity, self.scope, trap=self.action or "unknown",
                     start=self.time, end=self.end_time, extra=extra)


def _row(r: tuple[Any, ...]) -> StoredLabel:
    return StoredLabel(int(r[0]), r[1], float(r[2]), r[3], r[4], r[5], Scope(r[6]),
                       None if r[7] is None else FailureMode(r[7]), r[8], r[9], r[10], r[11],
                       bool(r[12]), r[13], float(r[14]))


@dataclass(frozen=True, slots=True)
class NewLabel:
    """A label to add: what the auto-labeller and the verdicts hand the store."""

    kind: Kind
    time: float
    node: str
    entity: str
    scope: Scope
    source: str
    mode: FailureMode | None = None
    action: str | None = None
    end_time: float | None = None
    detail: str = ""
    alert_id: int | None = None
    episode: bool = False  # opens an episode (an auto failure whose evidence still holds)
    extra: dict[str, Any] = field(default_factory=dict)


MAX_PENDING = 100_000  # changes kept for the next tick; past this the oldest are dropped


class LabelStore(StateStore):
    def __init__(self, target: StateTarget = ":memory:") -> None:
        super().__init__(target, _SCHEMA)
        self._pending: list[StoredLabel] = []  # added or withdrawn since the last drain

    def drain(self) -> list[StoredLabel]:
        """Labels added or withdrawn since the last call (auto or by verdict), for the tick's
        result: the InfluxDB recorder writes them beside the scores."""
        with self._lock:
            out, self._pending = self._pending, []
        return out

    def _note(self, labels: list[StoredLabel]) -> None:
        self._pending += labels
        if len(self._pending) > MAX_PENDING:
            log.warning("%d label changes were never drained; dropping the oldest",
                        len(self._pending) - MAX_PENDING)
            del self._pending[: len(self._pending) - MAX_PENDING]

    def add(self, labels: Sequence[NewLabel], now: float,
            close: Sequence[int] = ()) -> list[StoredLabel]:
        """Add labels and close the episodes `close` names, in one transaction."""
        if not labels and not close:
            return []
        with self.transaction():
            ids = [self._insert(lb, now) for lb in labels]
            self._db.executemany("UPDATE labels SET episode_open = 0 WHERE id = ?",
                                 [(i,) for i in close])
            out = self._by_ids(ids)
            self._note(out)
            return out

    def _insert(self, lb: NewLabel, now: float) -> int:
        detail = lb.detail if not lb.extra else json.dumps({"text": lb.detail, **lb.extra})
        cur = self._db.execute(
            "INSERT INTO labels (kind, time, end_time, node, entity, scope, mode, action, "
            "source, detail, alert_id, episode_open, created_at) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id",
            (lb.kind, lb.time, lb.end_time, lb.node, lb.entity, str(lb.scope),
             None if lb.mode is None else str(lb.mode), lb.action, lb.source, detail[:2000],
             lb.alert_id, int(lb.episode), now))
        return int(cur.fetchone()[0])

    def _by_ids(self, ids: list[int]) -> list[StoredLabel]:
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self._db.execute(f"SELECT {_COLS} FROM labels WHERE id IN ({marks}) ORDER BY id",
                                ids).fetchall()
        return [_row(r) for r in rows]

    def open_episodes(self) -> list[StoredLabel]:
        """Auto failures whose evidence held at the last look: the labeller's memory across a
        restart, so a rule still firing after it is not labelled a second time."""
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLS} FROM labels WHERE episode_open = 1 "
                                    "ORDER BY id").fetchall()
        return [_row(r) for r in rows]

    def replace_verdict(self, alert_id: int, labels: Sequence[NewLabel],
                        now: float) -> list[StoredLabel]:
        """The labels of an alert's newest verdict: those of an earlier verdict are withdrawn
        in the same transaction."""
        with self.transaction():
            gone = [r[0] for r in self._db.execute(
                "SELECT id FROM labels WHERE alert_id = ? AND source = 'verdict' AND "
                "withdrawn_at IS NULL", (alert_id,))]
            self._db.executemany("UPDATE labels SET withdrawn_at = ? WHERE id = ?",
                                 [(now, i) for i in gone])
            ids = [self._insert(lb, now) for lb in labels]
            out = self._by_ids(ids)
            self._note(self._by_ids(gone) + out)
            return out

    def find(self, *, since: float | None = None, until: float | None = None,
             kind: str | None = None, entity: str | None = None, node: str | None = None,
             alert_id: int | None = None, withdrawn: bool = False, overruled: bool = True,
             after: tuple[float, int] | None = None, limit: int = 1000) -> list[StoredLabel]:
        """Oldest first (time, then id); `after` is the (time, id) of the last label of the
        previous page. `overruled=False` leaves out the auto failures of alerts an operator
        called a false alarm or maintenance (what training and export want); withdrawn verdict
        labels are left out unless asked for."""
        where: list[str] = []
        args: list[object] = []
        for col, op, val in (("time", ">=", since), ("time", "<", until), ("kind", "=", kind),
                             ("entity", "=", entity), ("node", "=", node),
                             ("alert_id", "=", alert_id)):
            if val is not None:
                where.append(f"{col} {op} ?")
                args.append(val)
        if after is not None:
            where.append("(time > ? OR (time = ? AND id > ?))")
            args += [after[0], after[0], after[1]]
        if not withdrawn:
            where.append("withdrawn_at IS NULL")
        if not overruled:
            marks = ",".join("?" * len(OVERRULING))
            # A failure without an alert is nobody's to overrule: `NULL IN (...)` is NULL, and
            # NOT NULL would drop it as soon as any alert had such a verdict.
            where.append(
                "NOT (source != 'verdict' AND kind = 'failure' AND alert_id IS NOT NULL AND "
                "alert_id IN (SELECT alert_id "
                "FROM labels v WHERE v.source = 'verdict' AND v.withdrawn_at IS NULL AND "
                f"v.kind = 'benign' AND v.action IN ({marks})))")
            args += list(OVERRULING)
        sql = f"SELECT {_COLS} FROM labels"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY time, id LIMIT ?"
        with self._lock:
            return [_row(r) for r in self._db.execute(sql, (*args, limit))]

    def counts(self, since: float | None = None) -> dict[str, int]:
        """Failure labels per mode (withdrawn and overruled ones aside): what a model card and
        `gpuhealth labels` report."""
        out: dict[str, int] = {}
        for lb in self.find(since=since, kind="failure", overruled=False, limit=10_000_000):
            key = "unknown" if lb.mode is None else str(lb.mode)
            out[key] = out.get(key, 0) + 1
        return out
