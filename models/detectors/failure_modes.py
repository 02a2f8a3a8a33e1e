"""The failure mode a hard rule's firing is evidence of: what turns the rules' hard findings into
failure labels (service.learning.autolabel), in the modes of the labels file (collectors.labels,
docs/trace-format.md). Only terminal evidence is mapped: a pending remap, a soft retired-pages
limit or a thermal slowdown is a precursor, not a failure, and an Xid that a reset clears (the
FATAL_RESET class) says the GPU needs a reset, not that it failed."""

from __future__ import annotations

import math

from collectors.labels import FailureMode
from models.detectors.xid import CRITICAL

M = FailureMode

# Hard rules (models.detectors.hard) whose firing is a failure of the device they name.
RULE_MODES: dict[str, FailureMode] = {
    "dbe": M.M1_HBM,  # an uncorrectable ECC error in device memory
    "remap_failure": M.M1_HBM,  # spare rows exhausted: the HBM is out of repairs
    "retired_pages_limit": M.M1_HBM,  # DCGM's retired-pages hard limit
    "near_shutdown": M.M5_THERMAL,  # within 2 °C of the shutdown temperature
    "nvlink_down": M.M3_NVLINK,
    "ib_port_down": M.M4_IB_LINK,
    # The GPU's link: a fatal AER error loses the GPU's work (a GPU fault); a link trained
    # narrower needs the board reseated or its riser replaced (the public fault log of 400
    # eight-GPU servers over 349 days, SIGCOMM 2025: "GPU PCIe link width low").
    "pcie_aer_fatal": M.M2_GPU_HARD,
    "pcie_width_low": M.M10_PCIE_WIDTH,
    # A port trained below its link's rate, or its HCA's PCIe link narrower than its maximum
    # (which caps the port's rate): a cable, transceiver, switch port or HCA slot to fix (the
    # log's "NIC link speed low" and "NIC PCIe width low").
    "nic_pcie_width_low": M.M11_NIC_SPEED,
    "ib_rate_low": M.M11_NIC_SPEED,
    # The chassis rules (models.detectors.chassis): a supply that failed, or the redundancy its
    # failure took (the log's "power supply failure" and "power redundancy lost"); a fan stalled
    # or under its lower critical speed; an uncorrectable host memory error (the machine check
    # it raises: the log's "CPU machine check" and board faults).
    "psu_failed": M.M8_PSU,
    "psu_redundancy_lost": M.M8_PSU,
    "fan_failed": M.M9_FAN,
    "host_memory_ue": M.M13_HOST_HW,
    # A failed active diagnostic (models.detectors.diagnostic) is ground truth that the node is
    # bad (issue 32): the faults only such a test finds (the log's "GPU P2P bandwidth low",
    # "stress test failure", "silent data corruption"), and memory or PCIe faults it confirms.
    # A set-up failure (diag_software) or an unclassified check names no mode.
    "diag_memory": M.M1_HBM,
    "diag_pcie": M.M10_PCIE_WIDTH,
    "diag_p2p_bandwidth": M.M14_P2P_BW,
    "diag_stress": M.M15_STRESS,
    "diag_data_corruption": M.M16_SDC,
}
# gpu_unreadable by its state (its finding's value): requires reset (2), lost (3) and no longer
# listed (5) are the GPU gone (M2); an unknown error (1) or a hung nvidia-smi (4) is the log's
# "GPU unknown error" and "nvidia-smi timeout" (M12) once the rule holds it at full risk.
UNREADABLE_GONE = frozenset({2, 3, 5})
UNREADABLE_UNKNOWN = frozenset({1, 4})

# inlet_temp_high (the room, not the node) and sxid (NVSwitch: no simulated mode) name no mode.

# Critical Xids (models.detectors.xid.CRITICAL) by what failed, after NVIDIA's Xid catalog
# (collectors/kernel_log/xid_catalog.py) and the simulator's terminal events (docs/simulator.md):
# memory errors are HBM failures, NVLink Xids link failures, the rest the GPU itself (fallen off
# the bus, GSP or firmware errors, engine faults).
XID_MODES: dict[int, FailureMode] = {
    48: M.M1_HBM,  # double-bit ECC error
    63: M.M1_HBM,  # row remap recorded (only with a DBE: the remap rules decide otherwise)
    64: M.M1_HBM,  # row remap failure
    94: M.M1_HBM,  # contained ECC error
    95: M.M1_HBM,  # uncontained ECC error
    140: M.M1_HBM,  # unrecovered ECC error
    74: M.M3_NVLINK,  # NVLink error
}
XID_DEFAULT = M.M2_GPU_HARD  # 79 fallen off the bus, 119/120 GSP, 62, 32, 38, 44, ...

# What a rule's clearing means, when the rule holds until a repair (a GPU reset zeroes the
# volatile DBE count; a new GPU clears the remap-failure flag; a link comes back up). An Xid's
# risk lapses after its hold time whether or not anything was repaired, so it has none.
RULE_REPAIRS: dict[str, str] = {
    "dbe": "gpu_reset",
    "remap_failure": "gpu_replaced",
    "retired_pages_limit": "gpu_replaced",
    "nvlink_down": "link_restored",
    "ib_port_down": "port_restored",
    "ib_rate_low": "port_restored",
    "gpu_unreadable": "gpu_reset",
}


def xid_mode(code: float) -> FailureMode | None:
    """The mode of a critical Xid (a finding's value is its code), None for any other."""
    if not math.isfinite(code) or int(code) not in CRITICAL:
        return None
    return XID_MODES.get(int(code), XID_DEFAULT)


def mode_of(rule: str, value: float) -> FailureMode | None:
    """The failure mode a hard rule firing with `value` is evidence of, None when it is not
    a failure on its own."""
    if rule == "xid":
        return xid_mode(value)
    if rule == "gpu_unreadable":
        state = int(value) if math.isfinite(value) else -1
        if state in UNREADABLE_GONE:
            return M.M2_GPU_HARD
        return M.M12_GPU_UNREADABLE if state in UNREADABLE_UNKNOWN else None
    return RULE_MODES.get(rule)
