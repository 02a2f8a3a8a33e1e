"""The simulator's configuration: one pydantic tree, validated at construction.

`SimConfig` is everything a trace depends on: the same config (seed included) gives a
byte-identical trace.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from collectors.catalog import CATALOG, Scope
from models.simulator.config_active import ActiveConfig
from models.simulator.config_background import BenignConfig, SignalConfig, WorkloadConfig
from models.simulator.config_chassis import ChassisConfig
from models.simulator.config_shapes import Shapes
from models.simulator.hardware import GENERATIONS, GenerationName, GenerationSpec
from models.simulator.modes import (
    ACTIVE_ONLY,
    NODE_WIDE,
    Mode,
    ModeFractions,
    ModeLeadTimes,
    ModeRates,
)

SECONDS_PER_YEAR = 8766 * 3600  # a GPU-year is 8,766 h (365.25 days)
BASE_STEP_S = 5  # the service's sampling period; coarser steps are multiples of it


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FleetConfig(_Cfg):
    nodes: int = Field(ge=1)
    gpus_per_node: int = Field(default=8, ge=1, le=64)
    generation: GenerationName = "H100-like"
    # None takes the generation's count (12 or 18); fewer keeps big scenarios fast.
    nvlinks_per_gpu: int | None = Field(default=None, ge=1, le=18)
    ib_ports_per_node: int = Field(default=8, ge=1, le=32)
    # The chassis a BMC reports (issue 31): two redundant supplies (1+1) and six fans, as on
    # common 8-GPU servers; design choice.
    psus_per_node: int = Field(default=2, ge=1, le=16)
    fans_per_node: int = Field(default=6, ge=1, le=32)
    # Ampere and later replace page retirement by row remapping and NVML reports retired pages
    # as not supported, so those columns are NaN. Set this to report them (remaps then also
    # retire pages and set the pending flag, pre-Ampere style).
    page_retirement: bool = False
    # Columns this fleet never reports (NaN throughout): a generation or driver without the
    # field, e.g. no HBM temperature (docs/simulator.md, `fleet`).
    missing_fields: tuple[str, ...] = ()
    # Error counters that stop at ("stick") or wrap past ("wrap") this value; None: 64-bit
    # counters that never get there. IB PortCounters error fields are 16 bits or fewer and
    # saturate (InfiniBand Architecture Specification, PortCounters); IB data counters are
    # left alone.
    counter_max: float | None = Field(default=None, ge=1)
    counter_overflow: Literal["stick", "wrap"] = "stick"

    @model_validator(mode="after")
    def _known_fields(self) -> FleetConfig:
        known = {m.name for s in (Scope.GPU, Scope.NVLINK, Scope.IB_PORT)
                 for m in CATALOG.columns(s)}
        bad = sorted(set(self.missing_fields) - known)
        if bad:
            raise ValueError(f"missing_fields: unknown columns {bad}")
        return self

    @property
    def spec(self) -> GenerationSpec:
        return GENERATIONS[self.generation]

    @property
    def links(self) -> int:
        n = self.nvlinks_per_gpu
        return n if n is not None else self.spec.nvlinks_per_gpu

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


class TimeConfig(_Cfg):
    start_s: int = 1_735_689_600  # 2025-01-01T00:00:00Z
    days: float = Field(gt=0)
    # Counters are the same cumulative counters at any step; gauges are the mean over the step.
    step_s: int = Field(default=BASE_STEP_S, ge=BASE_STEP_S)
    chunk_mb: float = Field(default=64.0, gt=0)  # bound on the values of one yielded Batch

    @model_validator(mode="after")
    def _aligned(self) -> TimeConfig:
        if self.step_s % BASE_STEP_S:
            raise ValueError(f"step_s must be a multiple of {BASE_STEP_S} s")
        if self.start_s % 60:
            raise ValueError("start_s must be a whole minute (resets and rate bins align to it)")
        return self

    @property
    def end_s(self) -> float:
        return self.start_s + self.days * 86400.0

    @property
    def steps(self) -> int:
        return int(self.days * 86400 // self.step_s)


class FailureConfig(_Cfg):
    rates: ModeRates = ModeRates()
    precursor_fraction: ModeFractions = ModeFractions()
    lead_time: ModeLeadTimes = ModeLeadTimes()
    # Reliability grade: scale all rates so they sum to this (Kokolis et al., HPCA 2025: 0.11
    # RSC-2 .. 0.30 RSC-1).
    total_per_gpu_year: float | None = Field(default=None, ge=0.11, le=0.30)
    # Multiplies every failure rate (never benign ones) to get enough events in a short or small
    # scenario; per-GPU-year results are reported at base rates by dividing by it
    # (docs/simulator.md).
    rate_multiplier: float = Field(default=1.0, gt=0)
    generation_shift: bool = False  # apply the generation's shift scenario (hardware.py) to M1 / M3
    shapes: Shapes = Shapes()

    def effective_rates(self, spec: GenerationSpec) -> dict[Mode, float]:
        rates = {m: self.rates.of(m) for m in Mode}
        if self.generation_shift:
            rates.update({Mode(k): v for k, v in spec.rate_shift.items()})
        if self.total_per_gpu_year is not None:  # the GPU fleet's grade: M1-M7 only
            gpu = [m for m in rates if m not in NODE_WIDE and m not in ACTIVE_ONLY]
            scale = self.total_per_gpu_year / max(sum(rates[m] for m in gpu), 1e-12)
            rates.update({m: rates[m] * scale for m in gpu})
        return {m: r * self.rate_multiplier for m, r in rates.items()}


class Trap(StrEnum):
    SBE_CARRIER = "sbe_carrier"
    BENIGN_REMAP = "benign_remap"
    NVLINK_BLIP = "nvlink_blip"
    IB_CORRUPTION = "ib_corruption"
    DRIVER_RELOAD = "driver_reload"
    PLANNED_MAINTENANCE = "planned_maintenance"
    TELEMETRY_GAP = "telemetry_gap"
    CLOCK_SKEW = "clock_skew"
    STRAGGLER_COMPUTE = "straggler_compute"
    STRAGGLER_COMM = "straggler_comm"
    SOFTWARE_XID = "software_xid"
    LEMON_NODE = "lemon_node"
    # Chassis and link look-alikes (issue 31; config_chassis.py).
    PSU_STANDBY = "psu_standby"
    FAN_PROFILE = "fan_profile"
    PCIE_IDLE_NARROW = "pcie_idle_narrow"
    IB_RENEGOTIATE = "ib_renegotiate"


class ScriptedFailure(_Cfg):
    """A failure placed by hand (demo scenarios), in addition to the random ones."""

    mode: Mode
    at_h: float = Field(ge=0)  # terminal event, hours after start
    node: int = Field(default=0, ge=0)
    unit: int = Field(default=0, ge=0)  # GPU index, IB port (M4, M11), supply (M8) or fan (M9)
    link: int = Field(default=0, ge=0)  # NVLink index for M3
    lead_h: float | None = Field(default=None, gt=0)  # None: no precursor
    repair_h: float = Field(default=1.0, gt=0)


class ScriptedBenign(_Cfg):
    trap: Trap
    start_h: float = Field(ge=0)
    duration_h: float = Field(default=0.0, ge=0)
    node: int = Field(default=0, ge=0)
    unit: int = Field(default=0, ge=0)
    link: int = Field(default=0, ge=0)


class SimConfig(_Cfg):
    name: str = "custom"
    seed: int = Field(default=0, ge=0)
    fleet: FleetConfig
    time: TimeConfig
    failures: FailureConfig = FailureConfig()
    benign: BenignConfig = BenignConfig()
    workload: WorkloadConfig = WorkloadConfig()
    signals: SignalConfig = SignalConfig()
    chassis: ChassisConfig = ChassisConfig()
    active: ActiveConfig = ActiveConfig()  # latent faults and the diagnostics policy (issue 32)
    scripted_failures: tuple[ScriptedFailure, ...] = ()
    scripted_benign: tuple[ScriptedBenign, ...] = ()

    @model_validator(mode="after")
    def _scripted_fit(self) -> SimConfig:
        f = self.fleet
        for s in self.scripted_failures:
            unit_max = {Mode.M4_IB_LINK: f.ib_ports_per_node,
                        Mode.M11_NIC_SPEED: f.ib_ports_per_node, Mode.M8_PSU: f.psus_per_node,
                        Mode.M9_FAN: f.fans_per_node}.get(s.mode, f.gpus_per_node)
            if s.node >= f.nodes or s.unit >= unit_max or s.link >= f.links:
                raise ValueError(f"scripted failure {s} is outside the fleet")
        for b in self.scripted_benign:
            if b.node >= f.nodes or b.unit >= max(f.gpus_per_node, f.ib_ports_per_node):
                raise ValueError(f"scripted benign trap {b} is outside the fleet")
        return self

    @property
    def gpu_years(self) -> float:
        return self.fleet.gpus * self.time.days * 86400.0 / SECONDS_PER_YEAR
