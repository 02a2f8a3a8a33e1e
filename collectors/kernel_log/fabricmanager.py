"""NVIDIA Fabric Manager's log (fabricmanager.log): the NVSwitch errors it reports, as SXids.

Each entry starts `[Mon DD YYYY HH:MM:SS] [LEVEL] [tid N] message` (local time), and a message
may run on over the following lines. Fabric Manager reports an NVSwitch error the driver raised as

    [Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on
    NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33

(one line; "non-fatal error" for the others): the SXid number the kernel log also shows as
`nvidia-nvswitchN: SXid (PCI:...): 20034, Fatal, ...`. These are the only Fabric Manager lines
with a stable shape that name a fault (GPUd matches the same two, components/accelerator/nvidia/
fabric-manager/log_matcher.go; the public sample log has one, a non-fatal 12028). The same error
is in both logs on a host running Fabric Manager, so read this log only where the kernel log is
not (a service VM of the shared-NVSwitch mode, a copied log): each report would count twice.
GPUd also treats "failed to find the GPU handle ... in the multicast team" as an NVLink failure;
it names no SXid and no schema field, so it stays a note.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import field
from datetime import datetime, tzinfo

from collectors.compat import dataclass
from collectors.frames import Rejection
from collectors.kernel_log.messages import MAX_CODE, normalize_bus_id
from collectors.kernel_log.records import SXidRecord

_ENTRY = re.compile(r"^\[(?P<ts>[A-Z][a-z]{2} \d{1,2} \d{4} \d{2}:\d{2}:\d{2})\] "
                    r"\[(?P<level>[A-Z]+)\] \[tid \d+\] (?P<msg>.*)$")
_SWITCH_ERROR = re.compile(
    r"detected NVSwitch (?P<sev>fatal|non-fatal) error (?P<code>\d+)"
    r"(?: on fid \d+)?(?: on NVSwitch pci bus id (?P<bus>\S+))?(?P<rest>.*)$")
_MULTICAST = re.compile(r"failed to find the GPU handle \d+ in the multicast team")


@dataclass(slots=True)
class FabricManagerLog:
    sxids: list[SXidRecord] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    entries: int = 0


def looks_like_fabricmanager_log(lines: Iterable[str]) -> bool:
    return any(_ENTRY.match(x.strip()) for x in lines)


def parse_fabricmanager_log(lines: Iterable[str], tz: tzinfo) -> FabricManagerLog:
    """The NVSwitch errors of a Fabric Manager log, as SXid records (switch None: the log names
    the switch by bus id and physical id). `tz`: the zone the log was written in."""
    out = FabricManagerLog()
    for n, raw in enumerate(lines, 1):
        m = _ENTRY.match(raw.strip())
        if m is None:
            continue  # a continuation line of a multi-line message
        out.entries += 1
        msg = m["msg"]
        if _MULTICAST.search(msg):
            out.notes.append(f"line {n}: NVLink failure: {msg.strip()}")
            continue
        err = _SWITCH_ERROR.search(msg)
        if err is None:
            continue
        bus = normalize_bus_id(err["bus"]) if err["bus"] else None
        why = (f"SXid code {err['code'][:12]} is out of range"
               if len(err["code"]) > 5 or int(err["code"]) > MAX_CODE else
               f"unreadable PCI bus id {err['bus']!r}" if err["bus"] and bus is None else None)
        if why is not None:
            out.rejected.append(Rejection(why, line=n, metric="sxid"))
            continue
        try:
            ts = datetime.strptime(m["ts"], "%b %d %Y %H:%M:%S").replace(tzinfo=tz)
        except ValueError:
            out.rejected.append(Rejection(f"bad time stamp {m['ts']!r}", line=n, metric="sxid"))
            continue
        out.sxids.append(SXidRecord(ts=ts.timestamp(), switch=None, bus_id=bus or "",
                                    code=int(err["code"]), fatal=err["sev"] == "fatal",
                                    detail=err["rest"].strip(), line=n))
    return out
