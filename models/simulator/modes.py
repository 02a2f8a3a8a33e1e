"""The seven failure modes (grouped from the interruption causes of Llama 3, arXiv 2407.21783,
Table 5) and their per-mode parameters (docs/simulator.md, `failures`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from collectors.catalog import Scope
from collectors.labels import FailureMode
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
}

# Lemon nodes multiply these modes only ("3-5x higher M1-M3 rate": docs/simulator.md, `benign`).
LEMON_MODES = (Mode.M1_HBM, Mode.M2_GPU_HARD, Mode.M3_NVLINK)

class ModeRates(BaseModel):
    """Terminal events per GPU-year (Llama 3 Table 5 counts, docs/simulator.md; M4 is per
    GPU-equivalent)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    M1_hbm: float = Field(default=0.030, ge=0)
    M2_gpu_hard: float = Field(default=0.050, ge=0)
    M3_nvlink: float = Field(default=0.015, ge=0)
    M4_ib_link: float = Field(default=0.015, ge=0)
    M5_thermal: float = Field(default=0.0025, ge=0)
    M6_sram: float = Field(default=0.008, ge=0)
    M7_unobservable: float = Field(default=0.055, ge=0)

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

    def of(self, mode: Mode) -> LeadTime:
        lead: LeadTime = getattr(self, mode.value)
        return lead
