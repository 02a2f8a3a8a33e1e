"""What a failed check says is wrong, as the code the `diag` event carries (collectors.catalog)
and the rule reads (models/detectors/diagnostic.py): one class per kind of fault an active test
finds, so the alert names it. 0 is a run that passed: it clears an earlier failure."""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum

from collectors.diagnostics.result import Check, Status


class FaultClass(IntEnum):
    PASSED = 0
    MEMORY = 1  # DCGM memory / memory bandwidth tests
    PCIE = 2  # DCGM pcie, host <-> device copies below expected
    P2P_BANDWIDTH = 3  # NCCL bus bandwidth, device <-> device copies, NVLink below expected
    STRESS = 4  # a stress or burn test failed (DCGM targeted stress/power, gpu_burn)
    DATA_CORRUPTION = 5  # wrong results: NCCL #wrong, gpu_burn errors (silent corruption)
    SOFTWARE = 6  # the node's set-up (DCGM's deployment checks): fix the config, not the board
    OTHER = 7


RULE_NAMES = {c: f"diag_{c.name.lower()}" for c in FaultClass if c is not FaultClass.PASSED}

_BY_CHECK = {
    "memory": FaultClass.MEMORY, "memory_bandwidth": FaultClass.MEMORY,
    "pcie": FaultClass.PCIE, "host_to_device_memcpy_ce": FaultClass.PCIE,
    "device_to_host_memcpy_ce": FaultClass.PCIE,
    "busbw_gbps": FaultClass.P2P_BANDWIDTH, "avg_busbw_gbps": FaultClass.P2P_BANDWIDTH,
    "device_to_device_memcpy_read_ce": FaultClass.P2P_BANDWIDTH,
    "device_to_device_memcpy_write_ce": FaultClass.P2P_BANDWIDTH,
    "nvlink": FaultClass.P2P_BANDWIDTH,
    "targeted_stress": FaultClass.STRESS, "targeted_power": FaultClass.STRESS,
    "sm_stress": FaultClass.STRESS, "diagnostic": FaultClass.STRESS, "eud": FaultClass.STRESS,
    "pulse_test": FaultClass.STRESS, "gflops": FaultClass.STRESS,
    "data_integrity": FaultClass.DATA_CORRUPTION, "burn_errors": FaultClass.DATA_CORRUPTION,
    "software": FaultClass.SOFTWARE,
}


def fault_class(check: Check) -> FaultClass:
    if check.name in _BY_CHECK:
        return _BY_CHECK[check.name]
    if "memcpy" in check.name:  # nvbandwidth's other copy tests: by their direction
        return (FaultClass.P2P_BANDWIDTH if "device_to_device" in check.name
                else FaultClass.PCIE)
    return FaultClass.OTHER


def worst(checks: Iterable[Check]) -> FaultClass:
    """The class a run's failed checks report: hardware before set-up, the lowest code among
    equals (memory before copies before stress). PASSED when none failed."""
    found = {fault_class(c) for c in checks if c.status is Status.FAIL}
    hardware = sorted(c for c in found if c is not FaultClass.SOFTWARE)
    return hardware[0] if hardware else (FaultClass.SOFTWARE if found else FaultClass.PASSED)
