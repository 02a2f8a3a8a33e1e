"""What the rendered metrics do: counters, resets, coarse vs fine streams, the demo's failures."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from collectors.catalog import CATALOG, Kind, Scope
from collectors.frames import Entity
from models.simulator import Simulator, load_scenario
from models.simulator.scenarios import merge
from tests.models._simulator_util import SCOPES, Grid, collect, small

_RESET_TRAPS = {"driver_reload", "planned_maintenance", "benign_remap"}


def _reset_windows(labels: list[dict[str, Any]]) -> list[tuple[str, float, float, bool]]:
    """(entity-or-node key, start, end, clears persistent counters) of every labelled reset."""
    out = []
    for x in labels:
        if x["kind"] == "repair" and x["action"] in ("gpu_reset", "gpu_replace", "node_reboot"):
            out.append((x["entity"], x["time"], x["time"], x["action"] == "gpu_replace"))
        elif x["kind"] == "benign" and x["trap"] in _RESET_TRAPS:
            out.append((x["entity"], x["start"], x["end"], False))
    return out


def _covers(key: str, entity: Entity) -> bool:
    return key in (entity.key, entity.node, entity.gpu_key)


def test_counters_never_decrease_except_at_labelled_resets() -> None:
    cfg = small(time={"days": 1}, failures={"rate_multiplier": 500.0},
                benign={"driver_reload_per_node_year": 300.0,
                        "planned_maint_per_16k_gpu_day": 3000.0, "benign_remap_per_gpu_year": 40.0,
                        "ib_corrupt_port_frac": 0.5, "sbe_carrier_per_gpu_year": 20.0})
    sim = Simulator(cfg)
    grid = collect(list(sim.run()))
    resets = _reset_windows(sim.labels)
    assert len(resets) > 5
    start, step = cfg.time.start_s, cfg.time.step_s
    checked = decreases = 0
    for scope in SCOPES:
        vals = grid.values[scope]
        for j, m in enumerate(CATALOG.columns(scope)):
            if m.kind is not Kind.COUNTER:
                continue
            for e, entity in enumerate(sim.tables[scope].entities):
                v = vals[:, e, j]
                k = np.flatnonzero(~np.isnan(v))
                if len(k) < 2:
                    continue
                checked += 1
                for i in np.flatnonzero(np.diff(v[k]) < 0):
                    ta, tb = start + k[i] * step, start + k[i + 1] * step
                    decreases += 1
                    ok = any(_covers(key, entity) and a <= tb and b > ta - step
                             and (m.resets or persistent)
                             for key, a, b, persistent in resets)
                    assert ok, (m.name, entity.key, ta, tb, v[k[i]], v[k[i + 1]])
    assert checked > 100 and decreases > 10


@pytest.fixture(scope="module")
def streams() -> tuple[Grid, Grid, int]:
    base: dict[str, Any] = {
        "fleet": {"nodes": 2},
        "time": {"days": 0.5},
        "failures": {"rate_multiplier": 300.0},
        "benign": {"missing_sample_frac": 0.0, "clock_skew_per_node_day": 0.0,
                   "ib_corrupt_port_frac": 0.3, "sbe_carrier_per_gpu_year": 30.0},
        "scripted_failures": [
            {"mode": "M1_hbm", "at_h": 10.0, "unit": 2, "lead_h": 6.0, "repair_h": 0.5},
            {"mode": "M4_ib_link", "at_h": 9.0, "node": 1, "unit": 5, "lead_h": 7.0},
        ],
    }
    runs = [small(**merge(base, {"seed": 3, "time": {"step_s": s}})) for s in (5, 300)]
    fine, coarse = (collect(list(Simulator(c).run())) for c in runs)
    return fine, coarse, 300 // 5


def test_coarse_stream_is_the_fine_stream_sampled_less_often(
        streams: tuple[Grid, Grid, int]) -> None:
    fine, coarse, r = streams
    for scope in SCOPES:
        # sample k is time start + k * step: coarse k is fine k * r
        f, c = fine.values[scope][::r], coarse.values[scope]
        assert f.shape == c.shape
        assert np.array_equal(fine.ts[scope][::r], coarse.ts[scope])
        for j, m in enumerate(CATALOG.columns(scope)):
            if m.kind is Kind.COUNTER and m.name.endswith("_data"):
                assert np.allclose(f[:, :, j], c[:, :, j], rtol=1e-9, equal_nan=True), m.name
            elif m.kind is Kind.COUNTER or m.name in ("nvlink_state", "ib_state"):
                assert np.array_equal(f[:, :, j], c[:, :, j], equal_nan=True), m.name
    grown = coarse.col(Scope.GPU, "ecc_sbe_aggregate")[-1]
    assert np.nansum(grown) > 0 and np.nansum(coarse.col(Scope.IB_PORT, "ib_symbol_error")) > 0


def test_coarse_gauges_are_means_of_the_fine_ones(streams: tuple[Grid, Grid, int]) -> None:
    fine, coarse, r = streams
    for name, tol in (("gpu_util", 1.0), ("power_draw", 8.0), ("gpu_temp", 1.0)):
        # coarse sample k is the mean over (t_k - 300 s, t_k]: fine samples (k-1)r+1 .. kr
        f = fine.col(Scope.GPU, name)[1:]
        windows = f[: len(f) // r * r].reshape(-1, r, f.shape[1])
        full = ~np.isnan(windows).any(axis=1)
        means = np.nanmean(windows, axis=1)
        c = coarse.col(Scope.GPU, name)[1:1 + len(means)]
        diff = np.abs(means - c)[full & ~np.isnan(c)]
        assert np.median(diff) < tol, (name, np.median(diff))


@pytest.fixture(scope="module")
def demo() -> tuple[Simulator, Grid]:
    sim = Simulator(load_scenario("demo"))
    return sim, collect(list(sim.run()))


def _at(sim: Simulator, t: float) -> int:
    return int((t - sim.config.time.start_s) // sim.config.time.step_s)


def test_demo_has_several_failure_modes_with_precursors(demo: tuple[Simulator, Grid]) -> None:
    sim, _ = demo
    fails = [x for x in sim.labels if x["kind"] == "failure"]
    assert len({x["mode"] for x in fails}) >= 6
    assert len({x["mode"] for x in fails if x["precursor_onset"] is not None}) >= 4
    assert all(sim.config.time.start_s < x["time"] < sim.config.time.end_s for x in fails)
    traps = {x["trap"] for x in sim.labels if x["kind"] == "benign"}
    assert len(traps) >= 6


def test_demo_signals_show_each_failure(demo: tuple[Simulator, Grid]) -> None:
    sim, grid = demo
    codes = {(k, int(c)) for k, _, c in grid.events}
    tables = sim.tables
    for x in (x for x in sim.labels if x["kind"] == "failure"):
        k, mode = _at(sim, x["time"]), x["mode"]
        e = Entity.parse(x["entity"])
        if mode == "M1_hbm":
            g = tables[Scope.GPU].index(e)
            sbe = grid.col(Scope.GPU, "ecc_sbe_aggregate")[:, g]
            onset = _at(sim, x["precursor_onset"])
            assert np.nanmax(sbe[onset:k]) > np.nanmin(sbe[:onset + 1])
            # The first reading after the failure (telemetry loss may drop a sample or two;
            # the random draws follow the render windows, which follow the catalog's width).
            after = grid.col(Scope.GPU, "remapped_rows_pending")[k + 1:k + 6, g]
            assert after[~np.isnan(after)][0] == 1
            assert (e.key, 48) in codes
        elif mode == "M2_gpu_hard":
            g = tables[Scope.GPU].index(e)
            assert np.isnan(grid.col(Scope.GPU, "gpu_temp")[k + 2:k + 20, g]).all()
            assert (e.key, 79) in codes or (e.key, 119) in codes
        elif mode == "M3_nvlink":
            link = tables[Scope.NVLINK].index(e)
            assert grid.col(Scope.NVLINK, "nvlink_state")[k + 1, link] == 0
            assert np.nanmax(grid.col(Scope.NVLINK, "nvlink_crc_flit")[:k, link]) > 0
            assert (e.gpu_key, 74) in codes
        elif mode == "M4_ib_link":
            port = tables[Scope.IB_PORT].index(e)
            assert grid.col(Scope.IB_PORT, "ib_state")[k + 10, port] == 1
            sym = grid.col(Scope.IB_PORT, "ib_symbol_error")[:, port]
            assert np.nanmax(sym[:k]) > np.nanmax(sym[: _at(sim, x["precursor_onset"])])
        elif mode == "M5_thermal":
            g = tables[Scope.GPU].index(e)
            assert np.nanmax(grid.col(Scope.GPU, "throttle_thermal")[:k, g]) == 1
            assert np.isnan(grid.col(Scope.GPU, "gpu_temp")[k + 1, g])


def test_a_failed_node_runs_no_jobs_until_repaired(demo: tuple[Simulator, Grid]) -> None:
    sim, grid = demo
    util = grid.col(Scope.GPU, "gpu_util")
    repairs = {(x["node"], x["mode"]): x["time"] for x in sim.labels if x["kind"] == "repair"}
    for x in (x for x in sim.labels if x["kind"] == "failure"):
        back = repairs[(x["node"], x["mode"])]
        e0 = sim.topology.node_names.index(x["node"]) * sim.topology.gpus_per_node
        a, b = _at(sim, x["time"]) + 2, _at(sim, back) - 1
        busy = util[a:b, e0:e0 + sim.topology.gpus_per_node]
        assert np.nanmax(busy, initial=0.0) < 15.0, x
