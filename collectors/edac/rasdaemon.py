"""rasdaemon's `ras-mc-ctl --summary`: memory and machine-check totals from its event database.

The format is the summary() of util/ras-mc-ctl.in (github.com/mchehab/rasdaemon): one block per
kind of event, a header and tab-indented rows, or a "No <kind> errors." line when it has none:

    Memory controller events summary:
    \t<err_type> on DIMM Label(s): '<label>' location: <mc>:<top>:<mid>:<low> errors: <count>

    MCE records summary:
    \t<count> <error message> errors

`err_type` is rasdaemon's mc_event type: Corrected, Uncorrected, Fatal, Info. Corrected counts
into edac_ce_total, Uncorrected and Fatal into edac_ue_total, every MCE row into mce_total. The
other blocks (PCIe AER, ARM, CXL, extlog, devlink, disk, memory failure, signal) are not host
memory or CPU errors of this schema and are skipped. rasdaemon keeps its events across reboots
(a database), so its totals count since rasdaemon first ran, not since boot.
"""

from __future__ import annotations

import re

from collectors.frames import Rejection
from collectors.lineprotocol import FieldValue, Point

_MEM_HEADER = "Memory controller events summary:"
_MCE_HEADER = "MCE records summary:"
_MEM_ROW = re.compile(r"^(?P<type>\w+) on DIMM Label\(s\): '(?P<label>.*)' location: "
                      r"(?P<loc>[-\d:]+) errors: (?P<count>\d+)$")
_MCE_ROW = re.compile(r"^(?P<count>\d+) (?P<msg>.*) errors$")
_HEADER = re.compile(r"^[A-Z][\w ]*(?:summary:|errors\.)$")
MAX_COUNT = 1 << 53


def looks_like_summary(text: str) -> bool:
    return any(x in text for x in (_MEM_HEADER, "No Memory errors.", _MCE_HEADER,
                                   "No MCE errors."))


def parse_summary(text: str, host: str, ts_ns: int,
                  rejected: list[Rejection]) -> tuple[Point | None, list[str]]:
    """The node totals the summary gives (a field only for a block it printed) and a note per
    DIMM with errors. A row that cannot be read is rejected and withholds its block's totals."""
    fields: dict[str, FieldValue] = {}
    notes: list[str] = []
    bad: set[str] = set()
    block = ""
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line == "No Memory errors.":
            fields.update(edac_ce_total=0, edac_ue_total=0)
            block = ""
        elif line == "No MCE errors.":
            fields["mce_total"] = 0
            block = ""
        elif line == _MEM_HEADER:
            fields.update(edac_ce_total=0, edac_ue_total=0)
            block = "mem"
        elif line == _MCE_HEADER:
            fields["mce_total"] = 0
            block = "mce"
        elif not raw[:1].isspace() and _HEADER.match(line):
            block = ""  # another kind of event
        elif block == "mem":
            m = _MEM_ROW.match(line)
            if m is None or len(m["count"]) > 15 or int(m["count"]) >= MAX_COUNT:
                rejected.append(Rejection("memory summary row in an unknown format", line=n,
                                          metric="edac_ce_total"))
                bad.update(("edac_ce_total", "edac_ue_total"))
                continue
            kind, count = m["type"], int(m["count"])
            metric = {"Corrected": "edac_ce_total", "Uncorrected": "edac_ue_total",
                      "Fatal": "edac_ue_total"}.get(kind)
            if metric is not None:
                fields[metric] = int(fields[metric]) + count
            notes.append(f"{kind} on {m['label']!r} (location {m['loc']}): {count}")
        elif block == "mce":
            m = _MCE_ROW.match(line)
            if m is None or len(m["count"]) > 15 or int(m["count"]) >= MAX_COUNT:
                rejected.append(Rejection("MCE summary row in an unknown format", line=n,
                                          metric="mce_total"))
                bad.add("mce_total")
                continue
            fields["mce_total"] = int(fields["mce_total"]) + int(m["count"])
    for name in bad:
        fields.pop(name, None)
    return (Point("node", {"host": host}, fields, ts_ns) if fields else None), notes
