"""Operators' verdicts on alerts: `failed` (with the mode, and when), `false_alarm`,
`maintenance` or `unknown`. Every verdict is kept (the newest one counts), turned into labels
that replace those of the alert's previous verdict (service.stages.label_store), and written
to the notification log beside the messages about the alert (the `deliveries` table of the
`record` receiver), all in one transaction."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from collectors.labels import FailureMode
from service.notify.record import DELIVERIES_INSERT, DELIVERIES_SQL
from service.stages.alert_store import Alert, AlertStore
from service.stages.label_store import LabelStore, NewLabel, StoredLabel
from service.storage.state_db import StateStore, StateTarget

VerdictName = Literal["failed", "false_alarm", "maintenance", "unknown"]
VERDICTS: tuple[str, ...] = get_args(VerdictName)
MAX_FUTURE_S = 300.0  # a failure time this far past now is a clock or typing error
COMMENT_MAX = 1000

_SCHEMA = DELIVERIES_SQL + """
CREATE TABLE IF NOT EXISTS alert_verdicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    alert_id INTEGER NOT NULL,
    verdict TEXT NOT NULL CHECK (verdict IN ('failed', 'false_alarm', 'maintenance', 'unknown')),
    mode TEXT,                   -- failed: the FailureMode
    failed_at REAL,              -- failed: when the device failed
    comment TEXT NOT NULL DEFAULT '',
    actor TEXT NOT NULL,         -- the token's name, or link:<receiver> for a signed link
    via TEXT NOT NULL CHECK (via IN ('api', 'link')),
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS alert_verdicts_alert ON alert_verdicts (alert_id, id);
CREATE TABLE IF NOT EXISTS verdict_links_used (
    link TEXT PRIMARY KEY,       -- the signature of a verdict link (service.notify.verdict_links)
    verdict_id INTEGER NOT NULL  -- the one verdict it gave
);
"""
_COLS = "id, alert_id, verdict, mode, failed_at, comment, actor, via, at"


class VerdictRefused(ValueError):
    """The verdict cannot be taken as given (the API answers 422 with the reason)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    id: int
    alert_id: int
    verdict: str
    mode: str | None
    failed_at: float | None
    comment: str
    actor: str
    via: str
    at: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class VerdictStore(StateStore):
    """Verdicts in the shared state, with the labels they give."""

    def __init__(self, target: StateTarget, alerts: AlertStore, labels: LabelStore) -> None:
        super().__init__(target, _SCHEMA)
        self.alerts = alerts
        self.labels = labels

    def give(self, alert_id: int, verdict: str, *, actor: str, via: str, now: float,
             mode: str | None = None, failed_at: float | None = None,
             comment: str = "", link: str | None = None) -> tuple[Verdict, list[StoredLabel]]:
        """Record a verdict; KeyError for an unknown alert, VerdictRefused for a bad one or
        for a `link` (a verdict link's signature) that gave its one verdict already."""
        alert = self.alerts.get(alert_id)
        if alert is None:
            raise KeyError(alert_id)
        if verdict not in VERDICTS:
            raise VerdictRefused(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
        if len(comment) > COMMENT_MAX:
            raise VerdictRefused(f"comment is longer than {COMMENT_MAX} characters")
        if verdict != "failed":
            if mode is not None or failed_at is not None:
                raise VerdictRefused("mode and time belong to a `failed` verdict only")
        else:
            mode, failed_at = self._failure(alert, mode, failed_at, now)
        with self.transaction():
            if link is not None and (used := self._used(link)) is not None:
                raise VerdictRefused(f"this link gave its verdict already ({used.verdict} at "
                                     f"{used.at:.0f}): a new one goes through the API")
            cur = self._db.execute(
                "INSERT INTO alert_verdicts (alert_id, verdict, mode, failed_at, comment, "
                "actor, via, at) VALUES (?,?,?,?,?,?,?,?) RETURNING id",
                (alert_id, verdict, mode, failed_at, comment, actor, via, now))
            vid = int(cur.fetchone()[0])
            if link is not None:
                self._db.execute("INSERT INTO verdict_links_used (link, verdict_id) "
                                 "VALUES (?, ?)", (link, vid))
            title = (f"Verdict on alert {alert_id} ({alert.entity}): {verdict}"
                     f"{f' ({mode})' if mode else ''} by {actor}")
            body = json.dumps({"alert_id": alert_id, "fingerprint": alert.fingerprint,
                               "verdict": verdict, "mode": mode, "failed_at": failed_at,
                               "comment": comment, "via": via})
            self._db.execute(DELIVERIES_INSERT,
                             (now, "verdict", "verdict", f"alert:{alert_id}",
                              alert.peak_level, verdict, 1, title, body))
            got = self._get(vid)
        # The labels follow in the label store's own transaction: a crash between the two
        # leaves a verdict whose labels the next verdict (or `gpuhealth labels` repair) gives.
        stored = self.labels.replace_verdict(alert_id, labels_of(alert, got, now), now)
        return got, stored

    def _failure(self, alert: Alert, mode: str | None, failed_at: float | None,
                 now: float) -> tuple[str, float]:
        """A failed verdict's mode and time: as given, else those of the alert's own auto
        failure label, else (the time only) the alert's end or now."""
        auto = [lb for lb in self.labels.find(alert_id=alert.id, kind="failure")
                if lb.source != "verdict"]
        if mode is None:
            if not auto or auto[0].mode is None:
                raise VerdictRefused(
                    "a `failed` verdict needs its mode (one of "
                    f"{', '.join(m.value for m in FailureMode)}): no hard rule saw this one fail")
            mode = str(auto[0].mode)
        try:
            FailureMode(mode)
        except ValueError:
            raise VerdictRefused(f"mode {mode!r} is not one of "
                                 f"{', '.join(m.value for m in FailureMode)}") from None
        if failed_at is None:
            failed_at = auto[0].time if auto else (alert.resolved_at or now)
        if not math.isfinite(failed_at) or failed_at <= 0 or failed_at > now + MAX_FUTURE_S:
            raise VerdictRefused(f"failure time {failed_at} is not a past epoch time")
        return mode, float(failed_at)

    def _used(self, link: str) -> Verdict | None:
        r = self._db.execute("SELECT verdict_id FROM verdict_links_used WHERE link = ?",
                             (link,)).fetchone()
        return None if r is None else self._get(int(r[0]))

    def link_used(self, link: str) -> Verdict | None:
        """The verdict a verdict link gave, or None while it has given none."""
        with self._lock:
            return self._used(link)

    def _get(self, vid: int) -> Verdict:
        r = self._db.execute(f"SELECT {_COLS} FROM alert_verdicts WHERE id = ?",
                             (vid,)).fetchone()
        return Verdict(*r)

    def latest(self, alert_id: int) -> Verdict | None:
        with self._lock:
            r = self._db.execute(f"SELECT {_COLS} FROM alert_verdicts WHERE alert_id = ? "
                                 "ORDER BY id DESC LIMIT 1", (alert_id,)).fetchone()
        return None if r is None else Verdict(*r)

    def history(self, alert_id: int) -> list[Verdict]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLS} FROM alert_verdicts WHERE alert_id = ? "
                                    "ORDER BY id", (alert_id,)).fetchall()
        return [Verdict(*r) for r in rows]


def labels_of(alert: Alert, v: Verdict, now: float) -> list[NewLabel]:
    """What a verdict says for training: a failure, or the alert's span as a benign pattern the
    detectors must not flag (a false alarm; maintenance, which is no failure of the hardware);
    `unknown` says nothing."""
    detail = f"{v.verdict} by {v.actor}" + (f": {v.comment}" if v.comment else "")
    if v.verdict == "failed":
        assert v.mode is not None and v.failed_at is not None
        return [NewLabel("failure", v.failed_at, alert.node, alert.entity, alert.scope,
                         "verdict", mode=FailureMode(v.mode), detail=detail,
                         alert_id=alert.id)]
    if v.verdict in ("false_alarm", "maintenance"):
        end = alert.resolved_at if alert.resolved_at is not None else now
        return [NewLabel("benign", alert.started_at, alert.node, alert.entity, alert.scope,
                         "verdict", action=v.verdict, end_time=end, detail=detail,
                         alert_id=alert.id)]
    return []
