"""Risk per Xid code, from NVIDIA's Xid catalog as classified by GPUd (github.com/leptonai/gpud,
components/accelerator/nvidia/xid/xid.go): codes whose repair is a reboot or hardware inspection
are critical; application errors (13, 31, 43) and "high SBE rate" notices (45, 92) say nothing
about the hardware; 63 (row remap recorded) is left to the remap rules, as GPUd does, because a
pending remap may clear itself after a reset."""

from __future__ import annotations

# Fatal, REBOOT_SYSTEM escalating to HARDWARE_INSPECTION, or HARDWARE_INSPECTION outright:
# 48 DBE, 64 remap failure, 74 NVLink, 79 fallen off the bus, 94/95 contained/uncontained ECC,
# 119/120 GSP, 121 C2C, 140 unrecovered ECC.
CRITICAL = frozenset({32, 38, 44, 48, 62, 64, 65, 68, 69, 74, 79, 81, 94, 95, 110, 119, 120,
                      121, 123, 140, 143})
# Fatal with REBOOT_SYSTEM as the first repair: the GPU needs a reset but is not known bad.
FATAL_RESET = frozenset({9, 12, 16, 18, 19, 26, 27, 28, 29, 30, 33, 34, 35, 36, 42, 46, 47, 59,
                         60, 61, 78})
IGNORED = frozenset({13, 31, 43, 45, 63, 92})

CRITICAL_RISK = 1.0
FATAL_RESET_RISK = 0.7
OTHER_RISK = 0.2  # recorded in the explanation, below every alert level on its own


def xid_risk(code: int) -> float:
    if code in CRITICAL:
        return CRITICAL_RISK
    if code in FATAL_RESET:
        return FATAL_RESET_RISK
    if code in IGNORED:
        return 0.0
    return OTHER_RISK
