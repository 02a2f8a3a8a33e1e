"""freeipmi's `ipmi-sel` output as the SEL entries the ipmitool path gives (collectors.ipmi.sel
SelEntry), with the same severity and the same cursor.

The listing is `ipmi-sel -v --comma-separated-output --system-event-only` with its header:
`ID,Date,Time,Name,Type,Event Direction,Event` (ipmi-sel(8): -v "will output event direction",
"Assertion Event" or "Deassertion Event"; a `State` column where --output-event-state is
given). ID is the record id in decimal; Event the description, for a threshold event followed by
" ; Sensor Reading = 500.00 RPM ; Threshold = 800.00 RPM". The description is put in ipmitool's
words ("Lower Critical - going low" -> "Lower Critical going low", "Power Supply Failure
detected" -> "Failure detected") so collectors.ipmi.sel grades it. OEM records are left out by
--system-event-only (the ipmitool path skips them too: they carry no direction).

`ipmi-sel --info` gives "Number of log entries : 9" and "Recent addition timestamp : ..." lines:
the collector lists the log only when these change, as it does with `ipmitool sel info`.
"""

from __future__ import annotations

from collectors.frames import Rejection
from collectors.ipmi.freeipmi_sensors import ipmitool_spelling
from collectors.ipmi.sel import SelEntry

_NEEDED = ("ID", "Name", "Event Direction", "Event")
_DIRECTION = {"Assertion Event": True, "Deassertion Event": False}


def parse_sel_csv(text: str, rejected: list[Rejection] | None = None) -> list[SelEntry]:
    """Every record of `ipmi-sel -v --comma-separated-output` output with its header;
    "No SEL entries" or a header alone is an empty log."""
    out: list[SelEntry] = []
    header: list[str] | None = None
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.lower().startswith("no sel entries"):
            continue
        if header is None:
            cols = [c.strip() for c in line.split(",")]
            if all(k in cols for k in _NEEDED):
                header = cols
            elif rejected is not None:
                rejected.append(Rejection(f"not the ipmi-sel -v CSV header: {line[:80]!r}",
                                          line=n))
            continue
        parts = [c.strip() for c in line.split(",", len(header) - 1)]
        c = dict(zip(header, parts))
        asserted = _DIRECTION.get(c.get("Event Direction", ""))
        if len(parts) != len(header) or not c["ID"].isdigit() or asserted is None:
            if rejected is not None:
                rejected.append(Rejection(f"not an ipmi-sel -v record: {line[:80]!r}", line=n))
            continue
        out.append(SelEntry(int(c["ID"]), c["Name"], _description(c["Event"]), asserted, n))
    return out


def looks_like_sel_csv(text: str) -> bool:
    first = next((x for x in text.splitlines()[:5] if x.strip()), "")
    return all(k in [c.strip() for c in first.split(",")] for k in _NEEDED)


def _description(event: str) -> str:
    what = event.split(" ; ", 1)[0].strip()
    return ipmitool_spelling(what.replace(" - going", " going"))


def sel_mark(info: str) -> tuple[str, str] | None:
    """(entries, last addition) of `ipmi-sel --info`; None when either is missing."""
    got: dict[str, str] = {}
    for line in info.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            got[key.strip()] = value.strip()
    entries, added = got.get("Number of log entries"), got.get("Recent addition timestamp")
    return None if entries is None or added is None else (entries, added)
