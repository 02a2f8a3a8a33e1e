"""The fault classes of a public fault log of 400 eight-GPU servers over 349 days (SIGCOMM 2025;
584 faults), with each class's share of the downtime that had a known cause (issue 31's table),
and the simulated failure mode that stands for it (None: not simulated). The classes that only an
active test finds map to the active-only modes M14-M16 (latent faults: models/simulator/latent.py).
The modes' rates (modes.py) and the evaluation's share of downtime in observed classes
(models/evaluation/coverage.py) both read it."""

from __future__ import annotations

from dataclasses import dataclass

from collectors.labels import FailureMode

M = FailureMode

SERVERS, DAYS, FAULTS = 400, 349, 584
# The log files a quarter of the downtime under "unknown"; the table's shares are of the rest.
KNOWN_SHARE = 0.75
GPUS_PER_SERVER = 8


@dataclass(frozen=True, slots=True)
class FaultClass:
    name: str
    share: float  # of the known-cause downtime, percent
    mode: FailureMode | None


CLASSES: tuple[FaultClass, ...] = (
    FaultClass("power supply failure", 19.1, M.M8_PSU),
    FaultClass("power redundancy lost", 0.1, M.M8_PSU),
    FaultClass("GPU double-bit ECC over threshold", 14.8, M.M1_HBM),
    FaultClass("GPU single-bit ECC over threshold", 0.1, M.M1_HBM),
    FaultClass("NIC link speed low", 11.3, M.M11_NIC_SPEED),
    FaultClass("network cable link down", 8.0, M.M4_IB_LINK),
    FaultClass("GPU PCIe link width low", 7.6, M.M10_PCIE_WIDTH),
    FaultClass("NIC PCIe width low", 0.04, M.M11_NIC_SPEED),
    FaultClass("GPU temperature high", 7.0, M.M5_THERMAL),
    FaultClass("GPU P2P bandwidth low", 6.6, M.M14_P2P_BW),
    FaultClass("stress test failure", 5.6, M.M15_STRESS),
    FaultClass("silent data corruption", 0.2, M.M16_SDC),
    FaultClass("fan speed critical", 6.3, M.M9_FAN),
    FaultClass("fan redundancy lost", 5.8, M.M9_FAN),
    FaultClass("GPU unknown error", 2.4, M.M12_GPU_UNREADABLE),
    FaultClass("nvidia-smi timeout", 0.5, M.M12_GPU_UNREADABLE),
    FaultClass("GPU lost", 1.4, M.M2_GPU_HARD),
    FaultClass("NIC lost", 1.1, M.M4_IB_LINK),
    FaultClass("Xid", 0.6, M.M2_GPU_HARD),
    FaultClass("RDMA NIC GID error", 0.4, None),
    FaultClass("motherboard", 0.4, M.M13_HOST_HW),
    FaultClass("CPU machine check", 0.3, M.M13_HOST_HW),
    # A riser carries the GPU's PCIe link: a bad one shows as a narrow or erroring link.
    FaultClass("riser", 0.1, M.M10_PCIE_WIDTH),
)


def share_of(mode: FailureMode) -> float:
    """The mode's share of the known-cause downtime, percent."""
    return sum(c.share for c in CLASSES if c.mode is mode)


def rate_per_gpu_year(mode: FailureMode) -> float:
    """Faults per GPU-year of the log's classes behind `mode`, taking each class's share of the
    faults equal to its share of the downtime (the log's table gives downtime only: a design
    choice, docs/simulator.md)."""
    known_faults = FAULTS * KNOWN_SHARE
    gpu_years = SERVERS * GPUS_PER_SERVER * DAYS / 365.25
    return share_of(mode) / 100.0 * known_faults / gpu_years
