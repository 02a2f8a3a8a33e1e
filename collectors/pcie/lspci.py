"""PCIe links from `lspci -D -nn -vv` (pciutils), for hosts where sysfs is not readable (a
container without /sys/bus/pci) but lspci is.

Each device starts with an unindented line, with -D the full address and with -nn the class and
vendor:device ids in brackets: `0000:18:00.0 3D controller [0302]: NVIDIA Corporation GH100
[H100 SXM5 80GB] [10de:2330] (rev a1)`. Its PCI Express capability prints (pciutils ls-caps.c,
cap_express_link):

    LnkCap:\tPort #%d, Speed %s, Width x%d, ASPM %s, Exit Latency ...
    LnkSta:\tSpeed %s%s, Width x%d%s

the speed by link_speed() ("2.5GT/s", "5GT/s", "8GT/s", "16GT/s", "32GT/s", "64GT/s", or
"unknown") and after LnkSta's speed and width link_compare()'s note: " (downgraded)" when below
LnkCap, " (overdriven)" above, nothing when equal (pciutils before 3.8 printed "(ok)" and
"(strange)", and before 3.6 no note at all, with the LnkSta flags on the same line). The notes
are not needed: the readings are compared with LnkCap as sysfs's current_ against max_ are, and
the speeds read as generations the same way (collectors.pcie.sysfs). LnkSta's "unknown" speed
(no link trained) is generation 0, as sysfs's "Unknown".

Run as a user without CAP_SYS_ADMIN, lspci cannot read past the first 64 bytes of config space
and prints `Capabilities: <access denied>`: such a device is refused with that reason (no link
readings), never read as a link down.

GPUs are NVIDIA (10de) display-class functions (0300 VGA, 0302 3D controller); HCAs Mellanox
(15b3) network (0200 Ethernet, 0207 InfiniBand) functions.
"""

from __future__ import annotations

import re
from dataclasses import field

from collectors.compat import dataclass
from collectors.pcie.sysfs import PcieLink

NVIDIA, MELLANOX = "10de", "15b3"
GPU_CLASSES = ("0300", "0302")
HCA_CLASSES = ("0200", "0207")
_GEN_OF_RATE = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}
_WIDTH_MAX = 32
_HEAD = re.compile(r"(?P<bdf>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) [^[]*"
                   r"\[(?P<cls>[0-9a-f]{4})\]:.*\[(?P<vendor>[0-9a-f]{4}):"
                   r"(?P<device>[0-9a-f]{4})\]", re.I)
_SPEED = re.compile(r"Speed (?:(?P<rate>[0-9]+(?:\.[0-9]+)?)GT/s|(?P<unknown>unknown))", re.I)
_WIDTH = re.compile(r"Width x(?P<w>[0-9]+)")


@dataclass(slots=True)
class LspciDevice:
    bdf: str  # 0000:18:00.0
    cls: str  # 0302
    vendor: str  # 10de
    device: str
    link: PcieLink = field(default_factory=PcieLink)
    denied: bool = False  # "Capabilities: <access denied>"

    @property
    def is_gpu(self) -> bool:
        return self.vendor == NVIDIA and self.cls in GPU_CLASSES

    @property
    def is_hca(self) -> bool:
        return self.vendor == MELLANOX and self.cls in HCA_CLASSES


def parse_lspci(text: str) -> list[LspciDevice]:
    """Every device of `lspci -D -nn -vv` output, in the order listed; a LnkCap or LnkSta line
    that cannot be read is refused in that device's link.refused."""
    devices: list[LspciDevice] = []
    for raw in text.splitlines():
        if raw and not raw[0].isspace():
            m = _HEAD.match(raw)  # a head line without -D/-nn ids: its device is skipped
            devices.append(LspciDevice("", "", "", "") if m is None else LspciDevice(
                m["bdf"].lower(), m["cls"].lower(), m["vendor"].lower(), m["device"].lower()))
            continue
        if not devices or not devices[-1].bdf:
            continue
        dev, line = devices[-1], raw.strip()
        if line.startswith("Capabilities:") and "<access denied>" in line:
            dev.denied = True
        elif line.startswith("LnkCap:"):
            dev.link.gen_max, dev.link.width_max = _link(line, "LnkCap", dev.link, cap=True)
        elif line.startswith("LnkSta:"):
            dev.link.gen, dev.link.width = _link(line, "LnkSta", dev.link, cap=False)
    return [d for d in devices if d.bdf]


def _link(line: str, what: str, link: PcieLink, *, cap: bool) -> tuple[int | None, int | None]:
    speed, width = _SPEED.search(line), _WIDTH.search(line)
    gen: int | None = None
    if speed is not None and speed["unknown"] and not cap:
        gen = 0  # no link trained
    elif speed is not None and speed["rate"] and len(speed["rate"]) <= 8:
        gen = _GEN_OF_RATE.get(float(speed["rate"]))
    if gen is None:
        link.refused.append(f"{what}: not a PCIe link speed: {line[:60]!r}")
    lanes = int(width["w"]) if width is not None and len(width["w"]) <= 3 else None
    if lanes is None or lanes > _WIDTH_MAX:
        link.refused.append(f"{what}: not a link width: {line[:60]!r}")
        lanes = None
    return gen, lanes
