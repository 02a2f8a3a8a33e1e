"""A signal's value in words: a state by its name (an IB port `DOWN`, not `= 1`), a count or a
measure with its unit (`3 errors`, `92 °C`), an Xid by its number. The rules' values and
thresholds are plain numbers (models/detectors); what each means comes from the rule that made
it, so the words are kept here by rule. A rule not listed reads as the number."""

from __future__ import annotations

import math
from typing import Any

# IBA PortState (ibstat, sysfs ports/<n>/state), NVML's NVLink state, and our own codes
# (collectors/catalog.py: gpu_unreadable, psu_redundant, the remap flags).
_STATES: dict[str, dict[int, str]] = {
    "ib_port_down": {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"},
    "nvlink_down": {0: "inactive", 1: "active"},
    "gpu_unreadable": {0: "readable", 1: "unknown error", 2: "requires reset", 3: "lost",
                       4: "nvidia-smi timed out", 5: "not found"},
    "remap_failure": {0: "no", 1: "yes"},
    "remap_pending": {0: "no", 1: "yes"},
    "psu_redundancy_lost": {0: "lost", 1: "redundant"},
}
_UNITS = {
    "dbe": "errors", "retired_pages_limit": "pages", "retired_pages_soft": "pages",
    "thermal_slowdown": "°C", "near_shutdown": "°C", "inlet_temp_high": "°C",
    "psu_running_hot": "°C", "pcie_replay_rate": "replays", "pcie_width_low": "lanes",
    "nic_pcie_width_low": "lanes", "pcie_aer_fatal": "errors",
    "pcie_aer_correctable_burst": "errors", "host_memory_ue": "errors", "fan_failed": "rpm",
    "ib_rate_low": "Gb/s", "psu_failed": "supplies delivering", "roce_gid_missing": "GIDs",
}
_ONE = {"errors": "error", "pages": "page", "replays": "replay", "lanes": "lane",
        "GIDs": "GID", "supplies delivering": "supply delivering"}
_CODES = {"xid": "Xid {}", "sxid": "SXid {}"}


def value_text(rule: str, value: Any) -> str:
    """`DOWN`, `3 errors`, `Xid 79`, `0.42`; `n/a` for no value."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "n/a" if value is None else str(value)
    if not math.isfinite(value):
        return "n/a"
    whole = float(value).is_integer()
    if rule in _STATES and whole and int(value) in _STATES[rule]:
        return _STATES[rule][int(value)]
    if rule in _CODES and whole:
        return _CODES[rule].format(int(value))
    number = f"{value:.4g}"
    if rule not in _UNITS:
        return number
    unit = _UNITS[rule]
    return f"{number} {_ONE.get(unit, unit) if value == 1 else unit}"
