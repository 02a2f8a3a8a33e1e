"""`ibstat` output to port readings: for hosts where /sys/class/infiniband cannot be read (a
container without the host's sysfs) but the infiniband-diags tools run.

    CA 'mlx5_0'
            CA type: MT4129
            Port 1:
                    State: Active
                    Physical state: LinkUp
                    Rate: 400
                    Link layer: InfiniBand

Per port it gives what sysfs gives in `state`, `phys_state`, `rate` and `link_layer`, as words;
they are turned into the same numbers (state 1 DOWN .. 4 ACTIVE, physical state 1 Sleep ..
5 LinkUp, link layer 1 InfiniBand, 2 Ethernet), so the points are the sysfs collector's
(collectors.infiniband.sysfs.to_point): `ib_state`, `ib_rate`, `ib_link_layer`. The device's
`CA type:` is sysfs's hca_type (libibumad reads it there): "MT4129" goes on each of its ports as
`ib_hca_model` 4129; a type with no MT number is no model and no error. ibstat has no counters
and no GID table.

ibstat stops with an `ibpanic:` (or `ibwarn:`) line when a device goes away under it; the ports
read before it are kept, the message is a rejection, and a port cut short before its State line
is refused by name. A value that is not a known word or a number is refused on its own.
"""

from __future__ import annotations

import math
import re
from dataclasses import field

from collectors.compat import dataclass
from collectors.frames import Entity, Rejection
from collectors.infiniband.sysfs import LINK_LAYERS, MODEL_MAX, PortReading

# IBA PortState and PortPhysicalState, as ibstat spells them (lower case, spaces dropped).
STATES = {"down": 1, "initializing": 2, "init": 2, "armed": 3, "active": 4, "activedefer": 5}
PHYS_STATES = {"sleep": 1, "polling": 2, "disabled": 3, "portconfigurationtraining": 4,
               "linkup": 5, "linkerrorrecovery": 6, "phytest": 7}

_CA = re.compile(r"^CA '(?P<name>[^']+)'\s*$")
_PORT = re.compile(r"^\s+Port (?P<port>\d{1,3}):\s*$")
_KEY = re.compile(r"^\s+(?P<key>[A-Za-z][A-Za-z ]*?):\s*(?P<value>.*?)\s*$")
_PANIC = re.compile(r"^(?:ibpanic|ibwarn|ibstat):", re.I)
_RATE = re.compile(r"^\d{1,6}(?:\.\d{1,3})?$")  # Gb/s: 2.5 (SDR 1X) to 1600 (XDR 8X)
_CA_TYPE = re.compile(r"^MT(\d{1,5})$")  # the PCI device id, as mlx4/mlx5 print it


@dataclass(slots=True)
class IbstatResult:
    ports: list[PortReading] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    cas: int = 0  # devices seen (a device with no port is still recognised output)


def parse_ibstat(text: str, host: str = "") -> IbstatResult:
    """Every port of every CA in `ibstat` output. `host` names entities in rejections."""
    out = IbstatResult()
    ca: str | None = None
    model: int | None = None  # the current CA's, from its `CA type:` line
    port: PortReading | None = None
    has_state = False

    def close() -> None:
        if port is None:
            return
        if has_state:
            out.ports.append(port)
        else:  # cut off before its first reading: nothing of it says whether it is up
            out.rejected.append(Rejection(f"{port.device} port {port.port} has no State line "
                                          "(ibstat output cut short?)",
                                          entity=_key(host, port)))

    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if _PANIC.match(line):
            out.rejected.append(Rejection(f"ibstat stopped: {line.strip()[:200]}", line=n))
            continue
        if m := _CA.match(line):
            close()
            ca, model, port, has_state = m["name"], None, None, False
            out.cas += 1
            continue
        if ca is not None and (m := _PORT.match(line)):
            close()
            port, has_state = PortReading(ca, int(m["port"]), hca_model=model), False
            continue
        if (m := _KEY.match(line)) is None:
            continue
        if port is None:  # device lines: the CA type; firmware, GUIDs and the rest are unused
            if ca is not None and m["key"].lower() == "ca type":
                model = _model(m["value"])
            continue
        key, value = m["key"].lower(), m["value"]
        why = _read(port, key, value)
        has_state = has_state or key == "state"
        if why is not None:
            out.rejected.append(Rejection(why, line=n, entity=_key(host, port),
                                          metric=f"ibstat {m['key']}"))
    close()
    return out


def _read(port: PortReading, key: str, value: str) -> str | None:
    """Store one reading on the port; the reason when it cannot be read."""
    word = value.replace(" ", "").lower()
    if key == "state":
        if word not in STATES:
            return f"unknown port state {value[:40]!r}"
        port.state = STATES[word]
    elif key == "physical state":
        if word not in PHYS_STATES:
            return f"unknown physical state {value[:40]!r}"
        port.phys_state = PHYS_STATES[word]
    elif key == "rate":
        if not _RATE.match(value):
            return f"rate {value[:40]!r} is not a number of Gb/s"
        rate = float(value)
        if not math.isfinite(rate):
            return f"rate {value[:40]!r} is out of range"
        port.rate_gbps = int(rate) if rate.is_integer() else rate
    elif key == "link layer":
        if word not in LINK_LAYERS:
            return f"unknown link layer {value[:40]!r}"
        port.link_layer = LINK_LAYERS[word]
    return None


def _model(value: str) -> int | None:
    m = _CA_TYPE.match(value.strip())
    return int(m.group(1)) if m and int(m.group(1)) <= MODEL_MAX else None


def _key(host: str, port: PortReading) -> str | None:
    return Entity.ib_port(host, port.device, port.port).key if host else None
