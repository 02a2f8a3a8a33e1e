"""`nvidia-smi -q` text output (also `-q -d SECTION`) to Points.

The text form is an indented tree: a line without a colon opens a section, "Key : value" is a
reading. Each GPU block starts with a "GPU 00000000:07:00.0" header at column 0; GPUs are
numbered in the order they appear, which is nvidia-smi's own index order. A reading is found by
its section path and key, case-insensitively; each metric lists the spellings of the drivers
we have seen, newest first, and the first readable one wins.

A GPU in MIG mode prints "MIG Mode > Current : Enabled" and one "MIG Device" section per
instance; the readings under those sections are the instance's (its own FB memory, SRAM ECC)
and never stand in for the GPU's. The point carries the same `mig` and `mig_instances` tags as
the XML parser gives (collectors.nvidia_smi.xmlparse.mig_tags).

Each block also gets `gpu_unreadable` (collectors.nvidia_smi.states), from its readings and from
its header, whose bus id nvidia-smi prints as "[Unknown Error]" when it cannot read even that.
Output with no GPU block may be the default `nvidia-smi` table instead (collectors.nvidia_smi.
table): it carries nothing but which GPU printed "ERR!", so that is what it gives.

Each block also gets a `gpu_info` point (collectors.identity): its "Product Name", "Serial
Number", "GPU UUID", "VBIOS Version" and "PCI > Bus Id" (else the header's bus id), and the
log header's "Driver Version" (nvidia-smi(1), "-q").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field

from collectors.compat import dataclass
from collectors.frames import Rejection
from collectors.lineprotocol import Point
from collectors.nvidia_smi import states
from collectors.nvidia_smi.table import looks_like_table, parse_table
from collectors.nvidia_smi.values import (
    SmiParseError,
    first_readable,
    gpu_point,
    info_point,
    refuser,
)

Path = tuple[str, ...]

_GPU_HEADER = re.compile(
    r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]|\[[^\]]*\]"
    r"|Unknown Error)\s*$")
_EVENTS = ("clocks event reasons", "clocks throttle reasons")  # renamed in driver 535
# The log header's driver line, at column 0 before the first GPU block.
_DRIVER = re.compile(r"^Driver Version\s*:(.*)$", re.M)
# collectors.identity.FIELDS name -> the block's reading.
_IDENTITY: Mapping[str, Path] = {"model": ("product name",), "serial": ("serial number",),
                                 "uuid": ("gpu uuid",), "vbios": ("vbios version",),
                                 "pci_bus_id": ("pci", "bus id")}


def _throttle(key: str) -> tuple[Path, ...]:
    return tuple((section, key) for section in _EVENTS)


def _ecc(scope: str, dram: str, old: str) -> tuple[Path, ...]:
    # Ampere+: "DRAM Correctable"; older drivers: "Single Bit" > "Device Memory".
    return (("ecc errors", scope, dram), ("ecc errors", scope, old, "device memory"))


TEXT_PATHS: Mapping[str, tuple[Path, ...]] = {
    "gpu_temp": (("temperature", "gpu current temp"),),
    "mem_temp": (("temperature", "memory current temp"),),
    "gpu_slowdown_temp": (("temperature", "gpu slowdown temp"),),
    "gpu_shutdown_temp": (("temperature", "gpu shutdown temp"),),
    "mem_max_temp": (("temperature", "memory max operating temp"),),
    "gpu_temp_margin": (("temperature", "gpu t.limit temp"),),
    "power_draw": (("gpu power readings", "power draw"),
                   ("gpu power readings", "instantaneous power draw"),
                   ("power readings", "power draw")),
    "sm_clock": (("clocks", "sm"),),
    "gpu_util": (("utilization", "gpu"),),
    "ecc_sbe_volatile": _ecc("volatile", "dram correctable", "single bit"),
    "ecc_dbe_volatile": _ecc("volatile", "dram uncorrectable", "double bit"),
    "ecc_sbe_aggregate": _ecc("aggregate", "dram correctable", "single bit"),
    "ecc_dbe_aggregate": _ecc("aggregate", "dram uncorrectable", "double bit"),
    "ecc_sram_correctable": (("ecc errors", "aggregate", "sram correctable"),),
    "retired_pages_sbe": (("retired pages", "single bit ecc"),),
    "retired_pages_dbe": (("retired pages", "double bit ecc"),),
    "retired_pages_pending": (("retired pages", "pending page blacklist"),
                              ("retired pages", "pending")),
    "remapped_rows_correctable": (("remapped rows", "correctable error"),),
    "remapped_rows_uncorrectable": (("remapped rows", "uncorrectable error"),),
    "remapped_rows_pending": (("remapped rows", "pending"),),
    "remapped_rows_failure": (("remapped rows", "remapping failure occurred"),),
    "pcie_replay": (("pci", "replays since reset"),),
    "pcie_link_gen": (("pci", "gpu link info", "pcie generation", "current"),),
    "pcie_link_gen_max": (("pci", "gpu link info", "pcie generation", "max"),),
    "pcie_link_width": (("pci", "gpu link info", "link width", "current"),),
    "pcie_link_width_max": (("pci", "gpu link info", "link width", "max"),),
    # "HW Thermal Slowdown" is indented under the "HW Slowdown" reading, not a section.
    "throttle_thermal": _throttle("hw thermal slowdown"),
    "throttle_power": _throttle("sw power cap"),
    "throttle_hw_slowdown": _throttle("hw slowdown"),
}


def parse_text(text: str, host: str, ts_ns: int,
               rejected: list[Rejection] | None = None) -> list[Point]:
    """One `gpu` point per GPU block that has any readable catalog metric, and a `gpu_info`
    point with its identity; readings out of range (and identity values that are not one)
    are refused into `rejected` (when given)."""
    blocks = _blocks(text)
    if not blocks:
        if looks_like_table(text):
            return parse_table(text, host, ts_ns)
        raise SmiParseError("no 'GPU <bus id>' block in nvidia-smi -q output")
    driver = _DRIVER.search(text)
    points = []
    for index, block in enumerate(blocks):
        fields = first_readable(TEXT_PATHS, block.readings.get,
                                refuser(rejected, host, index))
        state = block.state()
        if state is not None:
            fields[states.FIELD] = state
        if fields:
            p = gpu_point(host, index, fields, ts_ns)
            p.tags.update(block.mig_tags())
            points.append(p)
        raw: dict[str, str | None] = {k: block.readings.get(path)
                                      for k, path in _IDENTITY.items()}
        raw["pci_bus_id"] = raw["pci_bus_id"] or block.header_bus
        raw["driver"] = driver[1] if driver else None
        info = info_point(host, index, raw, ts_ns, rejected)
        if info is not None:
            points.append(info)
    return points


_MIG_DEVICE = "mig device"


@dataclass(slots=True)
class _Block:
    """One GPU's readings keyed by (section, ..., key), lower case; and the GPU instance id of
    each of its MIG devices, in print order (the sections repeat, so they are kept apart)."""

    readings: dict[Path, str] = field(default_factory=dict)
    mig_instances: list[str] = field(default_factory=list)
    header_bus: str = ""  # the bus id of the "GPU <bus id>" line, as printed

    def state(self) -> int | None:
        """`gpu_unreadable`: see collectors.nvidia_smi.states."""
        return states.assess([(self.header_bus, True), *(
            (v, k in states.CORE_TEXT) for k, v in self.readings.items())])

    def mig_tags(self) -> dict[str, str]:
        if self.readings.get(("mig mode", "current"), "").lower() != "enabled":
            return {}
        tags = {"mig": "enabled"}
        if self.mig_instances:
            tags["mig_instances"] = ",".join(self.mig_instances)
        return tags


def _blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    block: _Block | None = None
    sections: list[tuple[int, str]] = []  # (indent, name) of the open sections
    for line in text.splitlines():
        if not line.strip():
            continue
        header = _GPU_HEADER.match(line)
        if header:
            block = _Block(header_bus=header["bus"])
            blocks.append(block)
            sections = []
            continue
        if block is None:
            continue  # the log header before the first GPU (timestamp, driver version)
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            block = None  # a column-0 line that is not a GPU header ends the GPU blocks
            continue
        while sections and sections[-1][0] >= indent:
            sections.pop()
        key, colon, raw = line.partition(":")
        name = key.strip().lower()
        if not colon:
            sections.append((indent, name))
            continue
        path = (*(s for _, s in sections), name)
        if path == (_MIG_DEVICE, "gpu instance id") and raw.strip():
            block.mig_instances.append(raw.strip())
        block.readings.setdefault(path, raw.strip())
    return blocks
