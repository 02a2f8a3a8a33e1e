"""An alert's cause in a few characters, first in its summary: `DBE gpu3`, `Xid79 gpu1`,
`IB mlx5_2`, `PSU psu2`. Tools show only the start of a line: `sinfo -R` the first 20
characters of a drain reason (`gpuhealth DBE gpu3 ...`), a pager's lock screen the start of a
subject. The words come from the top signal's rule; the device from the entity's key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Rules by what an operator calls the fault; a rule not listed shows by its own name.
_WORDS = {
    "dbe": "DBE", "sbe_rate": "SBE", "remap_failure": "Remap", "remap_pending": "Remap",
    "retired_pages_limit": "Pages", "near_shutdown": "Hot", "thermal_slowdown": "Hot",
    "nvlink_down": "NVLink", "nvlink_errors": "NVLink", "ib_port_down": "IB",
    "ib_rate_low": "IBrate", "ib_symbol_errors": "IB", "roce_gid_missing": "GID",
    "gpu_unreadable": "GPUerr", "pcie_width_low": "PCIe", "pcie_aer_fatal": "AER",
    "pcie_replay_rate": "PCIe", "nic_pcie_width_low": "NICpcie", "host_memory_ue": "HostUE",
    "psu_failed": "PSU", "psu_redundancy_lost": "PSU", "psu_running_hot": "PSU",
    "fan_failed": "Fan", "fan_slowing": "Fan", "inlet_temp_high": "Inlet", "model": "Model",
    # A failed active diagnostic, by what failed (models/detectors/diagnostic.py).
    "diag_memory": "DiagMem", "diag_pcie": "DiagPCIe", "diag_p2p_bandwidth": "DiagP2P",
    "diag_stress": "DiagStress", "diag_data_corruption": "DiagSDC", "diag_software": "DiagSW",
    "diag_other": "Diag",
}
MAX_CAUSE = 12  # "gpuhealth " and ten more: what `sinfo -R` shows, and a little


def short_cause(entity: str, top: Mapping[str, Any] | None) -> str:
    """The cause of an entity's alert from its top signal, at most MAX_CAUSE characters; ""
    without a signal."""
    if not top or not top.get("rule"):
        return ""
    rule = str(top["rule"])
    value = top.get("value")
    if rule in ("xid", "sxid") and isinstance(value, int | float) and value == value:
        word = f"{'Xid' if rule == 'xid' else 'SXid'}{int(value)}"
    else:
        word = _WORDS.get(rule, rule)
    device = entity.split(":", 1)[1].split(":", 1)[0] if ":" in entity else ""
    return f"{word} {device}".strip()[:MAX_CAUSE]
