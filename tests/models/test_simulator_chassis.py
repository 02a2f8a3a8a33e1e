"""The node-wide failure modes (M8-M13) and their benign look-alikes in the simulator's
frames: each precursor shows before its failure, each terminal event after it, and each
look-alike only where and when it should (docs/simulator.md, `chassis`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from collectors.catalog import Scope
from models.simulator import Simulator
from tests.models._simulator_util import Grid, collect, small

H = 3600.0


def _run(failures: list[dict[str, Any]], benign: list[dict[str, Any]] | None = None
         ) -> tuple[Simulator, Grid]:
    cfg = small(failures={"rate_multiplier": 1e-9}, benign={"enabled": False},
                time={"days": 0.5, "step_s": 60},
                scripted_failures=failures, scripted_benign=benign or [])
    sim = Simulator(cfg)
    return sim, collect(list(sim.run()))


def _at(sim: Simulator, hours: float) -> int:
    return int(hours * H // sim.config.time.step_s)


def test_a_fan_slows_against_its_peers_then_stalls_under_its_lower_critical() -> None:
    sim, g = _run([{"mode": "M9_fan", "at_h": 8.0, "node": 1, "unit": 2, "lead_h": 6.0,
                    "repair_h": 2.0}])
    fan = sim.topology.fan(1, 2)
    rpm = g.col(Scope.FAN, "fan_rpm")
    peers = np.nanmedian(np.delete(rpm[:, 6:12], 2, axis=1), axis=1)
    ratio = rpm[:, fan] / peers
    assert np.nanmedian(ratio[_at(sim, 1.0):_at(sim, 2.0)]) > 0.95  # before the onset
    assert np.nanmedian(ratio[_at(sim, 7.0):_at(sim, 7.9)]) < 0.7  # late in the lead
    lcr = g.col(Scope.FAN, "fan_rpm_lower_critical")[:, fan]
    after = slice(_at(sim, 8.1), _at(sim, 9.9))
    assert (rpm[after, fan] < lcr[after]).all()
    assert (g.col(Scope.FAN, "fan_health")[after, fan] == 2).all()
    assert (g.col(Scope.NODE, "fan_redundant")[after, 1] == 0).all()
    assert (g.col(Scope.NODE, "fan_redundant")[after, 0] == 1).all()
    assert (g.col(Scope.FAN, "fan_health")[_at(sim, 10.5):, fan] == 0).all()  # replaced
    label = next(x for x in sim.labels if x["kind"] == "failure")
    assert label["entity"] == "n0002:fan2" and label["scope"] == "fan"


def test_a_supply_runs_hot_then_fails_and_the_other_carries_the_node() -> None:
    sim, g = _run([{"mode": "M8_psu", "at_h": 8.0, "node": 0, "unit": 1, "lead_h": 6.0}])
    temp = g.col(Scope.PSU, "psu_temp_c")
    diff = temp[:, 1] - temp[:, 0]
    assert abs(np.nanmedian(diff[_at(sim, 1.0):_at(sim, 2.0)])) < 2.0
    assert np.nanmedian(diff[_at(sim, 7.5):_at(sim, 7.9)]) > 7.0
    after = slice(_at(sim, 8.1), _at(sim, 8.9))
    assert (g.col(Scope.PSU, "psu_state")[after, 1] == 3).all()
    assert (g.col(Scope.PSU, "psu_health")[after, 1] == 2).all()
    assert (g.col(Scope.PSU, "psu_output_w")[after, 1] == 0).all()
    assert (g.col(Scope.PSU, "psu_output_w")[after, 0] > 1500).all()
    assert (g.col(Scope.NODE, "psu_redundant")[after, 0] == 0).all()


def test_aer_bursts_come_before_a_width_drop_seen_under_load() -> None:
    sim, g = _run([{"mode": "M10_pcie_width", "at_h": 8.0, "node": 0, "unit": 3, "lead_h": 4.0,
                    "repair_h": 3.0}])
    gpu = sim.topology.gpu(0, 3)
    aer = g.col(Scope.GPU, "pcie_aer_correctable_total")[:, gpu]
    assert np.nanmax(aer[: _at(sim, 3.9)]) == 0 and np.nanmax(aer[: _at(sim, 8.0)]) >= 120
    width = g.col(Scope.GPU, "pcie_link_width")[:, gpu]
    assert (width[_at(sim, 1):_at(sim, 7.9)] == 16).all()
    assert set(np.unique(width[_at(sim, 8.1):_at(sim, 10.0)])) <= {4.0, 8.0}


def test_a_port_trains_at_half_its_rate() -> None:
    sim, g = _run([{"mode": "M11_nic_speed", "at_h": 6.0, "node": 1, "unit": 4, "lead_h": 3.0,
                    "repair_h": 3.0}])
    port = sim.topology.ib_port(1, 4)
    rate = g.col(Scope.IB_PORT, "ib_rate")
    full = sim.config.fleet.spec.ib_rate_gbps
    assert (rate[: _at(sim, 5.9)] == full).all()
    after = rate[_at(sim, 6.1):_at(sim, 8.0), port]
    width = g.col(Scope.IB_PORT, "nic_pcie_link_width")[_at(sim, 6.1):_at(sim, 8.0), port]
    assert (after == full / 2).all() or (width == 8).all()
    assert np.nanmax(g.col(Scope.IB_PORT, "ib_symbol_error")[: _at(sim, 6.0), port]) > 0


def test_sudden_modes_write_their_state() -> None:
    sim, g = _run([{"mode": "M12_gpu_unreadable", "at_h": 4.0, "node": 0, "unit": 5},
                   {"mode": "M13_host_hw", "at_h": 6.0, "node": 1}])
    state = g.col(Scope.GPU, "gpu_unreadable")[:, sim.topology.gpu(0, 5)]
    assert (state[: _at(sim, 3.9)] == 0).all()
    assert set(np.unique(state[_at(sim, 4.1):_at(sim, 4.9)])) <= {1.0, 4.0}
    ue = g.col(Scope.NODE, "edac_ue_total")[:, 1]
    assert np.nanmax(ue[: _at(sim, 5.9)]) == 0 and ue[_at(sim, 6.1)] == 1
    assert np.nanmax(g.col(Scope.NODE, "mce_total")[:, 1]) == 1
    assert {x["mode"] for x in sim.labels if x["kind"] == "failure"} == {
        "M12_gpu_unreadable", "M13_host_hw"}


def test_look_alikes() -> None:
    sim, g = _run([], [{"trap": "psu_standby", "start_h": 0.0, "duration_h": 12.0, "node": 1,
                        "unit": 1},
                       {"trap": "pcie_idle_narrow", "start_h": 0.0, "duration_h": 12.0,
                        "node": 0, "unit": 2},
                       {"trap": "fan_profile", "start_h": 2.0, "duration_h": 3.0, "node": 0}])
    psu = sim.topology.psu(1, 1)
    assert (g.col(Scope.PSU, "psu_state")[:, psu] == 1).all()
    assert (g.col(Scope.PSU, "psu_output_w")[:, psu] == 0).all()
    assert (g.col(Scope.NODE, "psu_redundant") == 1).all()
    gpu = sim.topology.gpu(0, 2)
    util = g.col(Scope.GPU, "gpu_util")[:, gpu]
    width = g.col(Scope.GPU, "pcie_link_width")[:, gpu]
    seen = ~np.isnan(util)
    assert (width[seen & (util >= 1)] == 16).all()
    assert (width[seen & (util < 1)] == 8).all()
    rpm = g.col(Scope.FAN, "fan_rpm")[:, :6]
    during = rpm[_at(sim, 2.2):_at(sim, 4.8)]
    spread = np.nanmax(during, axis=1) / np.nanmin(during, axis=1)
    assert np.nanmax(spread) < 1.2  # the fans move together
