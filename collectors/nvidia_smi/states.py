"""A GPU that nvidia-smi cannot read, as the `gpu_unreadable` state (collectors/catalog.py).

nvidia-smi prints an NVML error in place of a reading, as NVML's own error string: in brackets in
`--query-gpu` CSV and `-q` output ("[Unknown Error]", "[GPU requires reset]", "[GPU is lost]";
nvmlErrorString of NVML_ERROR_UNKNOWN, _RESET_REQUIRED and _GPU_IS_LOST in the NVML API
reference), and as "ERR!" in a cell of its default table (the nvidia-smi man page: "ERR!" marks
a value it failed to read). A GPU whose device handle it cannot get is one line instead of its
readings: "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error"; with no
GPU left at all it prints "No devices were found" (exit status 6). The man page's exit status 15
says "GPU has fallen off the bus or has otherwise become inaccessible".

"Requires reset" and "is lost" are never a healthy GPU's answer, wherever they appear. "Unknown
Error" is: a healthy RTX 4090 prints "Addressing Mode : Unknown Error" (a real capture), so it
counts only in the readings every GPU answers (CORE_QUERY, CORE_TEXT, CORE_XML) or in the bus id.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from collectors.kernel_log.messages import normalize_bus_id
from collectors.nvidia_smi.values import value

FIELD = "gpu_unreadable"
READABLE, UNKNOWN, RESET, LOST, TIMEOUT, NOT_FOUND = 0, 1, 2, 3, 4, 5

# --query-gpu fields every GPU answers; an NVML error in one of them is the GPU's, not a feature's.
CORE_QUERY = frozenset({"pci.bus_id", "gpu_bus_id", "uuid", "name", "temperature.gpu",
                        "power.draw", "utilization.gpu", "clocks.current.sm", "memory.used"})
# The same readings in `-q` text, as (section, ..., key) lower case, and in `-q -x` XML.
CORE_TEXT = frozenset({("product name",), ("gpu uuid",), ("pci", "bus id"),
                       ("temperature", "gpu current temp"), ("utilization", "gpu"),
                       ("clocks", "sm"), ("gpu power readings", "power draw"),
                       ("power readings", "power draw"), ("fb memory usage", "used")})
CORE_XML = ("product_name", "uuid", "pci/pci_bus_id", "temperature/gpu_temp",
            "utilization/gpu_util", "clocks/sm_clock", "gpu_power_readings/power_draw",
            "power_readings/power_draw", "fb_memory_usage/used")

_RESET = re.compile(r"requires?\s+reset", re.I)
_LOST = re.compile(r"gpu\s+is\s+lost|fallen\s+off\s+the\s+bus", re.I)
_UNKNOWN = re.compile(r"unknown\s+error|^\s*\[?\s*err!\s*\]?\s*$", re.I)
HANDLE_ERROR = re.compile(
    r"Unable to determine the device handle for (?:GPU\s*)?(?P<bus>[0-9A-Fa-f:.]+)\s*:\s*"
    r"(?P<why>.*?)\s*$", re.I | re.M)
NO_DEVICES = re.compile(r"^\s*No devices were found\s*$", re.I | re.M)


def state_of(raw: str | None, core: bool) -> int:
    """The state one printed value says: LOST or RESET wherever it appears, UNKNOWN only in a
    core reading, else READABLE (a number, "N/A", "[Not Supported]", ...)."""
    if not raw:
        return READABLE
    if _LOST.search(raw):
        return LOST
    if _RESET.search(raw):
        return RESET
    if core and _UNKNOWN.search(raw):
        return UNKNOWN
    return READABLE


def worst(states: Iterable[int]) -> int:
    """Of one GPU's readings: lost over requires-reset over unknown error (the order the rules
    rank them in: models/detectors/hard.py)."""
    return max(states, default=READABLE)


def assess(values: Iterable[tuple[str | None, bool]]) -> int | None:
    """One GPU's state from its printed values, each with whether it is a core reading: the
    worst error any prints; READABLE only when a core reading printed a number (a capture of
    `-q -d PAGE_RETIREMENT` says nothing of whether the GPU can be read); else None."""
    worst_seen, answered = READABLE, False
    for raw, core in values:
        worst_seen = max(worst_seen, state_of(raw, core))
        answered = answered or (core and value(raw) is not None)
    if worst_seen != READABLE:
        return worst_seen
    return READABLE if answered else None


def handle_errors(text: str) -> dict[str, int]:
    """Normalized bus id ('0000:3b:00') -> state, for each "Unable to determine the device
    handle" line; a cause it does not name ("Not Found") reads as an unknown error."""
    out: dict[str, int] = {}
    for m in HANDLE_ERROR.finditer(text):
        bus = normalize_bus_id(m["bus"])
        if bus is not None:
            out[bus] = state_of(m["why"], core=True) or UNKNOWN
    return out


def no_devices(text: str) -> bool:
    return NO_DEVICES.search(text) is not None
