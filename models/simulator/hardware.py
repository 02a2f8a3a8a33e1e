"""Hardware generations: the per-SKU constants a simulated fleet is built from.

Thresholds are per-SKU driver values (`nvidia-smi -q` reports them under Temperature: read them on
the target); the A100 values are the ones in the shared A100-SXM4 captures, the H100 ones follow
from the H100-SXM capture's T.Limit offsets (slowdown -2 °C, shutdown -8 °C around an 87 °C
limit). Power, clocks and link rates are public spec-sheet figures. Temperature rises are design
choices tuned so fleet means land near Delta's 40 °C (A100) and 37 °C (H100) at 40-50 %
utilization (Delta, Cui et al., SC'25).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

GenerationName = Literal["A100-like", "H100-like"]


class GenerationSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: GenerationName
    memory_gb: int  # informational: the per-GB view of memory errors (Delta)
    nvlinks_per_gpu: int  # NVLink3: 12 links, NVLink4: 18 links
    nvlink_gbytes_per_s: float  # per link, both directions (600 / 12, 900 / 18)
    ib_rate_gbps: float  # HDR 200, NDR 400
    tdp_w: float
    idle_w: float
    boost_mhz: float
    idle_mhz: float
    tlimit_c: float  # max operating temperature; the margin gauge is measured to it
    slowdown_c: float
    shutdown_c: float
    mem_max_c: float
    idle_rise_c: float  # GPU core above inlet when idle
    load_rise_c: float  # further GPU core rise at full power
    hbm_idle_rise_c: float  # HBM above inlet when idle
    hbm_load_rise_c: float  # further HBM rise at full power (HBM3's worse thermal path, Delta)
    # Background NVLink blip rate relative to the configured one: Delta logged 1,922 Xid 74 on
    # A100 and none on H100 (Cui et al., SC'25), so H100 links are quieter.
    nvlink_blip_scale: float = Field(default=1.0, ge=0)
    # Shift scenario, applied only when failures.generation_shift is set: M1 at Delta's per-GPU
    # uncorrectable-memory rate, M3 at an end of the NVLink range (docs/simulator.md).
    rate_shift: dict[str, float] = Field(default_factory=dict)


GENERATIONS: dict[str, GenerationSpec] = {
    "A100-like": GenerationSpec(
        name="A100-like", memory_gb=80, nvlinks_per_gpu=12, nvlink_gbytes_per_s=50.0,
        ib_rate_gbps=200.0, tdp_w=400.0, idle_w=55.0, boost_mhz=1410.0, idle_mhz=210.0,
        tlimit_c=85.0, slowdown_c=89.0, shutdown_c=92.0, mem_max_c=95.0,
        idle_rise_c=8.0, load_rise_c=34.0, hbm_idle_rise_c=10.0, hbm_load_rise_c=30.0,
        nvlink_blip_scale=1.0, rate_shift={"M1_hbm": 0.031, "M3_nvlink": 0.03},
    ),
    "H100-like": GenerationSpec(
        name="H100-like", memory_gb=80, nvlinks_per_gpu=18, nvlink_gbytes_per_s=50.0,
        ib_rate_gbps=400.0, tdp_w=700.0, idle_w=70.0, boost_mhz=1980.0, idle_mhz=345.0,
        tlimit_c=87.0, slowdown_c=89.0, shutdown_c=95.0, mem_max_c=95.0,
        idle_rise_c=6.0, load_rise_c=36.0, hbm_idle_rise_c=10.0, hbm_load_rise_c=42.0,
        nvlink_blip_scale=0.2, rate_shift={"M1_hbm": 0.099, "M3_nvlink": 0.002},
    ),
}
