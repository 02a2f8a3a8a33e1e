"""The planned events follow the configured laws (docs/simulator.md), checked on big fleets
planned without rendering a single sample."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from collectors.catalog import Scope
from models.simulator import Mode, SimConfig, Simulator, failure_times
from models.simulator.config import SECONDS_PER_YEAR
from models.simulator.failures import Failure, lemon_nodes
from models.simulator.fault_log import rate_per_gpu_year
from models.simulator.modes import ACTIVE_ONLY, LEMON_MODES, NODE_WIDE
from models.simulator.scenarios import merge
from tests.models._simulator_util import collect, small

_NO_BENIGN = {
    "sbe_carrier_per_gpu_year": 0, "benign_remap_per_gpu_year": 0, "nvlink_blip_per_gpu_year": 0,
    "ib_corrupt_port_frac": 0, "driver_reload_per_node_year": 0,
    "planned_maint_per_16k_gpu_day": 0, "gap_per_node_day": 0, "clock_skew_per_node_day": 0,
    "straggler_compute_per_gpu_day": 0, "straggler_comm_per_node_day": 0,
    "software_xid_per_gpu_year": 0, "history_sbe_frac": 0, "missing_sample_frac": 0,
    "lemon_node_frac": 0,
}


# The modes whose failures are in the trace (the active-only ones are latent faults:
# tests/models/test_simulator_active.py).
_TRACE_MODES = [m for m in Mode if m not in ACTIVE_ONLY]


def _fleet(**over: object) -> SimConfig:
    base = {"name": "stats", "fleet": {"nodes": 2000}, "time": {"days": 365, "step_s": 300},
            "failures": {"rate_multiplier": 4.0}, "benign": {"lemon_node_frac": 0.0}}
    return SimConfig.model_validate(merge(base, dict(over)))


@pytest.fixture(scope="module")
def big() -> tuple[SimConfig, list[Failure]]:
    cfg = _fleet()
    return cfg, failure_times(cfg)


def test_counts_per_mode_match_the_rates(big: tuple[SimConfig, list[Failure]]) -> None:
    cfg, fails = big
    rates = cfg.failures.effective_rates(cfg.fleet.spec)
    counts = Counter(f.mode for f in fails)
    for mode in _TRACE_MODES:
        lam = rates[mode] * cfg.gpu_years
        assert abs(counts[mode] - lam) < 4 * math.sqrt(lam) + 1, (mode, counts[mode], lam)


def test_times_are_uniform_over_the_trace(big: tuple[SimConfig, list[Failure]]) -> None:
    cfg, fails = big
    u = (np.array([f.time for f in fails]) - cfg.time.start_s) / (cfg.time.end_s - cfg.time.start_s)
    assert stats.kstest(u, "uniform").pvalue > 1e-3


def test_precursor_fractions(big: tuple[SimConfig, list[Failure]]) -> None:
    cfg, fails = big
    for mode in _TRACE_MODES:
        of = [f for f in fails if f.mode is mode]
        p = cfg.failures.precursor_fraction.of(mode)
        k = sum(f.onset is not None for f in of)
        assert abs(k - p * len(of)) <= 4 * math.sqrt(p * (1 - p) * len(of)) + 1, (mode, k, len(of))


@pytest.mark.parametrize("mode", [m for m in _TRACE_MODES if m not in (
    Mode.M7_UNOBSERVABLE, Mode.M12_GPU_UNREADABLE, Mode.M13_HOST_HW)])  # sudden by default
def test_lead_times_follow_their_law(big: tuple[SimConfig, list[Failure]], mode: Mode) -> None:
    cfg, fails = big
    lead_h = np.array([(f.time - f.onset) / 3600 for f in fails
                       if f.mode is mode and f.onset is not None])
    assert len(lead_h) > 20
    law = cfg.failures.lead_time.of(mode)
    assert stats.kstest(lead_h, law.cdf).pvalue > 1e-3


def test_lognormal_lead_hits_the_stated_quantiles() -> None:
    law = _fleet().failures.lead_time.of(Mode.M1_HBM)
    x = law.sample_h(np.random.default_rng(0), 200_000)
    assert np.quantile(x, [0.1, 0.5, 0.9]) == pytest.approx([2, 24, 120], rel=0.03)


def test_defaults_give_the_literature_totals() -> None:
    cfg = small(failures={"rate_multiplier": 1.0})
    every = cfg.failures.effective_rates(cfg.fleet.spec)
    rates = {m: r for m, r in every.items() if m not in NODE_WIDE and m not in ACTIVE_ONLY}
    assert sum(rates.values()) == pytest.approx(0.1755)  # docs/simulator.md: about 0.175
    with_pre = sum(r * cfg.failures.precursor_fraction.of(m) for m, r in rates.items())
    assert with_pre == pytest.approx(0.043, abs=0.001)  # docs/simulator.md: 0.043 per GPU-year
    # The node-wide modes: the fault log's known-cause faults in its simulated classes.
    wide = sum(every[m] for m in NODE_WIDE)
    assert wide == pytest.approx(sum(rate_per_gpu_year(m) for m in NODE_WIDE), rel=1e-3)
    assert wide == pytest.approx(0.0770, abs=5e-4)  # 53.7 % of 438 faults / 3,058 GPU-years
    graded = small(failures={"rate_multiplier": 2.0, "total_per_gpu_year": 0.30})
    got = graded.failures.effective_rates(cfg.fleet.spec)  # the grade scales M1-M7 only
    assert sum(got[m] for m in rates) == pytest.approx(0.60)
    assert sum(got[m] for m in NODE_WIDE) == pytest.approx(2 * wide)


def test_lemon_nodes_fail_more_often_in_m1_to_m3() -> None:
    cfg = _fleet(benign={"lemon_node_frac": 0.1}, fleet={"nodes": 1000})
    fails = failure_times(cfg)
    lemons = lemon_nodes(cfg)
    assert 60 < len(lemons) < 140
    per_lemon = sum(f.node in lemons for f in fails if f.mode in LEMON_MODES) / len(lemons)
    others = cfg.fleet.nodes - len(lemons)
    per_other = sum(f.node not in lemons for f in fails if f.mode in LEMON_MODES) / others
    assert 3.0 < per_lemon / per_other < 5.0
    # the fleet-wide rate stays the configured one
    rates = cfg.failures.effective_rates(cfg.fleet.spec)
    lam = sum(rates[m] for m in LEMON_MODES) * cfg.gpu_years
    n = sum(f.mode in LEMON_MODES for f in fails)
    assert abs(n - lam) < 4 * math.sqrt(lam)


def test_no_device_fails_twice_at_once(big: tuple[SimConfig, list[Failure]]) -> None:
    _, fails = big
    by_node: dict[int, list[Failure]] = {}
    for f in fails:
        for g in by_node.get(f.node, []):
            assert not g.time <= f.time < g.repair
        by_node.setdefault(f.node, []).append(f)


def test_fleet_year_has_enough_precursor_events() -> None:
    from models.simulator import load_scenario
    fails = failure_times(load_scenario("fleet-year"))
    assert len(fails) > 600
    assert sum(f.onset is not None for f in fails) >= 150  # docs/simulator.md: about 175


def test_sbe_carriers_are_about_five_percent_of_gpus() -> None:
    cfg = _fleet(fleet={"nodes": 256}, benign={**_NO_BENIGN, "sbe_carrier_per_gpu_year": 0.05},
                 failures={"rate_multiplier": 1e-9})
    labels = Simulator(cfg).labels
    carriers = {x["entity"] for x in labels if x.get("trap") == "sbe_carrier"}
    share = len(carriers) / cfg.fleet.gpus
    assert 0.035 < share < 0.07


def test_missing_samples_match_the_configured_share() -> None:
    cfg = small(benign={**_NO_BENIGN, "missing_sample_frac": 0.01},
                failures={"rate_multiplier": 1e-9}, fleet={"nodes": 4}, time={"days": 1})
    util = collect(list(Simulator(cfg).run())).col(Scope.GPU, "gpu_util")
    n = util.size
    missing = int(np.isnan(util).sum())
    assert abs(missing - 0.01 * n) < 5 * math.sqrt(0.01 * n)
    assert cfg.gpu_years == pytest.approx(32 / (SECONDS_PER_YEAR / 86400))
