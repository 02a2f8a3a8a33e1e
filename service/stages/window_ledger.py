"""The raw failure windows each alert showed when it escalated, kept beside the labels so the
service can check its windows against the failures that followed and refit them on its own
fleet (service/stages/window_refit.py), and the calibration it fitted, shared by every replica.

A row per escalation of an entity's alert (a level above the one before), with the raw windows
the detectors held for the entity at that moment (models.predictor.raw_windows.candidates): the
same record the evaluation scores (models.evaluation.events.AlertRecord.windows)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence

from collectors.catalog import Scope
from models.detectors.fusion import ScopeRisk
from models.evaluation.events import AlertRecord
from models.predictor.interval import Calibration, RawWindow
from models.predictor.raw_windows import candidates
from service.stages.alert_machine import Transition
from service.storage.state_db import StateStore, StateTarget

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS alert_windows (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,            -- the escalation
    entity TEXT NOT NULL,
    scope TEXT NOT NULL,
    node TEXT NOT NULL,
    level INTEGER NOT NULL,
    prev INTEGER NOT NULL,
    raws TEXT NOT NULL           -- JSON list of RawWindow
);
CREATE INDEX IF NOT EXISTS alert_windows_at ON alert_windows (at);
CREATE TABLE IF NOT EXISTS window_calibration (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    fitted_at REAL NOT NULL,
    body TEXT NOT NULL           -- models.predictor.interval.Calibration as JSON
);
"""

Probabilities = Callable[[Scope, int], Mapping[str, float] | None]
MAX_ROWS = 200_000  # the newest kept: a year of a busy fleet's escalations


class WindowLedger(StateStore):
    def __init__(self, target: StateTarget = ":memory:") -> None:
        super().__init__(target, _SCHEMA)

    def note(self, transitions: Sequence[Transition], scopes: Mapping[Scope, ScopeRisk],
             probabilities: Probabilities | None) -> int:
        """Record the escalations among `transitions` that carried a raw window; returns how
        many were recorded."""
        rows = []
        for t in transitions:
            if t.new <= t.old or t.derived or t.slot < 0 or t.scope not in scopes:
                continue
            probs = probabilities(t.scope, t.slot) if probabilities is not None else None
            raws = candidates(probs, scopes[t.scope], t.slot)
            if raws:
                rows.append((t.at, t.entity, t.scope.value, t.node, t.new, t.old,
                             json.dumps([r.to_dict() for r in raws], allow_nan=False)))
        if rows:
            with self.transaction() as db:
                db.executemany("INSERT INTO alert_windows (at, entity, scope, node, level, "
                               "prev, raws) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        return len(rows)

    def records(self, since: float, until: float) -> list[AlertRecord]:
        """The escalations of [since, until), oldest first, as the evaluation's records."""
        with self._lock:
            rows = self._db.execute(
                "SELECT at, entity, scope, node, level, prev, raws FROM alert_windows "
                "WHERE at >= ? AND at < ? ORDER BY at, id LIMIT ?",
                (since, until, MAX_ROWS)).fetchall()
        out = []
        for at, entity, scope, node, level, prev, raws in rows:
            try:
                ws = tuple(RawWindow.from_dict(d) for d in json.loads(raws))
                out.append(AlertRecord(float(at), entity, Scope(scope), node, int(level),
                                       int(prev), windows=ws))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("alert window row of %s at %s unreadable: %s", entity, at, exc)
        return out

    def prune(self, before: float) -> int:
        """Forget escalations older than `before`, and all but the newest MAX_ROWS."""
        with self.transaction() as db:
            n = db.execute("DELETE FROM alert_windows WHERE at < ?", (before,)).rowcount
            db.execute("DELETE FROM alert_windows WHERE id <= (SELECT max(id) FROM "
                       "alert_windows) - ?", (MAX_ROWS,))
        return max(0, n)

    def save_calibration(self, cal: Calibration, at: float) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO window_calibration (id, fitted_at, body) VALUES (1, ?, ?) "
                       "ON CONFLICT (id) DO UPDATE SET fitted_at = excluded.fitted_at, "
                       "body = excluded.body", (at, cal.to_json()))

    def calibration(self) -> tuple[float, Calibration] | None:
        """The stored calibration and when it was fitted; None when none was (or it cannot be
        read: then the shipped one stands, and the log says why)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT fitted_at, body FROM window_calibration WHERE id = 1").fetchall()
        if not rows:
            return None
        at, body = rows[0]
        try:
            return float(at), Calibration.from_json(body)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("the stored window calibration cannot be read (%s); using the "
                        "shipped one", exc)
            return None
