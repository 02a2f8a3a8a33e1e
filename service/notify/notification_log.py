"""The notification log: per receiver and aggregation group, which alerts (at which level) the
last successful notification reported firing and which resolved, and when. Dedup reads it
before every send, so a restart neither re-pages nor forgets to send a resolve
(Alertmanager's nflog and DedupStage.needsUpdate)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

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
"""


@dataclass(frozen=True, slots=True)
class Entry:
    # fingerprint -> [level, alert id] as last notified firing; a level in the key makes an
    # escalation a change worth a message.
    firing: dict[str, tuple[int, int]] = field(default_factory=dict)
    resolved: frozenset[str] = frozenset()
    sent_at: float = 0.0

    def firing_keys(self) -> set[str]:
        return {f"{fp}@{lv}" for fp, (lv, _) in self.firing.items()}


def needs_update(entry: Entry | None, firing: dict[str, tuple[int, int]],
                 resolved: set[str], *, send_resolved: bool, repeat_s: float, now: float,
                 all_acked: bool = False) -> bool:
    """Whether a group's current state is worth a message to a receiver."""
    if entry is None:
        return bool(firing)  # never notified: only firing alerts are news
    now_keys = {f"{fp}@{lv}" for fp, (lv, _) in firing.items()}
    if not now_keys <= entry.firing_keys():
        return True  # a new alert, or one at a new level
    if not firing:
        # Everything resolved: say so (also clears the log), unless the receiver never heard.
        return bool(entry.firing)
    if send_resolved and not resolved <= entry.resolved:
        return True
    if all_acked:
        return False  # acknowledged until resolved: no repeats
    return entry.sent_at + repeat_s <= now


class NotificationLog(StateStore):
    def __init__(self, target: StateTarget = ":memory:") -> None:
        super().__init__(target, _SCHEMA)

    def get(self, receiver: str, group_key: str) -> Entry | None:
        with self._lock:
            row = self._db.execute(
                "SELECT firing, resolved, sent_at FROM nflog WHERE receiver = ? AND "
                "group_key = ?", (receiver, group_key)).fetchone()
        if row is None:
            return None
        firing = {fp: (int(v[0]), int(v[1])) for fp, v in json.loads(row[0]).items()}
        return Entry(firing, frozenset(json.loads(row[1])), float(row[2]))

    def put(self, receiver: str, group_key: str, entry: Entry) -> None:
        self.put_many([(receiver, group_key, entry)])

    def put_many(self, entries: list[tuple[str, str, Entry]]) -> None:
        """One transaction: the sender reports a batch of deliveries at once."""
        if not entries:
            return
        rows = [(receiver, key, json.dumps({k: list(v) for k, v in e.firing.items()}),
                 json.dumps(sorted(e.resolved)), e.sent_at) for receiver, key, e in entries]
        with self.transaction() as db:
            db.executemany(
                "INSERT INTO nflog (receiver, group_key, firing, resolved, sent_at) "
                "VALUES (?,?,?,?,?) ON CONFLICT (receiver, group_key) DO UPDATE SET "
                "firing = excluded.firing, resolved = excluded.resolved, "
                "sent_at = excluded.sent_at", rows)

    def open_groups(self) -> list[tuple[str, str]]:
        """(receiver, group key) of every group whose last message had firing alerts: after a
        restart each must be revisited, so a resolve that happened meanwhile is sent."""
        with self._lock:
            rows = self._db.execute(
                "SELECT receiver, group_key FROM nflog WHERE firing != '{}'").fetchall()
        return [(r[0], r[1]) for r in rows]

    def prune(self, before: float) -> int:
        """Forget groups that were last told everything resolved before `before`."""
        with self._lock:
            cur = self._db.execute("DELETE FROM nflog WHERE firing = '{}' AND sent_at < ?",
                                   (before,))
        return cur.rowcount
