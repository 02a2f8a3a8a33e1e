"""The simulator options the scenario families draw from: growth shapes, a thermal precursor
without the power / throttle signature, fields a fleet never reports, error counters that stick
or wrap, and steady correctable-ECC carriers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from collectors.catalog import CATALOG, Scope
from models.simulator import Simulator
from models.simulator.config_shapes import GrowthMix
from models.simulator.context import precursor_times
from models.simulator.topology import rng_for
from tests.models._simulator_util import collect, small

QUIET: dict[str, Any] = {"failures": {"rate_multiplier": 1e-9}, "benign": {"enabled": False}}


def _one(mode: str, lead_h: float, **over: Any) -> Simulator:
    """One scripted failure at 5 h (GPU 1 of node 0) and nothing else."""
    f = {"mode": mode, "at_h": 5.0, "node": 0, "unit": 1, "lead_h": lead_h, "repair_h": 0.5}
    failures = {**QUIET["failures"], **over.pop("failures", {})}
    return Simulator(small(**{**QUIET, **over, "failures": failures,
                              "scripted_failures": [f]}))


# ---- growth shapes -----------------------------------------------------------------------------

def _share_late(growth: str) -> float:
    rng = rng_for(0, 1)
    x = (precursor_times(rng, 0.0, 1000.0, 4000, 6.0, growth)) / 1000.0  # type: ignore[arg-type]
    return float(np.mean(x > 0.5))


def test_growth_shapes_place_bursts_differently() -> None:
    assert _share_late("step") == pytest.approx(0.5, abs=0.04)  # constant rate
    assert _share_late("linear") == pytest.approx(0.75, abs=0.04)  # 1 - 0.5^2
    # Six doublings: the rate grows as 2^(6x), so (2^6 - 2^3) / (2^6 - 1) of it comes late.
    assert _share_late("exponential") == pytest.approx(56 / 63, abs=0.03)
    assert _share_late("native") == _share_late("exponential")
    rng = rng_for(0, 2)
    burst = precursor_times(rng, 0.0, 86400.0, 400, 6.0, "burst")
    # A few clusters of minutes: most 1-h bins over the day hold no burst.
    assert len(np.unique(burst // 3600)) <= 8


def test_the_default_mix_draws_nothing_and_a_mix_draws_every_shape() -> None:
    rng = rng_for(0, 3)
    before = rng.bit_generator.state
    assert GrowthMix().draw(rng) == "native"
    assert rng.bit_generator.state == before  # default runs keep every stream where it was
    mix = GrowthMix(native=0, linear=1, exponential=1, step=1, burst=1)
    assert {mix.draw(rng) for _ in range(200)} == {"linear", "exponential", "step", "burst"}
    with pytest.raises(ValidationError):
        GrowthMix(native=0)


def _sbe_steps(growth: dict[str, float]) -> np.ndarray:
    sim = _one("M1_hbm", 4.0, failures={"shapes": {"growth": growth,
                                                   "hbm": {"bursts_per_h": 100.0}}})
    sp = sim.plan.scopes[Scope.GPU]
    col = [m.name for m in CATALOG.columns(Scope.GPU)].index("ecc_sbe_volatile")
    onset = sim.config.time.start_s + 3600.0
    sel = (sp.steps_c == col) & (sp.steps_e == 1) & (sp.steps_d > 0)
    return (sp.steps_t[sel] - onset) / (4 * 3600.0)


def test_a_step_precursor_is_flat_where_the_native_one_grows() -> None:
    step, native = _sbe_steps({"native": 0, "step": 1}), _sbe_steps({})
    assert np.mean(step[step < 1] > 0.5) == pytest.approx(0.5, abs=0.1)
    assert np.mean(native[native < 1] > 0.5) > 0.75


# ---- thermal precursor without the power / throttle signature ----------------------------------

def _thermal(signature: bool) -> tuple[float, np.ndarray, np.ndarray]:
    """Over the lead: how far the failing GPU warmed against its node peers (the larger of core
    and HBM, last half hour against the first), its power over theirs, and its thermal
    throttle."""
    sim = _one("M5_thermal", 4.0, failures={"shapes": {"thermal": {
        "power_signature": signature, "drift_min_c": 10.0, "drift_max_c": 12.0}}})
    grid = collect(list(sim.run()))
    k0, k1 = 60, 5 * 60 - 3  # onset at 1 h; stop before the last 90 s of shutdown ramp
    peers = [g for g in range(8) if g != 1]
    rise = 0.0
    for col in ("gpu_temp", "mem_temp"):
        temp = grid.col(Scope.GPU, col)
        off = temp[k0:k1, 1] - np.nanmean(temp[k0:k1, peers], axis=1)
        rise = max(rise, float(np.nanmean(off[-30:]) - np.nanmean(off[:30])))
    power = grid.col(Scope.GPU, "power_draw")
    ratio = power[k0:k1, 1] / np.nanmean(power[k0:k1, peers], axis=1)
    throttle = grid.col(Scope.GPU, "throttle_thermal")[k0:k1, 1]
    return rise, ratio, throttle


def test_a_thermal_precursor_without_power_signature_is_a_temperature_rise_only() -> None:
    rise, ratio, throttle = _thermal(False)
    half = len(ratio) // 2
    assert rise > 8.0  # the drift of 10-12 °C is there
    assert np.nanmax(throttle) == 0  # no throttling before the shutdown ramp
    first, second = np.nanmean(ratio[:half]), np.nanmean(ratio[half:])
    assert second == pytest.approx(first, rel=0.03)  # no power drop

    rise_d, ratio_d, throttle_d = _thermal(True)  # the default: power drop and throttling
    assert rise_d > 8.0
    assert np.nanmax(throttle_d) == 1
    assert np.nanmean(ratio_d[half:]) < 0.95 * np.nanmean(ratio_d[:half])


# ---- fields never reported, counters that stick or wrap ----------------------------------------

def test_missing_fields_are_nan_throughout_and_unknown_ones_refused() -> None:
    grid = collect(list(Simulator(small(fleet={"missing_fields": ["mem_temp",
                                                                  "nvlink_crc_data"]})).run()))
    assert np.isnan(grid.col(Scope.GPU, "mem_temp")).all()
    assert np.isnan(grid.col(Scope.NVLINK, "nvlink_crc_data")).all()
    assert np.isfinite(grid.col(Scope.GPU, "gpu_temp")).mean() > 0.9
    with pytest.raises(ValidationError, match="unknown columns"):
        small(fleet={"missing_fields": ["hbm_temp"]})


def _sbe(**fleet: Any) -> np.ndarray:
    sim = _one("M1_hbm", 4.0, fleet={"nodes": 2, "nvlinks_per_gpu": 2, **fleet},
               failures={"shapes": {"hbm": {"bursts_per_h": 20.0}}})
    return collect(list(sim.run())).col(Scope.GPU, "ecc_sbe_aggregate")[:, 1]


def test_error_counters_stick_or_wrap_at_counter_max() -> None:
    free = _sbe()
    top = 500.0
    assert np.nanmax(free) > 3 * top  # the unlimited counter passes the limit
    stuck = _sbe(counter_max=top)
    assert np.nanmax(stuck) == top
    ok = np.isfinite(free)
    assert np.array_equal(stuck[ok], np.minimum(free[ok], top))
    wrapped = _sbe(counter_max=top, counter_overflow="wrap")
    assert np.array_equal(wrapped[ok], np.mod(free[ok], top + 1))
    assert (np.diff(wrapped[ok]) < 0).any()  # a wrap reads like a drop with no reset


# ---- steady correctable-ECC carriers -----------------------------------------------------------

def test_steady_sbe_carriers_log_correctable_errors_and_never_fail() -> None:
    sim = Simulator(small(failures={"rate_multiplier": 1e-9}, benign={
        "sbe_carrier_per_gpu_year": 40.0, "carrier_bursts_per_day_median": 24.0,
        "carrier_bursts_sigma": 0.2, "carrier_days_min": 21.0, "carrier_days_max": 60.0}))
    carriers = {x["entity"] for x in sim.labels if x.get("trap") == "sbe_carrier"}
    assert len(carriers) >= 4
    assert not [x for x in sim.labels if x["kind"] == "failure"]
    grid = collect(list(sim.run()))
    keys = [e.key for e in sim.tables[Scope.GPU]]
    sbe = grid.col(Scope.GPU, "ecc_sbe_volatile")
    logging = [k for k in carriers if np.nanmax(sbe[:, keys.index(k)]) > 0]
    assert len(logging) >= len(carriers) // 2  # 24 bursts a day: most log within 6 h
