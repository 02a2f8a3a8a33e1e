"""The `record` receiver: level 1. Every message is logged and kept in the `deliveries` table
beside the alerts, so what the service would have told people is on record even when no
email or pager is configured."""

from __future__ import annotations

import json
import logging

from service.notify.message import Delivery, Message
from service.storage.state_db import StateStore, StateTarget

log = logging.getLogger(__name__)

# The notification log as operators read it: every message, and every verdict on an alert
# (service.learning.verdicts), in the order they happened.
DELIVERIES_SQL = """
CREATE TABLE IF NOT EXISTS deliveries (at REAL, receiver TEXT, reason TEXT, group_key TEXT,
    level INTEGER, status TEXT, alerts INTEGER, title TEXT, body TEXT);
"""
DELIVERIES_INSERT = ("INSERT INTO deliveries (at, receiver, reason, group_key, level, status, "
                     "alerts, title, body) VALUES (?,?,?,?,?,?,?,?,?)")


class RecordReceiver(StateStore):
    def __init__(self, target: StateTarget = ":memory:", name: str = "record") -> None:
        super().__init__(target, DELIVERIES_SQL)
        self.name = name
        self.records: list[Message] = []

    async def notify(self, msg: Message) -> Delivery:
        log.warning("notify %s: %s", self.name, msg.title)
        body = json.dumps([{"fingerprint": a.fingerprint, "alert_id": a.alert_id,
                            "status": a.status, "level": a.level, "labels": a.labels,
                            "summary": a.summary} for a in msg.alerts])
        with self._lock:
            self.records.append(msg)
            self._db.execute(DELIVERIES_INSERT,
                             (msg.at, self.name, msg.reason, msg.group_key, msg.level,
                              msg.status, len(msg.alerts), msg.title, body))
        return Delivery(ok=True, detail="recorded")
