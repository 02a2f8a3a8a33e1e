"""New BMC event-log (SEL) entries as `sel` events: `Managers/*/LogServices/*/Entries`
(LogEntryCollection of LogEntry.v1_x: `Id`, `Severity` OK/Warning/Critical, `Created`).

The log holds history: the first read only learns what is there (entries created before the
poller started are old news, one cycle of grace aside), and each later read reports the entries
it has not seen, by (Id, Created): a cleared log that numbers from 1 again still counts as new.
Severity OK is informational and becomes no event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from collectors.redfish.reading import Reading
from collectors.redfish.values import Skips, obj

SEVERITY = {"Warning": 1, "Critical": 2}


def created_ns(text: Any) -> int | None:
    """An ISO 8601 date-time with offset (Edm.DateTimeOffset), as epoch nanoseconds."""
    if not isinstance(text, str) or len(text) > 40:
        return None
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if at.tzinfo is None:  # the standard requires an offset; without one the time is unknown
        return None
    return int(at.timestamp() * 1e9)


def entry_key(entry: Mapping[str, Any]) -> tuple[str, str]:
    return str(entry.get("Id", entry.get("@odata.id", "")))[:200], str(entry.get("Created"))[:40]


class SelCursor:
    """The entries seen of one BMC's logs. `since_ns`: entries created at or after it are new
    even on the first read (the poller's start, less a cycle)."""

    def __init__(self, since_ns: int) -> None:
        self.since_ns = since_ns
        self._seen: dict[str, set[tuple[str, str]]] = {}

    def update(self, log: str, entries: Sequence[Any], now_ns: int, out: Reading,
               skips: Skips) -> int:
        """Add the new entries' events to `out`; returns how many entries were new."""
        first = log not in self._seen
        seen = self._seen.get(log, set())
        current: set[tuple[str, str]] = set()
        new = 0
        for raw in entries:
            entry = obj(raw)
            if entry is None:
                continue
            key = entry_key(entry)
            current.add(key)
            ts = created_ns(entry.get("Created"))
            if key in seen or (first and (ts is None or ts < self.since_ns)):
                continue
            new += 1
            severity = entry.get("Severity")
            if severity == "OK":
                continue
            if severity not in SEVERITY:
                skips.skip(f"{log} entry {key[0]}", f"Severity {severity!r} is not OK, Warning "
                                                    "or Critical", "sel")
                continue
            if ts is None:
                skips.notes.append(f"{log} entry {key[0]}: Created {entry.get('Created')!r} "
                                   "unreadable; stamped with the poll time")
            out.events.append((ts if ts is not None else now_ns, SEVERITY[str(severity)]))
        # Only what the log holds now (the read bounds it): a wrapped log forgets its oldest
        # entries, and so do we.
        self._seen[log] = current
        return new
