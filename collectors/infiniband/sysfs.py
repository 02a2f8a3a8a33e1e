"""Read /sys/class/infiniband/<dev>/ports/<n>/ into port readings and `ib_port` points.

Per port the kernel exposes `state` ("4: ACTIVE"), `phys_state` ("5: LinkUp"), `rate`
("400 Gb/sec (4X NDR)"), the IBA port counters under `counters/` and driver counters under
`hw_counters/`. Everything is read; the points carry the fields the catalog names (its `sysfs`
spelling), the rest stays on the PortReading for callers that want it.

A file that cannot be read or parsed is rejected on its own, naming the file: the other fields of
its port, and the other ports, are kept.

`<dev>/device` links to the HCA's PCI function; its link width against its maximum
(collectors.pcie.sysfs) goes on every port of the device, as `nic_pcie_link_width(_max)`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from collectors.catalog import CATALOG, Metric, Scope
from collectors.frames import Entity, Rejection
from collectors.lineprotocol import FieldValue, Point
from collectors.pcie.sysfs import PcieLink, read_link

_ENUM = re.compile(r"^\s*([0-9]+)\s*:")  # "4: ACTIVE", "5: LinkUp"
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")  # "400 Gb/sec (4X NDR)", "2.5 Gb/sec"
_COUNTER_DIRS = ("counters", "hw_counters")
_Refuse = Callable[[Path, str], None]
ACTIVE = 4  # IBA PortState: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE
# IB counters are at most 64 bits; an integer field of line protocol ends at 2**63 - 1, and no
# real counter gets there (port_xmit_data at 400 Gb/s takes some 5,800 years).
COUNTER_MAX = 2**63 - 1
_MAX_DIGITS = 12  # of a state, physical state or rate in Gb/s
_DEVICE = "../../device/"  # the catalog's spelling of the HCA's PCI function, from a port


@dataclass(slots=True)
class PortReading:
    device: str
    port: int
    state: int | None = None
    phys_state: int | None = None
    rate_gbps: float | None = None
    counters: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)
    pcie: PcieLink | None = None  # the HCA's PCI function (<dev>/device), shared by its ports

    def value(self, sysfs: str) -> int | float | None:
        """The reading at a catalog `sysfs` path ("state", "rate", "counters/symbol_error",
        "../../device/current_link_width")."""
        if sysfs.startswith(_DEVICE):
            name = sysfs[len(_DEVICE):]
            link = self.pcie
            if link is None:
                return None
            return link.width if name == "current_link_width" else \
                link.width_max if name == "max_link_width" else None
        if sysfs == "state":
            return self.state
        if sysfs == "phys_state":
            return self.phys_state
        if sysfs == "rate":
            return self.rate_gbps
        folder, _, name = sysfs.partition("/")
        if folder == "counters":
            return self.counters.get(name)
        if folder == "hw_counters":
            return self.hw_counters.get(name)
        return None


def _ib_metrics() -> tuple[Metric, ...]:
    return tuple(m for m in CATALOG if m.scope is Scope.IB_PORT and m.sysfs and not m.derived)


_METRICS = _ib_metrics()


def read_ports(root: Path, host: str = "") -> tuple[list[PortReading], list[Rejection]]:
    """Every port of every device under root, in (device, port) order, and what was refused.
    `host` only names the entity in rejections."""
    ports: list[PortReading] = []
    rejected: list[Rejection] = []
    for dev_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        ports_dir = dev_dir / "ports"
        if not ports_dir.is_dir():
            continue
        pcie = read_link(dev_dir / "device") if (dev_dir / "device").is_dir() else None
        if pcie is not None:
            first = Entity.ib_port(host, dev_dir.name, 1).key if host else None
            rejected += [Rejection(f"{dev_dir.name}/device/{why}", None, first)
                         for why in pcie.refused]
        for port_dir in sorted(ports_dir.iterdir(), key=lambda p: (len(p.name), p.name)):
            if not port_dir.name.isdigit():
                continue
            reading = PortReading(dev_dir.name, int(port_dir.name), pcie=pcie)
            entity = Entity.ib_port(host, dev_dir.name, reading.port).key if host else None
            _read_port(port_dir, reading, rejected, entity)
            ports.append(reading)
    return ports, rejected


def read_sysfs(root: Path, host: str, ts_ns: int,
               rejected: list[Rejection] | None = None) -> list[Point]:
    """One `ib_port` point per port (tags host, device, port) with the catalog's IB fields.
    Refused files are appended to `rejected` when given."""
    ports, refused = read_ports(root, host)
    if rejected is not None:
        rejected.extend(refused)
    return [p for p in (to_point(r, host, ts_ns) for r in ports) if p.fields]


def to_point(r: PortReading, host: str, ts_ns: int) -> Point:
    fields: dict[str, FieldValue] = {}
    for m in _METRICS:
        assert m.sysfs is not None
        v = r.value(m.sysfs)
        if v is not None:
            fields[m.name] = v
    return Point("ib_port", {"host": host, "device": r.device, "port": str(r.port)}, fields,
                 ts_ns)


def _read_port(port_dir: Path, r: PortReading, rejected: list[Rejection],
               entity: str | None) -> None:
    def refuse(path: Path, why: str) -> None:
        rel = path.relative_to(port_dir.parent.parent.parent)
        rejected.append(Rejection(f"{rel}: {why}", None, entity, path.name))

    for name in ("state", "phys_state", "rate"):
        path = port_dir / name
        text = _read(path, refuse)
        if text is None:
            continue
        pattern = _RATE if name == "rate" else _ENUM
        m = pattern.match(text)
        if m is None:
            refuse(path, f"cannot parse {text.strip()[:60]!r}")
        elif len(m.group(1)) > _MAX_DIGITS:  # a float would turn it into inf
            refuse(path, f"value {_short(m.group(1))} is out of range")
        elif name == "rate":
            rate = float(m.group(1))
            r.rate_gbps = int(rate) if rate.is_integer() else rate
        elif name == "state":
            r.state = int(m.group(1))
        else:
            r.phys_state = int(m.group(1))
    for folder in _COUNTER_DIRS:
        target = r.counters if folder == "counters" else r.hw_counters
        d = port_dir / folder
        if not d.is_dir():
            continue
        for path in sorted(d.iterdir()):
            text = _read(path, refuse)
            if text is None:
                continue
            s = text.strip()
            if not (s.isascii() and s.isdigit()):
                refuse(path, f"counter is not a non-negative integer: {s[:60]!r}")
                continue
            v = int(s) if len(s) <= 20 else None
            if v is None or v > COUNTER_MAX:
                refuse(path, f"counter {_short(s)} is out of range (above 2**63 - 1, which "
                             "line protocol's integers end at)")
                continue
            target[path.name] = v


def _short(digits: str) -> str:
    shown = digits if len(digits) <= 24 else f"{digits[:12]}...{digits[-6:]}"
    return f"{shown} ({len(digits)} digits)"


def _read(path: Path, refuse: _Refuse) -> str | None:
    if not path.exists():
        return None
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError as exc:  # sysfs answers some reads with EINVAL (e.g. rate on a dead port)
        refuse(path, f"unreadable: {exc.strerror or exc}")
        return None
