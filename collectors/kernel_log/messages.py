"""The message part of NVIDIA driver kernel lines: Xid and SXid, and PCI bus-id spelling."""

from __future__ import annotations

import re

from collectors.compat import dataclass

# GPUd matches `NVRM: Xid.*?: (\d+),`; we also pull out the device, pid and process name. The
# device is "PCI:0000:19:00" on current drivers and a bare "0000:19:00" on old ones.
_XID = re.compile(
    r"NVRM: Xid \((?P<dev>[^)]*)\): (?P<code>\d+),"
    r"(?:\s*pid=(?P<pid>'?<unknown>'?|\d+),\s*name=(?P<name>[^,]*),)?"
    r"\s*(?P<detail>.*)$"
)
_SXID = re.compile(
    r"(?:(?P<switch>nvidia-nvswitch\d+):\s*)?SXid \((?P<dev>[^)]*)\): (?P<code>\d+),"
    r"\s*(?:(?P<sev>Non-fatal|Fatal),\s*)?(?P<detail>.*)$"
)
_BUS = re.compile(
    r"^(?:PCI:)?(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
    r"(?:\.[0-7])?$"
)


def normalize_bus_id(text: str) -> str | None:
    """'PCI:0000:19:00', '00000000:19:00.0' (nvidia-smi) and '19:00.0' all become '0000:19:00'.

    The kernel prints a 4-digit domain and no function; nvidia-smi prints 8 digits and the
    function. A GPU is one function, so dropping it loses nothing."""
    m = _BUS.match(text.strip())
    if m is None:
        return None
    dom = int(m["dom"] or "0", 16)
    return f"{dom:04x}:{m['bus'].lower()}:{m['dev'].lower()}"


@dataclass(frozen=True, slots=True)
class XidMessage:
    bus_id: str
    code: int
    pid: int | None
    process: str | None
    detail: str


@dataclass(frozen=True, slots=True)
class SXidMessage:
    switch: str | None
    bus_id: str
    code: int
    fatal: bool | None
    detail: str


# Xid and SXid codes are small numbers (the catalog ends in the 100s); a longer one is a corrupt
# line, and past 2**53 it would not even survive the trip through a float.
MAX_CODE = 65535


def _code(text: str, what: str) -> int | str:
    if len(text) > 5 or int(text) > MAX_CODE:
        return f"{what} code {text[:12]}{'...' if len(text) > 12 else ''} is out of range"
    return int(text)


def parse_xid(message: str) -> XidMessage | str:
    """The Xid in a message, or why it could not be read."""
    m = _XID.search(message)
    if m is None:
        return "Xid line in an unknown format"
    code = _code(m["code"], "Xid")
    if isinstance(code, str):
        return code
    bus = normalize_bus_id(m["dev"])
    if bus is None:
        return f"unreadable PCI bus id {m['dev']!r}"
    pid = m["pid"]
    name = m["name"]
    return XidMessage(
        bus_id=bus,
        code=code,
        pid=int(pid) if pid is not None and (pid.isascii() and pid.isdigit()) else None,
        process=None if name is None or name.strip() == "<unknown>" else name.strip(),
        detail=m["detail"].strip(),
    )


def parse_sxid(message: str) -> SXidMessage | str:
    m = _SXID.search(message)
    if m is None:
        return "SXid line in an unknown format"
    code = _code(m["code"], "SXid")
    if isinstance(code, str):
        return code
    bus = normalize_bus_id(m["dev"])
    if bus is None:
        return f"unreadable PCI bus id {m['dev']!r}"
    sev = m["sev"]
    return SXidMessage(
        switch=m["switch"],
        bus_id=bus,
        code=code,
        fatal=None if sev is None else sev == "Fatal",
        detail=m["detail"].strip(),
    )
