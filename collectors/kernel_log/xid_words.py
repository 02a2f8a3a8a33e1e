"""An Xid in operator words: what it means and what to do, from the catalog
(collectors/kernel_log/xid_catalog.py: NVIDIA's description and resolution buckets, GPUd's
action), for alert reasons, messages and the console."""

from __future__ import annotations

from collectors.kernel_log.xid_catalog import GpudAction, xid_info

# NVIDIA's immediate resolution buckets (the Xid catalog's "Resolution" column), in words.
_IMMEDIATE = {
    "RESTART_APP": "restart the job",
    "RESET_GPU": "reset the GPU (nvidia-smi -r) or reboot the node",
    "RESTART_BM": "reboot the node",
    "RESTART_VM": "restart the VM",
    "CONTACT_SUPPORT": "collect nvidia-bug-report.sh and contact NVIDIA support",
    "CHECK_MECHANICALS": "check the GPU's seating, cabling and cooling",
    "IGNORE": "no action",
}
_GPUD = {
    GpudAction.REBOOT_SYSTEM: "reboot the node; if it recurs, inspect the hardware",
    GpudAction.HARDWARE_INSPECTION: "drain the node and inspect the hardware (likely RMA)",
    GpudAction.CHECK_USER_APP_AND_GPU: "check the job's code, then the GPU",
    GpudAction.IGNORE_NO_ACTION_REQUIRED: "no action",
}


def xid_words(code: int) -> str:
    """`Xid 79 (GPU has fallen off the bus): drain the node and inspect the hardware`."""
    info = xid_info(code)
    if info is None:
        return f"Xid {code} (not in NVIDIA's catalog): look it up, then reset the GPU"
    action = _GPUD.get(info.gpud_action) or _IMMEDIATE.get(info.immediate, "")
    what = info.description or info.mnemonic
    return f"Xid {code} ({what})" + (f": {action}" if action else "")
