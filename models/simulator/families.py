"""Scenario families: a seed draws one randomized scenario tree (docs/simulator.md, "Scenario
families"), so a model can be trained on many fleets of one family and validated on a family
it never saw.

Both families start from the `ci` size (64 nodes x 8 GPUs, 28 days at 300 s) with failure
rates x20-30 and M5 (thermal) x2-4 more, so every draw has enough events to score. Per seed
they draw:

| Parameter | train-family | shifted-family |
|---|---|---|
| generation | H100-like | **A100-like** |
| NVLinks per GPU | 4, 6 or 8 | **3 or 12** |
| IB ports per node | 4 or 8 | **1 or 2** |
| lead-time law, per mode M1-M6 | lognormal, exponential or uniform | same laws |
| lead-time scale (x the mode's default typical lead) | 0.6-1.6 | **0.25-0.5 or 2.0-3.0** |
| growth-shape weights (linear, exponential, step, burst) | Dirichlet(1, 1, 1, 1) | same |
| sensor-noise scale (util, power, temperature, clock sd) | 0.5-2.0 | **2.5-4.0** |
| per-GPU temperature offset sd | 1-3 °C | **3.5-5 °C** |
| missing samples | 0.1-2 % | **3-8 %** |
| telemetry gaps per node-day | 0.05-0.3 | **0.5-1.0** |
| missing fields | mem_temp (p 0.2) | **ecc_sbe_volatile, pcie_replay, nvlink_crc_data** (1) |
| page retirement reported | p 0.5 | p 0.5 |
| error counters at 65,535 | none (p 0.5) or stick | **wrap** |
| thermal precursor | temperature, power x0.85-0.95, excursions (2) | **temperature only** |
| SBE carriers per GPU-year | 0.02-0.2 | **0.5-1.5** |
| carrier bursts per day (median), spread sigma | 0.2-2, 1.0-1.5 | **4-24, 0.2-0.5** (steady) |
| carrier active days | 7-21 | **21-60** |
| other benign rates (3), job length | shared ranges | shared ranges |

(1) each with p 0.5, at least one. (2) reduced power and clock in the second half of the lead
and throttling excursions in its last quarter, the simulator's default. (3) NVLink blips,
software Xids, benign remaps, corrupting IB ports, GPUs with SBE history.

Bold entries lie outside every train-family draw (tested). The draws come from
`rng_for(seed, STREAM_FAMILY)`, a stream of their own, so seed N always gives the same tree
and the simulator's own streams (keyed by the same seed) are untouched by them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.simulator.topology import rng_for

Tree = dict[str, Any]
Range = tuple[float, float]
STREAM_FAMILY = 1000

# A mode's typical lead (h) the scale multiplies: the median or mean of its default law
# (docs/simulator.md, `failures`); M4 and M5 near the middle of their uniform laws.
TYPICAL_LEAD_H = {"M1_hbm": 24.0, "M2_gpu_hard": 6.0, "M3_nvlink": 12.0, "M4_ib_link": 72.0,
                  "M5_thermal": 24.0, "M6_sram": 24.0}
LAWS = ("lognormal", "exponential", "uniform")
NOISE_FIELDS = {"util_sd": 1.5, "power_sd_w": 6.0, "temp_sd_c": 0.4, "clock_sd_mhz": 10.0}
COUNTER_MAX = 65535.0  # 16-bit IB PortCounters error fields


@dataclass(frozen=True)
class Space:
    """The region one family draws from: (lo, hi) uniform ranges, tuples of choices."""

    generation: str
    nvlinks: tuple[int, ...]
    ib_ports: tuple[int, ...]
    lead_scale: tuple[Range, ...]  # a union of ranges, one picked at random
    noise_scale: Range
    offset_sd_c: Range
    missing_sample_frac: Range
    gap_per_node_day: Range
    missing_fields: tuple[str, ...]  # each never reported with missing_prob
    missing_prob: float
    missing_at_least_one: bool
    counter_overflow: tuple[str | None, ...]  # None: 64-bit counters
    thermal_power_signature: bool
    power_scale: Range
    carrier_rate: Range
    carrier_per_day: Range
    carrier_sigma: Range
    carrier_days: Range


TRAIN = Space(
    generation="H100-like", nvlinks=(4, 6, 8), ib_ports=(4, 8), lead_scale=((0.6, 1.6),),
    noise_scale=(0.5, 2.0), offset_sd_c=(1.0, 3.0), missing_sample_frac=(0.001, 0.02),
    gap_per_node_day=(0.05, 0.3), missing_fields=("mem_temp",), missing_prob=0.2,
    missing_at_least_one=False, counter_overflow=(None, "stick"), thermal_power_signature=True,
    power_scale=(0.85, 0.95), carrier_rate=(0.02, 0.2), carrier_per_day=(0.2, 2.0),
    carrier_sigma=(1.0, 1.5), carrier_days=(7.0, 21.0),
)
SHIFTED = Space(
    generation="A100-like", nvlinks=(3, 12), ib_ports=(1, 2),
    lead_scale=((0.25, 0.5), (2.0, 3.0)), noise_scale=(2.5, 4.0), offset_sd_c=(3.5, 5.0),
    missing_sample_frac=(0.03, 0.08), gap_per_node_day=(0.5, 1.0),
    missing_fields=("ecc_sbe_volatile", "pcie_replay", "nvlink_crc_data"), missing_prob=0.5,
    missing_at_least_one=True, counter_overflow=("wrap",), thermal_power_signature=False,
    power_scale=(0.9, 0.9), carrier_rate=(0.5, 1.5), carrier_per_day=(4.0, 24.0),
    carrier_sigma=(0.2, 0.5), carrier_days=(21.0, 60.0),
)


def _u(rng: np.random.Generator, r: Range) -> float:
    return float(rng.uniform(r[0], r[1]))


def _lead(rng: np.random.Generator, mode: str, scale: float) -> Tree:
    typical = TYPICAL_LEAD_H[mode] * scale
    law = LAWS[int(rng.integers(0, len(LAWS)))]
    if law == "lognormal":
        return {"dist": law, "median_h": typical, "p10_h": typical / _u(rng, (3.0, 12.0)),
                "p90_h": typical * _u(rng, (2.5, 6.0))}
    if law == "exponential":
        return {"dist": law, "mean_h": typical}
    return {"dist": law, "min_h": typical * _u(rng, (0.2, 0.6)),
            "max_h": typical * _u(rng, (1.5, 3.0))}


def draw(space: Space, name: str, seed: int) -> tuple[Tree, dict[str, Any]]:
    """One scenario tree of the family and the raw draws behind it (tests check those)."""
    rng = rng_for(seed, STREAM_FAMILY)
    d: dict[str, Any] = {
        "nvlinks": int(rng.choice(space.nvlinks)),
        "ib_ports": int(rng.choice(space.ib_ports)),
        "lead_scale": {}, "noise_scale": _u(rng, space.noise_scale),
    }
    leads = {}
    for mode in TYPICAL_LEAD_H:
        r = space.lead_scale[int(rng.integers(0, len(space.lead_scale)))]
        d["lead_scale"][mode] = _u(rng, r)
        leads[mode] = _lead(rng, mode, d["lead_scale"][mode])
    missing = [f for f in space.missing_fields if rng.random() < space.missing_prob]
    if space.missing_at_least_one and not missing:
        missing = [space.missing_fields[int(rng.integers(0, len(space.missing_fields)))]]
    overflow = space.counter_overflow[int(rng.integers(0, len(space.counter_overflow)))]
    growth = rng.dirichlet(np.ones(4))
    d.update(missing_fields=tuple(missing), counter_overflow=overflow)
    tree: Tree = {
        "name": name,
        "seed": seed,
        "fleet": {
            "nodes": 64, "generation": space.generation, "nvlinks_per_gpu": d["nvlinks"],
            "ib_ports_per_node": d["ib_ports"], "page_retirement": bool(rng.random() < 0.5),
            "missing_fields": list(missing),
            "counter_max": None if overflow is None else COUNTER_MAX,
            "counter_overflow": overflow or "stick",
        },
        "time": {"days": 28, "step_s": 300},
        "failures": {
            "rate_multiplier": _u(rng, (20.0, 30.0)),
            "rates": {"M5_thermal": 0.0025 * _u(rng, (2.0, 4.0))},
            "lead_time": leads,
            "shapes": {
                "growth": dict(zip(("native", "linear", "exponential", "step", "burst"),
                                   [0.0, *map(float, growth)], strict=True)),
                "thermal": {"power_signature": space.thermal_power_signature,
                            "power_scale": _u(rng, space.power_scale)},
            },
        },
        "signals": {
            **{k: v * d["noise_scale"] for k, v in NOISE_FIELDS.items()},
            "gpu_offset_sd_c": _u(rng, space.offset_sd_c),
        },
        "benign": {
            "missing_sample_frac": _u(rng, space.missing_sample_frac),
            "gap_per_node_day": _u(rng, space.gap_per_node_day),
            "sbe_carrier_per_gpu_year": _u(rng, space.carrier_rate),
            "carrier_bursts_per_day_median": _u(rng, space.carrier_per_day),
            "carrier_bursts_sigma": _u(rng, space.carrier_sigma),
            "carrier_days_min": space.carrier_days[0],
            "carrier_days_max": space.carrier_days[1],
            # Shared by both families: design-choice spreads around the defaults.
            "nvlink_blip_per_gpu_year": _u(rng, (0.5, 3.0)),
            "software_xid_per_gpu_year": _u(rng, (1.0, 4.0)),
            "benign_remap_per_gpu_year": _u(rng, (0.05, 0.3)),
            "ib_corrupt_port_frac": _u(rng, (0.01, 0.04)),
            "history_sbe_frac": _u(rng, (0.01, 0.06)),
        },
        "workload": {"job_hours_median": _u(rng, (4.0, 16.0))},
    }
    return tree, d


def train_family(seed: int) -> Tree:
    return draw(TRAIN, "train-family", seed)[0]


def shifted_family(seed: int) -> Tree:
    return draw(SHIFTED, "shifted-family", seed)[0]


FAMILIES: dict[str, Callable[[int], Tree]] = {
    "train-family": train_family, "shifted-family": shifted_family}
SPACES: dict[str, Space] = {"train-family": TRAIN, "shifted-family": SHIFTED}
