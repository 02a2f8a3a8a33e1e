"""What the kernel-log parser produces: raw Xid and SXid records, coalesced Xid events, and the
host hardware errors (machine checks, EDAC memory errors)."""

from __future__ import annotations

from dataclasses import field

from collectors.compat import dataclass
from collectors.frames import Rejection


@dataclass(frozen=True, slots=True)
class XidRecord:
    """One `NVRM: Xid (PCI:...): code, ...` line. `gpu` is the nvidia-smi index (the one the bus
    id had, for a GPU that has left the map), or None when no map ever knew `bus_id`."""

    ts: float
    bus_id: str
    code: int
    gpu: int | None
    pid: int | None
    process: str | None
    detail: str
    line: int


@dataclass(frozen=True, slots=True)
class SXidRecord:
    """One NVSwitch `SXid` line. No catalog metric carries these yet, so they travel beside the
    Xid events instead of in the EventFrame."""

    ts: float
    switch: str | None  # "nvidia-nvswitch3" when the line names the device
    bus_id: str
    code: int
    fatal: bool | None  # None when the line does not say Fatal / Non-fatal
    detail: str
    line: int

    @property
    def opens_report(self) -> bool:
        """The line that says Fatal / Non-fatal starts one SXid report; the driver follows it
        with lines of the same code ("Severity 1 Engine instance ...", "Data {...}") that belong
        to it (one event per report, not per line)."""
        return self.fatal is not None


@dataclass(frozen=True, slots=True)
class MceRecord:
    """One machine check, from its "events logged" notice (cpu, bank and status None) or its
    `CPU n: Machine Check` header. `announced`: a notice just before already counted it."""

    ts: float
    cpu: int | None
    bank: int | None
    status: int | None  # MCi_STATUS
    exception: bool
    uncorrected: bool | None  # MCi_STATUS.UC; None for a notice
    announced: bool
    line: int


@dataclass(frozen=True, slots=True)
class EdacRecord:
    """One `EDAC MCn: <count> CE|UE ...` report."""

    ts: float
    mc: int
    kind: str  # "CE" or "UE"
    count: int
    detail: str
    line: int


@dataclass(slots=True)
class XidEvent:
    """Repeats of one code on one GPU inside the coalescing window, as one event at the time of
    the first. `repeats` counts every line, the first included."""

    key: str  # entity key, "n001:gpu3"; busmap.unmapped_index() when no map knows the bus id
    ts: float
    code: int
    bus_id: str
    gpu: int | None
    pid: int | None
    process: str | None
    detail: str
    line: int
    last_ts: float
    repeats: int = 1

    @property
    def mapped(self) -> bool:
        return self.gpu is not None


@dataclass(slots=True)
class ParseResult:
    """Everything one parse produced. `ignored` counts lines that are not about Xids at all
    (other kernel messages, blank lines); `rejected` lists Xid-looking lines we could not read."""

    events: list[XidEvent] = field(default_factory=list)
    sxids: list[SXidRecord] = field(default_factory=list)
    mces: list[MceRecord] = field(default_factory=list)
    edac: list[EdacRecord] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ignored: int = 0
    lines: int = 0
