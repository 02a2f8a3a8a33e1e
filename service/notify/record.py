"""The `record` receiver: level 1. Every message is logged and kept in the `deliveries` table
beside the alerts, so what the service would have told people is on record even when no
email or pager is configured."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from service.notify.message import Delivery, Message
from service.storage.sqlite_db import open_db

log = logging.getLogger(__name__)

# The notification log as operators read it: every message, and every verdict on an alert
# (service.stages.verdicts), in the order they happened.
DELIVERIES_SQL = """
CREATE TABLE IF NOT EXISTS deliveries (at REAL, receiver TEXT, reason TEXT, group_key TEXT,
    level INTEGER, status TEXT, alerts INTEGER, title TEXT, body TEXT);
"""


class RecordReceiver:
    def __init__(self, path: str | Path = ":memory:", name: str = "record") -> None:
        self.name = name
        self._db = open_db(path, DELIVERIES_SQL)
        self._lock = threading.Lock()
        self.records: list[Message] = []

    async def notify(self, msg: Message) -> Delivery:
        log.warning("notify %s: %s", self.name, msg.title)
        body = json.dumps([{"fingerprint": a.fingerprint, "alert_id": a.alert_id,
                            "status": a.status, "level": a.level, "labels": a.labels,
                            "summary": a.summary} for a in msg.alerts])
        with self._lock:
            self.records.append(msg)
            self._db.execute("INSERT INTO deliveries VALUES (?,?,?,?,?,?,?,?,?)",
                             (msg.at, self.name, msg.reason, msg.group_key, msg.level,
                              msg.status, len(msg.alerts), msg.title, body))
        return Delivery(ok=True, detail="recorded")

    def close(self) -> None:
        with self._lock:
            self._db.close()
