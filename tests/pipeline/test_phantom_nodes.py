"""Phantom nodes (one line each from a hostile or broken sender) must not dilute the fleet the
remediation breaker and the storm detector measure against: the fleet is the nodes reporting
now, or the operator's declared size, whichever is larger."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame
from service.assembly import Wiring
from service.pipeline import Pipeline, build_pipeline
from service.settings import Settings
from service.stages.fleet_alerts import STORM
from tests.pipeline.builders import T0, Rounds

STEP = 5.0


def _phantoms(n: int, ts: float) -> Batch:
    table = EntityTable(Scope.GPU, [Entity.gpu(f"ph{i}", 0) for i in range(n)])
    v = np.full((n, len(CATALOG.columns(Scope.GPU))), np.nan)
    v[:, CATALOG.column(Scope.GPU, "gpu_temp")] = 40.0
    b = Batch()
    b.add(Frame(table, np.arange(n, dtype=np.int32), np.full(n, ts), v))
    return b


def _pipeline(tmp: Path, **remediation: object) -> Pipeline:
    s = Settings(storage={"data_dir": tmp},  # type: ignore[arg-type]
                 detectors={"model": {"path": "none"}},  # type: ignore[arg-type]
                 remediation={"mode": "dry_run", **remediation})  # type: ignore[arg-type]
    return build_pipeline(s, Wiring(notifiers=(), remediate=False))


def test_a_thousand_phantoms_hide_no_storm(tmp_path: Path) -> None:
    p, r = _pipeline(tmp_path), Rounds(nodes=40, gpus=1, links=1, ports=1)
    p.ingest(_phantoms(1000, T0), T0)
    t = T0
    for k in range(30):
        t = T0 + STEP * k
        p.process(r.batch(t), t)
    assert len(p.store.registry.nodes) == 1040 and p.fleet_size == 40
    for i in range(10):  # a quarter of the live fleet fails at once
        r.set(f"n{i}:gpu0", "ecc_dbe_volatile", 1.0)
    for _ in range(3):
        t += STEP
        p.process(r.batch(t), t)
    assert any(a.name == STORM for a in p.alerts.open_alerts())


def test_a_declared_fleet_size_is_a_floor_and_a_ceiling(tmp_path: Path) -> None:
    p, r = _pipeline(tmp_path, fleet_size=100), Rounds(nodes=4, gpus=1, links=1, ports=1)
    p.process(r.batch(T0), T0)
    assert p.fleet_size == 100
    p2 = _pipeline(tmp_path / "b")
    for k in range(3):  # counted once their arrivals span two steps
        p2.process(r.batch(T0 + STEP * k), T0 + STEP * k)
    assert p2.fleet_size == 4
    p3 = _pipeline(tmp_path / "c", fleet_size=2)
    for k in range(3):
        p3.process(r.batch(T0 + STEP * k), T0 + STEP * k)
    assert p3.fleet_size == 2  # no name from the wire makes the fleet larger than declared
