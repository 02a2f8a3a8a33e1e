"""The notification log: per receiver and aggregation group, which alerts (at which level and
revision of their hard evidence) the last successful notification reported firing and which
resolved, and when. Dedup reads it before every send, so a restart neither re-pages nor
forgets to send a resolve (Alertmanager's nflog and DedupStage.needsUpdate).

Beside it, in the same database, the outbox: every message is written there (its id and
content) before it is sent, and removed in the transaction that writes its log entries once
the receiver answered. After a crash the rows left are sent again, the same message under the
same id, so a receiver that drops duplicates by id drops exactly the repeats."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from service.storage.state_db import StateStore, StateTarget

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nflog (
    receiver TEXT NOT NULL,
    group_key TEXT NOT NULL,
    firing TEXT NOT NULL,
    resolved TEXT NOT NULL,
    sent_at REAL NOT NULL,
    PRIMARY KEY (receiver, group_key)
);
CREATE TABLE IF NOT EXISTS nflog_outbox (
    id TEXT PRIMARY KEY,
    receiver TEXT NOT NULL,
    group_key TEXT NOT NULL,
    created_at REAL NOT NULL,
    budget_s REAL NOT NULL,
    message TEXT NOT NULL,
    log TEXT NOT NULL
);
"""


class Told(NamedTuple):
    """What a receiver was last told of one firing alert."""

    level: int
    alert_id: int
    revision: str | None = None  # None: logged before revisions existed, matches any
    at: float = 0.0  # when it was first told this level and revision

    def same(self, other: Told) -> bool:
        """Whether `other` (the alert now) says nothing new to a receiver told `self`: the same
        episode (another alert under the same fingerprint is a new one: the storm that ended
        and came back within a group interval) at the same level and revision."""
        return self.alert_id == other.alert_id and self.level == other.level and (
            self.revision is None or other.revision is None or self.revision == other.revision)


@dataclass(frozen=True, slots=True)
class Entry:
    firing: dict[str, Told] = field(default_factory=dict)  # fingerprint -> what was told
    resolved: frozenset[str] = frozenset()
    sent_at: float = 0.0


def news(entry: Entry | None, firing: Mapping[str, Told]) -> bool:
    """A firing alert the receiver was not told of, or told at another level or revision."""
    told = entry.firing if entry is not None else {}
    return any((t := told.get(fp)) is None or not t.same(now) for fp, now in firing.items())


def needs_update(entry: Entry | None, firing: Mapping[str, Told],
                 resolved: set[str], *, send_resolved: bool, repeat_s: float, now: float,
                 all_acked: bool = False) -> bool:
    """Whether a group's current state is worth a message to a receiver."""
    if entry is None:
        return bool(firing)  # never notified: only firing alerts are news
    if news(entry, firing):
        return True  # a new alert, or one at a new level or with new hard evidence
    if not firing:
        # Everything resolved: say so (also clears the log), unless the receiver never heard.
        return bool(entry.firing)
    if send_resolved and not resolved <= entry.resolved:
        return True
    if all_acked:
        return False  # acknowledged until resolved: no repeats
    return entry.sent_at + repeat_s <= now


def encode_entry(e: Entry) -> dict[str, Any]:
    return {"firing": {fp: list(t) for fp, t in e.firing.items()},
            "resolved": sorted(e.resolved), "sent_at": e.sent_at}


def decode_entry(d: Mapping[str, Any]) -> Entry:
    return Entry(_firing(d["firing"], float(d["sent_at"])), frozenset(d["resolved"]),
                 float(d["sent_at"]))


def _firing(raw: Mapping[str, list[Any]], sent_at: float) -> dict[str, Told]:
    # Rows of older releases hold [level, alert id]: their revision is unknown, their time the
    # group's last message.
    return {fp: Told(int(v[0]), int(v[1]), v[2] if len(v) > 2 else None,
                     float(v[3]) if len(v) > 3 else sent_at) for fp, v in raw.items()}


@dataclass(frozen=True, slots=True)
class Staged:
    """An outbox row: a message written before it was sent (service.notify.outbox)."""

    id: str
    receiver: str
    group_key: str
    created_at: float
    budget_s: float
    message: str  # JSON
    log: str  # JSON


class NotificationLog(StateStore):
    def __init__(self, target: StateTarget = ":memory:") -> None:
        super().__init__(target, _SCHEMA)

    def get(self, receiver: str, group_key: str) -> Entry | None:
        with self._lock:
            row = self._db.execute(
                "SELECT firing, resolved, sent_at FROM nflog WHERE receiver = ? AND "
                "group_key = ?", (receiver, group_key)).fetchone()
        return None if row is None else _entry(row)

    def entries(self) -> dict[tuple[str, str], Entry]:
        """Every group's entry by (receiver, group key), in one query (the API's delivery
        column reads them once per request)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT receiver, group_key, firing, resolved, sent_at FROM nflog").fetchall()
        return {(r[0], r[1]): _entry(r[2:]) for r in rows}

    def put(self, receiver: str, group_key: str, entry: Entry) -> None:
        self.put_many([(receiver, group_key, entry)])

    def put_many(self, entries: list[tuple[str, str, Entry]]) -> None:
        """One transaction: the sender reports a batch of deliveries at once."""
        self.settle(entries, ())

    def settle(self, entries: list[tuple[str, str, Entry]], done: Iterable[str]) -> None:
        """One transaction: the log learns what receivers were told, and the outbox forgets
        the messages that were answered (`done`: their ids)."""
        rows = [(receiver, key, json.dumps({k: list(v) for k, v in e.firing.items()}),
                 json.dumps(sorted(e.resolved)), e.sent_at) for receiver, key, e in entries]
        ids = [(i,) for i in done]
        if not rows and not ids:
            return
        with self.transaction() as db:
            if rows:
                db.executemany(
                    "INSERT INTO nflog (receiver, group_key, firing, resolved, sent_at) "
                    "VALUES (?,?,?,?,?) ON CONFLICT (receiver, group_key) DO UPDATE SET "
                    "firing = excluded.firing, resolved = excluded.resolved, "
                    "sent_at = excluded.sent_at", rows)
            if ids:
                db.executemany("DELETE FROM nflog_outbox WHERE id = ?", ids)

    def stage(self, rows: list[Staged]) -> None:
        """Write messages to the outbox before they are sent (one transaction)."""
        if not rows:
            return
        with self.transaction() as db:
            db.executemany(
                "INSERT INTO nflog_outbox (id, receiver, group_key, created_at, budget_s, "
                "message, log) VALUES (?,?,?,?,?,?,?) ON CONFLICT (id) DO NOTHING",
                [(r.id, r.receiver, r.group_key, r.created_at, r.budget_s, r.message, r.log)
                 for r in rows])

    def staged(self) -> list[Staged]:
        """The outbox, oldest first: messages sent or being sent, not yet answered."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, receiver, group_key, created_at, budget_s, message, log "
                "FROM nflog_outbox ORDER BY created_at, id").fetchall()
        return [Staged(str(r[0]), str(r[1]), str(r[2]), float(r[3]), float(r[4]), str(r[5]),
                       str(r[6])) for r in rows]

    def open_groups(self) -> list[tuple[str, str]]:
        """(receiver, group key) of every group whose last message had firing alerts: after a
        restart each must be revisited, so a resolve that happened meanwhile is sent."""
        with self._lock:
            rows = self._db.execute(
                "SELECT receiver, group_key FROM nflog WHERE firing != '{}'").fetchall()
        return [(r[0], r[1]) for r in rows]

    def last_sent(self) -> dict[str, float]:
        """Per receiver, when it was last told anything (by whichever replica led then)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT receiver, max(sent_at) FROM nflog GROUP BY receiver").fetchall()
        return {str(r[0]): float(r[1]) for r in rows}

    def prune(self, before: float) -> int:
        """Forget groups that were last told everything resolved before `before`, and outbox
        rows older than that (a message nobody resent for so long is history)."""
        with self.transaction() as db:
            cur = db.execute("DELETE FROM nflog WHERE firing = '{}' AND sent_at < ?",
                             (before,))
            db.execute("DELETE FROM nflog_outbox WHERE created_at < ?", (before,))
        return cur.rowcount


def _entry(row: tuple[Any, ...]) -> Entry:
    sent_at = float(row[2])
    return Entry(_firing(json.loads(row[0]), sent_at), frozenset(json.loads(row[1])), sent_at)
