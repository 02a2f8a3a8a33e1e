"""`ipmitool sel elist` entries, their severity, and which are new since the last read.

ipmitool prints each System Event Log record in `ipmi_sel_print_std_entry` (lib/ipmi_sel.c):
`printf("%4x | ", record_id)` (the id in hex), then the time stamp (`MM/DD/YYYY | HH:MM:SS | `,
or " Pre-Init  |0000036399| " for a time stamp before the BMC's clock was set), the sensor
type and the sensor's name (elist) or number ("Fan #0x03", list), the event description (the
IPMI 2.0 spec's offset names, Tables 42-2 and 42-3), "Asserted" or "Deasserted", and for
threshold events a reading ("Reading 500 < Threshold 800 RPM"). OEM records (types C0h-FFh)
carry no direction and are skipped.

Severity is the event's, as the IPMI spec names it: critical (2) for failures, critical and
non-recoverable threshold crossings, lost redundancy, lost input and uncorrectable errors;
warning (1) for predictive failures, non-critical crossings, degraded redundancy and
correctable errors. Informational entries (presence, "Fully Redundant", log cleared) and
deassertions (the condition going away) are not events.
"""

from __future__ import annotations

import re

from collectors.compat import dataclass
from collectors.frames import Rejection

_CRITICAL = re.compile(
    r"failure detected|(?<!non-)critical going|non-recoverable|redundancy lost"
    r"|insufficient resources|ac lost|input lost|uncorrectable|fatal|config error"
    r"|transition to critical|transition to non-recoverable|degraded from non-redundant",
    re.I)
_WARNING = re.compile(
    r"predictive failure|non-critical going|redundancy degraded|non-redundant"
    r"|(?<!un)correctable|out-of-range|transition to non-critical", re.I)
_DIRECTIONS = ("Asserted", "Deasserted")


@dataclass(frozen=True, slots=True)
class SelEntry:
    record_id: int
    sensor: str  # "Power Supply PS1 Status" (elist) or "Power Supply #0x62" (list)
    event: str  # "Failure detected"
    asserted: bool
    line: int = 0

    @property
    def severity(self) -> int:
        """2 critical, 1 warning, 0 informational or a deassertion."""
        if not self.asserted:
            return 0
        if _CRITICAL.search(self.event):
            return 2
        return 1 if _WARNING.search(self.event) else 0


def parse_sel_elist(text: str, rejected: list[Rejection] | None = None) -> list[SelEntry]:
    """Every record of `ipmitool sel elist` (or `sel list`) output. "SEL has no entries" is
    an empty log; other lines that are not records go to `rejected` with the reason."""
    out: list[SelEntry] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or raw.strip() == "SEL has no entries":
            continue
        got = _entry(raw, n)
        if isinstance(got, SelEntry):
            out.append(got)
        elif rejected is not None:
            rejected.append(Rejection(got, line=n))
    return out


def looks_like_sel(text: str) -> bool:
    lines = [x for x in text.splitlines()[:200] if x.strip()]
    return bool(lines) and (lines[0].strip() == "SEL has no entries"
                            or any(isinstance(_entry(x, 0), SelEntry) for x in lines))


def _entry(raw: str, n: int) -> SelEntry | str:
    cols = [c.strip() for c in raw.split("|")]
    try:
        rid = int(cols[0], 16)
    except ValueError:
        return f"not a SEL record (no hex record id): {raw[:80]!r}"
    where = next((i for i, c in enumerate(cols) if c in _DIRECTIONS), None)
    if where is None or where < 3:
        return f"SEL record {rid:x}: no Asserted/Deasserted column (an OEM record?)"
    return SelEntry(rid, cols[where - 2], cols[where - 1], cols[where] == "Asserted", n)


@dataclass(slots=True)
class SelCursor:
    """The last record id read. The first read only sets it (a log's history is not news);
    later reads give the entries past it. A listing whose highest id is below the cursor
    means the log was cleared: all its entries are new."""

    last_id: int | None = None

    def new(self, entries: list[SelEntry]) -> list[SelEntry]:
        if not entries:
            if self.last_id is None:
                self.last_id = 0
            return []
        top = max(e.record_id for e in entries)
        if self.last_id is None:
            self.last_id = top
            return []
        fresh = ([e for e in entries if e.record_id > self.last_id] if top >= self.last_id
                 else list(entries))
        self.last_id = top
        return fresh
