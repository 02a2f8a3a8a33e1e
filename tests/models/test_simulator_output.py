"""Determinism, Batch shape and the trace writer."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from collectors.catalog import CATALOG, Scope
from collectors.frames import Entity
from collectors.trace import TraceReader
from models.simulator import SimConfig, Simulator, load_scenario, write_trace
from models.simulator.render import chunk_steps
from tests.models._simulator_util import SCOPES, collect, small


def _same(a: Simulator, b: Simulator) -> None:
    ba, bb = list(a.run()), list(b.run())
    assert len(ba) == len(bb)
    for x, y in zip(ba, bb, strict=True):
        for s in SCOPES:
            fx, fy = x.frames[s], y.frames[s]
            assert np.array_equal(fx.rows, fy.rows)
            assert np.array_equal(fx.ts, fy.ts)
            assert np.array_equal(fx.values, fy.values, equal_nan=True)
        assert x.events == y.events


def test_same_seed_gives_identical_batches_and_labels() -> None:
    cfg = small()
    a, b = Simulator(cfg), Simulator(cfg)
    assert a.labels == b.labels
    _same(a, b)


def test_a_simulator_renders_the_same_twice() -> None:
    sim = Simulator(small())
    first = collect(list(sim.run()))
    second = collect(list(sim.run()))
    for s in SCOPES:
        assert np.array_equal(first.values[s], second.values[s], equal_nan=True)


def test_different_seeds_differ() -> None:
    a, b = Simulator(small(seed=1)), Simulator(small(seed=2))
    assert a.labels != b.labels
    ga, gb = collect(list(a.run())), collect(list(b.run()))
    assert not np.array_equal(ga.values[Scope.GPU], gb.values[Scope.GPU], equal_nan=True)


def test_batches_follow_the_catalog_and_share_entity_tables() -> None:
    cfg = small(time={"chunk_mb": 0.05})
    sim = Simulator(cfg)
    batches = list(sim.run())
    assert len(batches) > 1
    per = chunk_steps(cfg, sim.topology)
    for b in batches:
        assert set(b.frames) == set(SCOPES)
        for s in SCOPES:
            f = b.frames[s]
            assert f.entities is sim.tables[s]
            assert f.values.shape[1] == len(CATALOG.columns(s))
            assert len(f) <= per * len(f.entities)
    t = sim.tables
    assert t[Scope.GPU][9] == Entity.gpu("n0002", 1)
    assert t[Scope.NVLINK][3].key == "n0001:gpu1:nvlink1"
    assert t[Scope.IB_PORT][8].key == "n0002:mlx5_0:1"
    total = sum(len(b.frames[Scope.GPU]) for b in batches)
    assert total == cfg.time.steps * cfg.fleet.gpus


def test_xids_are_events_with_their_code() -> None:
    grid = collect(list(Simulator(small()).run()))
    assert grid.events
    for key, _, code in grid.events:
        assert Entity.parse(key).scope is Scope.GPU
        assert code in {13, 31, 43, 48, 63, 64, 74, 79, 94, 95, 119}


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def _tiny() -> SimConfig:
    return small(fleet={"nodes": 1}, time={"days": 0.05}, scripted_failures=[
        {"mode": "M1_hbm", "at_h": 1.0, "unit": 3, "lead_h": 0.5, "repair_h": 0.1}])


def test_written_trace_is_byte_identical(tmp_path: Path) -> None:
    cfg = _tiny()
    a = write_trace(cfg, tmp_path / "a", gzip=False)
    write_trace(cfg, tmp_path / "b", gzip=False)
    assert a.lines > 0 and a.labels > 0
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    write_trace(cfg.model_copy(update={"seed": 5}), tmp_path / "c", gzip=False)
    assert _files(tmp_path / "a") != _files(tmp_path / "c")
    # gzip headers carry a time stamp; the content is what must not change
    write_trace(cfg, tmp_path / "z", gzip=True)
    plain = b"".join(v for k, v in _files(tmp_path / "a").items() if k.endswith(".lp"))
    zipped = b"".join(gzip.decompress(v) for k, v in _files(tmp_path / "z").items()
                      if k.endswith(".gz"))
    assert plain == zipped


def test_written_trace_reads_back(tmp_path: Path) -> None:
    cfg = _tiny()
    write_trace(cfg, tmp_path)
    reader = TraceReader(tmp_path, step_s=cfg.time.step_s)
    assert len(reader.labels()) == len(Simulator(cfg).labels)
    rounds = list(reader)
    assert sum(len(b.frames[Scope.GPU]) for b in rounds if Scope.GPU in b.frames) > 0


def test_load_scenario_merges_yaml_overrides(tmp_path: Path) -> None:
    over = tmp_path / "over.yaml"
    over.write_text("seed: 7\ntime: {days: 2}\nfailures: {rate_multiplier: 3}\n")
    cfg = load_scenario("ci", over)
    assert (cfg.seed, cfg.time.days, cfg.time.step_s) == (7, 2, 300)
    assert cfg.failures.rate_multiplier == 3 and cfg.fleet.nodes == 64
    full = tmp_path / "s.yaml"
    full.write_text("preset: demo\nfleet: {nodes: 5}\n")
    assert load_scenario(full).fleet.nodes == 5
    assert load_scenario(full).scripted_failures == load_scenario("demo").scripted_failures
    bad = tmp_path / "bad.yaml"
    bad.write_text("preset: nope\n")
    with pytest.raises(ValueError, match="unknown preset"):
        load_scenario(bad)
