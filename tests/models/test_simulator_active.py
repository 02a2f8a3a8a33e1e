"""The active-only modes M14-M16 (docs/simulator.md, "Active-only modes"): latent faults at the
public fault log's rates that no sample shows, and the gates and sweeps that find them."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from models.simulator import SimConfig, Simulator, failure_times
from models.simulator.config_active import LatentShape
from models.simulator.fault_log import rate_per_gpu_year
from models.simulator.latent import LatentFault, sample_latent
from models.simulator.modes import ACTIVE_ONLY, Mode, ModeRates
from models.simulator.scenarios import merge
from tests.models._simulator_util import SCOPES, collect, small

_DENSE = {"M14_p2p_bw": 40.0, "M15_stress": 40.0, "M16_sdc": 40.0}  # per GPU-year


def _fleet(nodes: int = 16, days: float = 14, **over: object) -> SimConfig:
    base = {"name": "active", "fleet": {"nodes": nodes, "nvlinks_per_gpu": 2},
            "time": {"days": days, "step_s": 300}, "failures": {"rates": _DENSE}}
    return SimConfig.model_validate(merge(base, dict(over)))


def test_rates_are_the_fault_logs() -> None:
    rates = ModeRates()
    for mode in ACTIVE_ONLY:
        assert rates.of(mode) == pytest.approx(rate_per_gpu_year(mode), rel=1e-3)
    # 6.6 %, 5.6 % and 0.2 % of the 438 known-cause faults over 3,058 GPU-years
    assert rates.of(Mode.M14_P2P_BW) == pytest.approx(0.066 * 438 / 3058.6, rel=2e-3)
    assert rates.of(Mode.M16_SDC) == pytest.approx(0.002 * 438 / 3058.6, rel=2e-2)


def test_counts_follow_the_rates_and_scopes() -> None:
    cfg = SimConfig.model_validate({"fleet": {"nodes": 2000}, "time": {"days": 365},
                                    "failures": {"rate_multiplier": 4.0}})
    faults = sample_latent(cfg)
    rates = cfg.failures.effective_rates(cfg.fleet.spec)
    counts = Counter(f.mode for f in faults)
    for mode in ACTIVE_ONLY:
        lam = rates[mode] * cfg.gpu_years
        assert abs(counts[mode] - lam) < 4 * math.sqrt(lam) + 1, (mode, counts[mode], lam)
    assert {f.unit for f in faults if f.mode is Mode.M14_P2P_BW} == {0}  # the node
    assert len({f.unit for f in faults if f.mode is Mode.M15_STRESS}) == 8  # a GPU
    times = [f.appear for f in faults]
    assert times == sorted(times) and cfg.time.start_s <= min(times) < max(times) < cfg.time.end_s


def test_other_modes_draw_the_same_failures_with_or_without_them() -> None:
    with_them = _fleet(nodes=64, days=60, failures={"rate_multiplier": 5.0})
    without = _fleet(nodes=64, days=60, failures={
        "rate_multiplier": 5.0, "rates": dict.fromkeys(_DENSE, 0.0)})
    a, b = failure_times(with_them), failure_times(without)
    assert len(a) > 50 and a == b
    assert not {f.mode for f in a} & set(ACTIVE_ONLY)
    assert len(sample_latent(with_them)) > 50 and sample_latent(without) == []


def test_no_sample_or_label_shows_them() -> None:
    on = small(failures={"rates": _DENSE})
    off = small(failures={"rates": dict.fromkeys(_DENSE, 0.0)})
    s_on, s_off = Simulator(on), Simulator(off)
    assert len(s_on.latent) > 0 and s_off.latent == []
    assert s_on.labels == s_off.labels
    g_on, g_off = collect(list(s_on.run())), collect(list(s_off.run()))
    for scope in SCOPES:
        np.testing.assert_array_equal(g_on.values[scope], g_off.values[scope])
        np.testing.assert_array_equal(g_on.ts[scope], g_off.ts[scope])
    assert g_on.events == g_off.events


def test_a_sweep_never_tests_a_busy_node_and_keeps_to_its_share() -> None:
    cfg = _fleet(active={"sweep_every_days": 1.0, "sweep_max_share": 0.125})
    sim = Simulator(cfg)
    d = sim.diagnose()
    assert len(d.sweeps) > 20
    jobs = sim.jobs
    for node, s, e in d.sweeps:
        assert e - s == pytest.approx(30 * 60) and e <= cfg.time.end_s
        mine = [j for j in range(len(jobs)) if node in jobs.nodes[j]]
        assert all(jobs.end[j] <= s or jobs.start[j] >= e for j in mine), (node, s)
        assert all(b <= s or a >= e for a, b in sim.plan.down[node]), (node, s)
    edges = sorted([(s, 1) for _, s, _ in d.sweeps] + [(e, -1) for _, _, e in d.sweeps])
    assert max(np.cumsum([x for _, x in edges])) <= 2  # 12.5 % of 16 nodes


def test_a_sweep_finds_a_fault_before_the_job_that_would_hit_it() -> None:
    sure = {m.value: LatentShape(show_load_h=72, detect=1.0) for m in ACTIVE_ONLY}
    cfg = _fleet(nodes=32, days=28, active={**sure, "gates": False, "sweep_every_days": 2.0})
    sim = Simulator(cfg)
    d = sim.diagnose()
    found = [o for o in d.outcomes if o.found_by == "sweep"]
    assert found and not any(o.found_by == "gate" for o in d.outcomes)
    for o in found:
        assert o.found_at is not None and o.fault.appear < o.found_at
        assert o.hit is None or o.found_at < o.hit.time
    none = sim.diagnose(cfg.active.model_copy(update={"sweep_every_days": None}))
    assert none.sweeps == [] and all(o.found_by is None for o in none.outcomes)


def _gate_case(gates: bool) -> tuple[Simulator, LatentFault]:
    cfg = small(failures={"rate_multiplier": 1e-9}, time={"days": 1.0},
                scripted_failures=[{"mode": "M2_gpu_hard", "at_h": 5.0, "repair_h": 3.0}],
                active={"M15_stress": {"show_load_h": 1000, "detect": 1.0}, "gates": gates,
                        "sweep_every_days": None})
    sim = Simulator(cfg)
    t0 = cfg.time.start_s
    return sim, LatentFault(0, Mode.M15_STRESS, t0 + 3600.0, 0, 2, 1000 * 3600.0, 7200.0)


def test_a_gate_finds_a_latent_fault_on_a_drained_node() -> None:
    sim, fault = _gate_case(gates=True)
    drain = next(f for f in sim.failures if f.mode is Mode.M2_GPU_HARD)
    d = sim.schedule.diagnose([fault], sim.config.active)
    assert d.outcomes[0].found_by == "gate" and d.outcomes[0].found_at == drain.repair
    sim, fault = _gate_case(gates=False)
    assert sim.schedule.diagnose([fault], sim.config.active).outcomes[0].found_by is None
    # a fault that appears after the release is not there for the gate to find
    late = LatentFault(0, Mode.M15_STRESS, drain.repair + 60.0, 0, 2, 1000 * 3600.0, 7200.0)
    sim, _ = _gate_case(gates=True)
    assert sim.schedule.diagnose([late], sim.config.active).outcomes[0].found_by is None


def test_a_job_hits_a_fault_after_its_show_time_of_load() -> None:
    cfg = _fleet(nodes=8, days=14)
    sim = Simulator(cfg)
    hits = [(f, sim.schedule.hit(f)) for f in sim.latent]
    assert sum(h is not None for _, h in hits) > 10
    jobs = sim.jobs
    for f, h in hits:
        if h is None:
            continue
        assert f.node in jobs.nodes[h.job] and jobs.start[h.job] <= h.time <= jobs.end[h.job]
        assert h.time >= f.appear + min(f.show_load_s, 0.0)
        assert h.gpus == len(jobs.nodes[h.job]) * 8
        assert 0 <= h.lost_s <= h.time - jobs.start[h.job] + 1e-6
