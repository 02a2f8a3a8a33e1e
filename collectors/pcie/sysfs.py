"""One PCI device's link and AER counters from its sysfs directory (/sys/bus/pci/devices/<bdf>).

The kernel's ABI (Documentation/ABI/testing/sysfs-bus-pci and sysfs-bus-pci-devices-aer-stats):

- `current_link_width`, `max_link_width`: lanes, a bare number ("16"; 0 with no link);
- `current_link_speed`, `max_link_speed`: "16.0 GT/s PCIe" (kernels since 5.x), "8 GT/s" or
  "2.5 GT/s" (older), "Unknown" when the link is down; read as the PCIe generation whose rate it
  is (2.5, 5, 8, 16, 32, 64, 128 GT/s are generations 1 to 7);
- `aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal`: one "<error name> <count>" line
  per error type and a TOTAL_ERR_COR / TOTAL_ERR_NONFATAL / TOTAL_ERR_FATAL line; only where the
  device reports AER (the files are absent otherwise).

A file that is absent is no reading; one that cannot be read or parsed is refused by name and
the device's other readings kept.
"""

from __future__ import annotations

import re
from dataclasses import field
from pathlib import Path

from collectors.compat import dataclass

# GT/s per lane of each generation (PCI-SIG; 6.0 keeps 64 GT/s with PAM4, 7.0 128 GT/s).
_GEN_OF_RATE = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}
_SPEED = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s", re.I)
_AER = (("aer_correctable", "aer_dev_correctable", "TOTAL_ERR_COR"),
        ("aer_nonfatal", "aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
        ("aer_fatal", "aer_dev_fatal", "TOTAL_ERR_FATAL"))
COUNTER_MAX = 2**63 - 1  # where line protocol's integers end
_WIDTH_MAX = 32  # x32, the widest link the PCIe specification defines


@dataclass(slots=True)
class PcieLink:
    width: int | None = None
    width_max: int | None = None
    gen: int | None = None
    gen_max: int | None = None
    aer_correctable: int | None = None
    aer_nonfatal: int | None = None
    aer_fatal: int | None = None
    refused: list[str] = field(default_factory=list)  # "<file>: why", one per refused file

    def gpu_fields(self) -> dict[str, int]:
        """The catalog's GPU-scope names of the readings there are."""
        named = {"pcie_link_width": self.width, "pcie_link_width_max": self.width_max,
                 "pcie_link_gen": self.gen, "pcie_link_gen_max": self.gen_max,
                 "pcie_aer_correctable_total": self.aer_correctable,
                 "pcie_aer_nonfatal_total": self.aer_nonfatal,
                 "pcie_aer_fatal_total": self.aer_fatal}
        return {k: v for k, v in named.items() if v is not None}


def read_link(device: Path) -> PcieLink:
    """The readings of one PCI device directory (or a link to one)."""
    link = PcieLink()
    link.width = _width(device / "current_link_width", link)
    link.width_max = _width(device / "max_link_width", link)
    link.gen = _gen(device / "current_link_speed", link)
    link.gen_max = _gen(device / "max_link_speed", link)
    for attr, name, total in _AER:
        setattr(link, attr, _aer_total(device / name, total, link))
    return link


def _text(path: Path, link: PcieLink) -> str | None:
    if not path.exists():
        return None
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError as exc:  # sysfs answers some reads with EIO/EINVAL (a device gone)
        link.refused.append(f"{path.name}: unreadable: {exc.strerror or exc}")
        return None


def _width(path: Path, link: PcieLink) -> int | None:
    text = _text(path, link)
    if text is None:
        return None
    s = text.strip()
    if not (s.isascii() and s.isdigit()) or int(s) > _WIDTH_MAX:
        link.refused.append(f"{path.name}: not a link width: {s[:40]!r}")
        return None
    return int(s)


def _gen(path: Path, link: PcieLink) -> int | None:
    text = _text(path, link)
    if text is None:
        return None
    if text.strip().lower().startswith("unknown"):
        return 0  # no link trained: the catalog's "0 when the speed reads Unknown"
    m = _SPEED.match(text)
    gen = None if m is None or len(m.group(1)) > 8 else _GEN_OF_RATE.get(float(m.group(1)))
    if gen is None:
        link.refused.append(f"{path.name}: not a PCIe link speed: {text.strip()[:40]!r}")
    return gen


def _aer_total(path: Path, total: str, link: PcieLink) -> int | None:
    text = _text(path, link)
    if text is None:
        return None
    for line in text.splitlines():
        name, _, count = line.strip().partition(" ")
        if name != total:
            continue
        c = count.strip()
        if c.isascii() and c.isdigit() and len(c) <= 19 and int(c) <= COUNTER_MAX:
            return int(c)
        link.refused.append(f"{path.name}: {total} is not a count: {c[:40]!r}")
        return None
    link.refused.append(f"{path.name}: no {total} line")
    return None
