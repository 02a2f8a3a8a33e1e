"""How each failure mode's precursor and terminal event look in the metrics (docs/simulator.md,
`failures.shapes`).

Every default is either a published number (cited) or marked design choice; docs/simulator.md
lists them all with their sources.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

# How a precursor grows from onset to the terminal event (docs/simulator.md, "Growth shapes"):
# "native" is each mode's own shape (the default), the others override it where the mode
# has a choice.
Growth = Literal["native", "linear", "exponential", "step", "burst"]
GROWTHS: tuple[Growth, ...] = ("native", "linear", "exponential", "step", "burst")


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HbmShape(_Shape):
    """M1: bursty correctable ECC rising toward the event, remaps, then a DBE / remap failure."""

    # design choice: expected bursts = base + per_h * lead
    bursts_base: float = Field(default=4.0, ge=0)
    bursts_per_h: float = Field(default=0.5, ge=0)  # design choice
    # Rate doublings over the lead (doubling time 2-12 h; scaled to the lead so a 24 h lead
    # gets 3-12 h and a short demo lead still shows growth). Design choice.
    doublings_min: float = Field(default=2.0, gt=0)
    doublings_max: float = Field(default=8.0, gt=0)
    remap_prob_per_burst: float = Field(default=0.1, ge=0, le=1)  # design choice
    remap_rows_max: int = Field(default=4, ge=1)  # design choice: remap steps +1 to +4
    # design choice; Summit DBE streaks (Oles et al., ICS 2024)
    early_dbe_prob: float = Field(default=0.2, ge=0, le=1)
    early_dbe_min_h: float = Field(default=24.0, ge=0)  # "one day or more before" (Summit streaks)
    # Terminal Xid pattern weights: contained (48, 63, 94), uncontained (48, 63, 95), remap failure
    # (48, 64), plain DBE (48, 63). Design choice, loosely after Delta's H100 Xid counts (Cui et
    # al., SC'25).
    terminal_weights: tuple[float, float, float, float] = (0.3, 0.4, 0.15, 0.15)


class BurstSizes(_Shape):
    """Correctable-ECC burst sizes, shared by M1 and benign carriers (lognormal, median about 50,
    heavy tail to about 10^4; Zhu et al., arXiv 2508.03513: 52-3,500 SBEs per event)."""

    median: float = Field(default=50.0, gt=0)
    sigma: float = Field(default=1.7, gt=0)  # design choice: puts p99.9 near 10^4
    max: float = Field(default=100_000.0, gt=0)  # design choice: clip of the tail


class GpuHardShape(_Shape):
    """M2: off the bus (Xid 79) or GSP (Xid 119); precursor sub-patterns are each optional."""

    xid79_frac: float = Field(default=0.9, ge=0, le=1)  # Llama 3: 148 faulty GPU vs 17 GSP
    # Meta RSC (Kokolis et al., HPCA 2025): PCIe with Xid 79 in 43-63 %
    pcie_prob: float = Field(default=0.53, ge=0, le=1)
    gap_prob: float = Field(default=0.5, ge=0, le=1)  # design choice: brief "GPU lost" gaps
    # design choice: all links error at once
    nvlink_all_prob: float = Field(default=0.3, ge=0, le=1)
    # design choice: temperature NaN 1-3 samples before loss
    stale_prob: float = Field(default=0.5, ge=0, le=1)
    pcie_burst_median: float = Field(default=20.0, gt=0)  # design choice


class NvlinkShape(_Shape):
    """M3: CRC growth on one link, replay, shrinking-gap recovery bursts, peer mirror."""

    bursts_base: float = Field(default=4.0, ge=0)  # design choice
    bursts_per_h: float = Field(default=1.0, ge=0)  # design choice
    crc_burst_median: float = Field(default=20.0, gt=0)  # design choice
    data_ratio: float = Field(default=0.3, ge=0)  # design choice: CRC-data per CRC-flit
    replay_ratio: float = Field(default=0.5, ge=0)  # design choice: replays per CRC-flit
    recovery_bursts_min: int = Field(default=3, ge=1)  # design choice
    recovery_bursts_max: int = Field(default=8, ge=1)
    # "shrinking gaps"; design choice, as is the ratio
    recovery_gap_shrink: float = Field(default=0.6, gt=0, lt=1)
    mirror_prob: float = Field(default=0.42, ge=0, le=1)  # Delta A100 inter-GPU propagation
    mirror_scale: float = Field(default=0.5, ge=0)  # design choice


class IbShape(_Shape):
    """M4: symbol-error plateau (CorrOpt), BER climbing past 10^-12 with flaps, then down."""

    plateau_ber_min: float = Field(default=1e-15, gt=0)  # design choice: the 1e-15..1e-13 range
    plateau_ber_max: float = Field(default=1e-13, gt=0)
    # design choice: above the 1e-12 ibdiagnet threshold
    final_ber: float = Field(default=1e-11, gt=0)
    # design choice: share of lead spent climbing
    rise_frac: float = Field(default=0.25, gt=0, le=1)
    flaps_min: int = Field(default=2, ge=0)  # design choice
    flaps_max: int = Field(default=10, ge=0)
    flap_s_min: float = Field(default=1.0, gt=0)  # design choice: flap episodes of 1-30 s
    flap_s_max: float = Field(default=30.0, gt=0)
    # design choice: bad packets per symbol error
    rcv_error_ratio: float = Field(default=0.05, ge=0)


class ThermalShape(_Shape):
    """M5: drift above peers, reduced power at the same load, excursions, shutdown."""

    drift_min_c: float = Field(default=3.0, ge=0)  # design choice: +3 to +15 °C over 6-72 h
    drift_max_c: float = Field(default=15.0, ge=0)
    hbm_only_prob: float = Field(default=0.3, ge=0, le=1)  # design choice ("GPU and/or HBM")
    gpu_only_prob: float = Field(default=0.3, ge=0, le=1)  # design choice
    power_scale: float = Field(default=0.9, gt=0, le=1)  # design choice: power in the second half
    excursion_mean: float = Field(default=3.0, ge=0)  # design choice: 1 + Poisson(mean) excursions
    excursion_min_s: float = Field(default=120.0, gt=0)  # design choice
    excursion_max_s: float = Field(default=600.0, gt=0)
    # False: the precursor is the temperature rise alone, with no reduced power or clock and no
    # throttling excursions (a failing thermal interface on a GPU whose load is steady; design
    # choice, docs/simulator.md). The terminal shutdown ramp is unchanged.
    power_signature: bool = True


class SramShape(_Shape):
    """M6: rare SRAM-correctable increments, then an uncorrectable SRAM Xid."""

    increments_min: int = Field(default=1, ge=1)  # design choice ("rare")
    increments_max: int = Field(default=4, ge=1)


class RepairShape(_Shape):
    """Time from a terminal event until the device is back (reset, replaced, re-cabled)."""

    median_h: float = Field(default=4.0, gt=0)  # design choice; Delta worst cases 19-23 h
    sigma: float = Field(default=1.0, gt=0)  # design choice
    restart_min_s: float = Field(default=600.0, gt=0)  # M7: job restart only, 10-30 min (design)
    restart_max_s: float = Field(default=1800.0, gt=0)


class GrowthMix(_Shape):
    """Weights of the precursor growth shapes; each precursor-bearing failure draws one
    (docs/simulator.md, "Growth shapes"). The default keeps every mode's native shape."""

    native: float = Field(default=1.0, ge=0)
    linear: float = Field(default=0.0, ge=0)
    exponential: float = Field(default=0.0, ge=0)
    step: float = Field(default=0.0, ge=0)
    burst: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _some(self) -> GrowthMix:
        if sum(self.weights) <= 0:
            raise ValueError("growth weights must not all be 0")
        return self

    @property
    def weights(self) -> tuple[float, ...]:
        return tuple(float(getattr(self, g)) for g in GROWTHS)

    def draw(self, rng: np.random.Generator) -> Growth:
        w = np.asarray(self.weights)
        if np.count_nonzero(w) == 1:  # one shape: no draw, so the default moves no stream
            return GROWTHS[int(np.flatnonzero(w)[0])]
        return GROWTHS[int(rng.choice(len(w), p=w / w.sum()))]


class Shapes(_Shape):
    hbm: HbmShape = HbmShape()
    bursts: BurstSizes = BurstSizes()
    gpu_hard: GpuHardShape = GpuHardShape()
    nvlink: NvlinkShape = NvlinkShape()
    ib: IbShape = IbShape()
    thermal: ThermalShape = ThermalShape()
    sram: SramShape = SramShape()
    repair: RepairShape = RepairShape()
    growth: GrowthMix = GrowthMix()

    @model_validator(mode="after")
    def _ranges(self) -> Shapes:
        if self.hbm.doublings_max < self.hbm.doublings_min:
            raise ValueError("hbm.doublings_max < doublings_min")
        if self.ib.plateau_ber_max < self.ib.plateau_ber_min:
            raise ValueError("ib.plateau_ber_max < plateau_ber_min")
        if self.thermal.hbm_only_prob + self.thermal.gpu_only_prob > 1:
            raise ValueError("thermal.hbm_only_prob + gpu_only_prob > 1")
        return self
