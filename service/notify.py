"""Notification: the Notifier protocol and the record notifier, the one channel implementation
until the real email, paging and webhook channels arrive. Notifiers say whether a failed
delivery is worth retrying instead of raising (DESIGN.md decision 9)."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from service.alert_store import Alert
from service.alerting import Transition

log = logging.getLogger(__name__)

# Which channels a level reaches: 1 records only, 2 emails, 3 pages a human and asks the
# remediation side to migrate jobs off the node.
CHANNELS: dict[int, tuple[str, ...]] = {1: (), 2: ("email",), 3: ("email", "page", "migrate")}


@dataclass(frozen=True, slots=True)
class Notification:
    channel: str
    kind: str  # "firing", "escalated" or "resolved"
    alert: Alert
    transition: Transition

    @property
    def summary(self) -> str:
        a = self.alert
        top = a.explanation[0]["signal"] if a.explanation else "no signal"
        return (f"[{self.kind}] level {self.transition.new} {a.scope} {a.entity} on {a.node}: "
                f"risk {a.risk:.2f} ({top})")


@dataclass(frozen=True, slots=True)
class Delivery:
    ok: bool
    retry: bool = False
    detail: str = ""


class Notifier(Protocol):
    def notify(self, n: Notification) -> Delivery: ...


class RecordNotifier:
    """Logs every notification and records it in a `deliveries` table (and in memory)."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS deliveries (at REAL, channel TEXT, kind TEXT, "
            "alert_id INTEGER, level INTEGER, entity TEXT, node TEXT, summary TEXT, body TEXT)")
        self._lock = threading.Lock()
        self.records: list[Notification] = []

    def notify(self, n: Notification) -> Delivery:
        log.warning("notify %s: %s", n.channel, n.summary)
        with self._lock:
            self.records.append(n)
            self._db.execute(
                "INSERT INTO deliveries VALUES (?,?,?,?,?,?,?,?,?)",
                (n.transition.at, n.channel, n.kind, n.alert.id, n.transition.new, n.alert.entity,
                 n.alert.node, n.summary, json.dumps(n.alert.as_dict())))
        return Delivery(ok=True, detail="recorded")

    def close(self) -> None:
        with self._lock:
            self._db.close()


def notifications(changed: list[tuple[Transition, Alert]]) -> list[Notification]:
    """What to send for a tick's level changes: an escalation reaches the channels of its new
    level that it had not reached before; a resolve reaches those of the alert's peak."""
    out: list[Notification] = []
    for t, alert in changed:
        if t.new > t.old:
            before = set(CHANNELS.get(t.old, ()))
            kind = "firing" if t.old == 0 else "escalated"
            out += [Notification(c, kind, alert, t) for c in CHANNELS[t.new] if c not in before]
        elif t.new == 0:
            out += [Notification(c, "resolved", alert, t) for c in CHANNELS[alert.peak_level]
                    if c != "migrate"]
    return out
