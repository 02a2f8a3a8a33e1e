"""Read /sys/class/infiniband/<dev>/ports/<n>/ into port readings and `ib_port` points.

Per port the kernel exposes `state` ("4: ACTIVE"), `phys_state` ("5: LinkUp"), `rate`
("400 Gb/sec (4X NDR)"), the IBA port counters under `counters/` and driver counters under
`hw_counters/`. Everything is read; the points carry the fields the catalog names (its `sysfs`
spelling), the rest stays on the PortReading for callers that want it.

A file that cannot be read or parsed is rejected on its own, naming the file: the other fields of
its port, and the other ports, are kept.

`<dev>/device` links to the HCA's PCI function; its link width against its maximum
(collectors.pcie.sysfs) goes on every port of the device, as `nic_pcie_link_width(_max)`.

What kind of port it is (Documentation/ABI/stable/sysfs-class-infiniband): `link_layer`
("InfiniBand", "Ethernet", "Unknown") as `ib_link_layer` 1, 2, 0, and the device's `hca_type`
as `ib_hca_model`, the number of "MT4129" (mlx4/mlx5 print the PCI device id so); a driver whose
hca_type carries no such number gives the PCI device id of `<dev>/device/device` ("0x1021" is
4129 too).

On an Ethernet (RoCE) port the GID table is read too: `gids/<i>` (an IPv6 address, all zeros
when the entry is empty) and, for the entries that hold a routable address, `gid_attrs/types/
<i>` ("IB/RoCE v1" or "RoCE v2"; an empty entry answers EINVAL); `ib_gid_roce_v2` counts the
RoCE v2 entries that are neither zero nor link-local fe80::/64, the ones NCCL can use. An
iWARP device (`node_type` "4: RNIC") is Ethernet too but has no RoCE GIDs: its table is not read.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import field
from pathlib import Path

from collectors.catalog import CATALOG, Metric, Scope
from collectors.compat import dataclass
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
_HCA_TYPE = re.compile(r"^\s*MT([0-9]{1,5})\s*$")  # "MT4129": mlx4/mlx5, the PCI device id
_PCI_ID = re.compile(r"^\s*0x([0-9a-fA-F]{1,4})\s*$")  # <dev>/device/device: "0x1021"
MODEL_MAX = 0xFFFF  # a PCI device id is 16 bits
# The kernel's words for a port's link layer (core/sysfs.c link_layer_show).
LINK_LAYERS = {"infiniband": 1, "ethernet": 2, "unknown": 0}
ETHERNET = 2
_ROCE_V2 = "RoCE v2"  # gid_attrs/types/<i> of a RoCE v2 GID (core/cache.c gid_type_str)
_LINK_LOCAL = ipaddress.IPv6Network("fe80::/64")
_GIDS = "gids/<i> + gid_attrs/types/<i>"  # the catalog's spelling of the RoCE v2 GID count


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
    link_layer: int | None = None  # 1 InfiniBand, 2 Ethernet, 0 Unknown
    hca_model: int | None = None  # 4129 for MT4129 (ConnectX-7): the PCI device id
    gid_roce_v2: int | None = None  # usable RoCE v2 GIDs; Ethernet ports with a GID table only

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
        if sysfs == "link_layer":
            return self.link_layer
        if sysfs == "../../hca_type":
            return self.hca_model
        if sysfs == _GIDS:
            return self.gid_roce_v2
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
        first = Entity.ib_port(host, dev_dir.name, 1).key if host else None
        if pcie is not None:
            rejected += [Rejection(f"{dev_dir.name}/device/{why}", None, first)
                         for why in pcie.refused]
        model = _hca_model(dev_dir, rejected, first)
        # node_type (ABI: CA, RNIC, ...): "4: RNIC" is iWARP, whose GID table has no RoCE types.
        roce = not _text_or_empty(dev_dir / "node_type").startswith("4")
        for port_dir in sorted(ports_dir.iterdir(), key=lambda p: (len(p.name), p.name)):
            if not port_dir.name.isdigit():
                continue
            reading = PortReading(dev_dir.name, int(port_dir.name), pcie=pcie, hca_model=model)
            entity = Entity.ib_port(host, dev_dir.name, reading.port).key if host else None
            _read_port(port_dir, reading, rejected, entity, roce)
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
               entity: str | None, roce: bool = True) -> None:
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
    text = _read(port_dir / "link_layer", refuse)
    if text is not None:
        layer = LINK_LAYERS.get(text.strip().lower())
        if layer is None:
            refuse(port_dir / "link_layer", f"unknown link layer {text.strip()[:40]!r}")
        r.link_layer = layer
    if roce and r.link_layer == ETHERNET and (port_dir / "gids").is_dir():
        r.gid_roce_v2 = _roce_v2_gids(port_dir, refuse)
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


def _hca_model(dev_dir: Path, rejected: list[Rejection], entity: str | None) -> int | None:
    """The number of the device's hca_type ("MT4129"), else its PCI device id; None when
    neither is there (a device with no hca_type and no PCI function, e.g. a soft RoCE rxe)."""
    def refuse(path: Path, why: str) -> None:
        rejected.append(Rejection(f"{path.relative_to(dev_dir.parent)}: {why}", None, entity,
                                  path.name))

    text = _read(dev_dir / "hca_type", refuse)
    if text is not None and (m := _HCA_TYPE.match(text)) and int(m.group(1)) <= MODEL_MAX:
        return int(m.group(1))
    # Other drivers print a name ("I40IW", cxgb4's driver name): not a model to compare by.
    pci = dev_dir / "device" / "device"
    text = _read(pci, refuse) if (dev_dir / "device").is_dir() else None
    if text is None:
        return None
    if (m := _PCI_ID.match(text)) is None:
        refuse(pci, f"cannot parse PCI device id {text.strip()[:40]!r}")
        return None
    return int(m.group(1), 16)


def _roce_v2_gids(port_dir: Path, refuse: _Refuse) -> int:
    """RoCE v2 entries of the port's GID table that hold a routable address. Only those entries'
    types are read: a table has up to 256 entries, nearly all of them empty."""
    count = 0
    gids = port_dir / "gids"
    for path in sorted(gids.iterdir(), key=lambda p: (len(p.name), p.name)):
        if not path.name.isdigit():
            continue
        text = _read(path, refuse)
        if text is None:
            continue
        try:
            gid = ipaddress.IPv6Address(text.strip())
        except ValueError:
            refuse(path, f"cannot parse GID {text.strip()[:60]!r}")
            continue
        if gid.packed == bytes(16) or gid in _LINK_LOCAL:
            continue
        kind = port_dir / "gid_attrs" / "types" / path.name
        try:  # EINVAL: the entry was emptied between the two reads
            if kind.read_text(encoding="ascii", errors="replace").strip() == _ROCE_V2:
                count += 1
        except OSError:
            continue
    return count


def _text_or_empty(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:  # absent or unreadable: no claim either way
        return ""


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
