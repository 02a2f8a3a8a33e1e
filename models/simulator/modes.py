"""The failure modes and their per-mode parameters (docs/simulator.md, `failures`): M1-M7 grouped
from the interruption causes of Llama 3 (arXiv 2407.21783, Table 5), M8-M13 the node-wide
classes of a public fault log of 400 eight-GPU servers over 349 days (SIGCOMM 2025,
fault_log.py), M14-M16 that log's classes only an active test finds (latent faults, latent.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from collectors.catalog import Scope
from collectors.labels import FailureMode
from models.simulator.fault_log import rate_per_gpu_year
from models.simulator.leadtime import (
    ExponentialLead,
    LeadTime,
    LogNormalLead,
    UniformLead,
)

Mode = FailureMode  # one enum for the simulator's modes and the labels' (collectors.labels)

# The scope a mode's label names: the device that fails (M7 has no device, so the node).
MODE_SCOPE: dict[Mode, Scope] = {
    Mode.M1_HBM: Scope.GPU,
    Mode.M2_GPU_HARD: Scope.GPU,
    Mode.M3_NVLINK: Scope.NVLINK,
    Mode.M4_IB_LINK: Scope.IB_PORT,
    Mode.M5_THERMAL: Scope.GPU,
    Mode.M6_SRAM: Scope.GPU,
    Mode.M7_UNOBSERVABLE: Scope.NODE,
    Mode.M8_PSU: Scope.PSU,
    Mode.M9_FAN: Scope.FAN,
    Mode.M10_PCIE_WIDTH: Scope.GPU,
    Mode.M11_NIC_SPEED: Scope.IB_PORT,
    Mode.M12_GPU_UNREADABLE: Scope.GPU,
    Mode.M13_HOST_HW: Scope.NODE,
    # Design choices (docs/simulator.md, "Active-only modes"): low P2P bandwidth is a property of
    # the node's GPU fabric (nvbandwidth reports a matrix of pairs, the repair is the baseboard or
    # NVSwitch tray), a stress-test failure and silent data corruption name the GPU that failed.
    Mode.M14_P2P_BW: Scope.NODE,
    Mode.M15_STRESS: Scope.GPU,
    Mode.M16_SDC: Scope.GPU,
}
# The node-wide modes (issue 31): planned after M1-M7 on streams of their own, so adding them
# moves none of the GPU modes' draws.
NODE_WIDE = (Mode.M8_PSU, Mode.M9_FAN, Mode.M10_PCIE_WIDTH, Mode.M11_NIC_SPEED,
             Mode.M12_GPU_UNREADABLE, Mode.M13_HOST_HW)
# Faults no telemetry shows (issue 32): never failures of the trace, planned as latent faults
# (latent.py) on streams of their own, so they move no other mode's draws and no sample.
ACTIVE_ONLY = (Mode.M14_P2P_BW, Mode.M15_STRESS, Mode.M16_SDC)

# Lemon nodes multiply these modes only ("3-5x higher M1-M3 rate": docs/simulator.md, `benign`).
LEMON_MODES = (Mode.M1_HBM, Mode.M2_GPU_HARD, Mode.M3_NVLINK)

class ModeRates(BaseModel):
    """Terminal events per GPU-year (M1-M7: Llama 3 Table 5 counts, docs/simulator.md; M4 is per
    GPU-equivalent; M8-M16: the fault log's downtime shares, fault_log.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    M1_hbm: float = Field(default=0.030, ge=0)
    M2_gpu_hard: float = Field(default=0.050, ge=0)
    M3_nvlink: float = Field(default=0.015, ge=0)
    M4_ib_link: float = Field(default=0.015, ge=0)
    M5_thermal: float = Field(default=0.0025, ge=0)
    M6_sram: float = Field(default=0.008, ge=0)
    M7_unobservable: float = Field(default=0.055, ge=0)
    M8_psu: float = Field(default=round(rate_per_gpu_year(Mode.M8_PSU), 5), ge=0)
    M9_fan: float = Field(default=round(rate_per_gpu_year(Mode.M9_FAN), 5), ge=0)
    M10_pcie_width: float = Field(default=round(rate_per_gpu_year(Mode.M10_PCIE_WIDTH), 5), ge=0)
    M11_nic_speed: float = Field(default=round(rate_per_gpu_year(Mode.M11_NIC_SPEED), 5), ge=0)
    M12_gpu_unreadable: float = Field(
        default=round(rate_per_gpu_year(Mode.M12_GPU_UNREADABLE), 5), ge=0)
    M13_host_hw: float = Field(default=round(rate_per_gpu_year(Mode.M13_HOST_HW), 5), ge=0)
    M14_p2p_bw: float = Field(default=round(rate_per_gpu_year(Mode.M14_P2P_BW), 7), ge=0)
    M15_stress: float = Field(default=round(rate_per_gpu_year(Mode.M15_STRESS), 7), ge=0)
    M16_sdc: float = Field(default=round(rate_per_gpu_year(Mode.M16_SDC), 7), ge=0)

    def of(self, mode: Mode) -> float:
        return float(getattr(self, mode.value))

    @property
    def total(self) -> float:
        return sum(self.of(m) for m in Mode)


class ModeFractions(BaseModel):
    """Share of terminal events that show a precursor in our metrics (design choices,
    docs/simulator.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    M1_hbm: float = Field(default=0.45, ge=0, le=1)
    M2_gpu_hard: float = Field(default=0.2, ge=0, le=1)
    M3_nvlink: float = Field(default=0.6, ge=0, le=1)
    M4_ib_link: float = Field(default=0.5, ge=0, le=1)
    M5_thermal: float = Field(default=0.8, ge=0, le=1)
    M6_sram: float = Field(default=0.1, ge=0, le=1)
    M7_unobservable: float = Field(default=0.0, ge=0, le=0)  # unobservable by definition
    # Node-wide modes (design choices): a fan's bearing wears for hours to days before it
    # stalls; a supply runs hot before about half of its failures; AER correctable bursts come
    # before a width drop; a port retrains with symbol errors before it settles at a lower rate.
    # A GPU in an unknown state and a host memory UE come without a sign in our metrics.
    M8_psu: float = Field(default=0.5, ge=0, le=1)
    M9_fan: float = Field(default=0.7, ge=0, le=1)
    M10_pcie_width: float = Field(default=0.6, ge=0, le=1)
    M11_nic_speed: float = Field(default=0.4, ge=0, le=1)
    M12_gpu_unreadable: float = Field(default=0.0, ge=0, le=1)
    M13_host_hw: float = Field(default=0.0, ge=0, le=1)
    # Active-only: no sign in any metric, by definition.
    M14_p2p_bw: float = Field(default=0.0, ge=0, le=0)
    M15_stress: float = Field(default=0.0, ge=0, le=0)
    M16_sdc: float = Field(default=0.0, ge=0, le=0)

    def of(self, mode: Mode) -> float:
        return float(getattr(self, mode.value))


class ModeLeadTimes(BaseModel):
    """Precursor onset to terminal event (docs/simulator.md, `failures`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    M1_hbm: LeadTime = LogNormalLead(median_h=24, p10_h=2, p90_h=120)
    M2_gpu_hard: LeadTime = ExponentialLead(mean_h=6)
    M3_nvlink: LeadTime = LogNormalLead(median_h=12, p10_h=1, p90_h=72)
    M4_ib_link: LeadTime = UniformLead(min_h=24, max_h=168)
    M5_thermal: LeadTime = UniformLead(min_h=6, max_h=72)
    # No source gives a law for SRAM; design choice: the M1 law (both are on-die ECC signals).
    M6_sram: LeadTime = LogNormalLead(median_h=24, p10_h=2, p90_h=120)
    # Never drawn (fraction 0); present so every mode has an entry.
    M7_unobservable: LeadTime = UniformLead(min_h=1, max_h=2)
    # Design choices: fan RPM decays over hours to days, a supply's temperature over hours.
    M8_psu: LeadTime = LogNormalLead(median_h=12, p10_h=2, p90_h=48)
    M9_fan: LeadTime = LogNormalLead(median_h=24, p10_h=4, p90_h=96)
    M10_pcie_width: LeadTime = LogNormalLead(median_h=6, p10_h=1, p90_h=48)
    M11_nic_speed: LeadTime = UniformLead(min_h=2, max_h=48)
    M12_gpu_unreadable: LeadTime = UniformLead(min_h=1, max_h=2)  # never drawn by default
    M13_host_hw: LeadTime = UniformLead(min_h=1, max_h=2)  # never drawn by default
    M14_p2p_bw: LeadTime = UniformLead(min_h=1, max_h=2)  # never drawn (no precursor)
    M15_stress: LeadTime = UniformLead(min_h=1, max_h=2)
    M16_sdc: LeadTime = UniformLead(min_h=1, max_h=2)

    def of(self, mode: Mode) -> LeadTime:
        lead: LeadTime = getattr(self, mode.value)
        return lead
