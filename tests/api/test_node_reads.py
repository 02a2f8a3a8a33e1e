"""The node list, a node's page and the fleet grid read one risk per node, and say which nodes
and GPUs went silent. The case that split them: a GPU that falls off the bus after an Xid 79.
Its alert's level is frozen on stale data while the Xid ages out of the rule's hour, so the
tick's risk falls to zero under a level-3 alert ("risk 0.00 · 3 page" on one page, 1.00 on
another); it keeps the risk its alert holds, on every read, until the alert ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.timefmt import rfc3339
from service.settings import Settings, StorageSettings
from tests.support.fleet import STEP, T0, Fleet, ManualClock
from tests.support.partial_fleet import PartialCollector

LOST = "n001:gpu2"


class Svc:
    def __init__(self, client: TestClient, app: Any, clock: ManualClock,
                 collector: PartialCollector) -> None:
        self.client, self.app, self.clock, self.collector = client, app, clock, collector

    def get(self, path: str) -> Any:
        r = self.client.get(path)
        assert r.status_code == 200, r.text
        return r.json()

    def rounds(self, n: int, step: float = STEP) -> None:
        st = self.app.state.gpuhealth
        for _ in range(n):
            st.scheduler.collect_once("fleet")
            st.scheduler.score_once()
            self.clock.now += step

    def tick_risk(self, key: str) -> float:
        found = self.app.state.gpuhealth.pipeline.risk.entity(key)
        assert found is not None
        return float(found.risk)

    def reads(self) -> dict[str, tuple[tuple[Any, ...], ...]]:
        """Each node's (risk, level, silent, silent_since) as the three reads give them."""
        grid = {n["node"]: (n["risk"], n["level"], n["silent"], n["silent_since"])
                for n in self.get("/v1/fleet")["nodes"]}
        listed = {n["node"]: (n["risk"], n["level"], n["silent"], n["silent_since"])
                  for n in self.get("/v1/nodes?limit=100")["nodes"]}
        out: dict[str, tuple[tuple[Any, ...], ...]] = {}
        for node in grid:
            d = self.get(f"/v1/nodes/{node}")
            out[node] = (grid[node], listed[node],
                         (d["risk"], d["level"], d["silent"], d["silent_since"]))
        return out


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Svc]:
    fleet, clock = Fleet({"n001": 4, "n002": 4, "n003": 4}), ManualClock(T0)
    collector = PartialCollector(fleet, clock)
    app = create_app(Settings(storage=StorageSettings(data_dir=tmp_path / "data")), clock=clock,
                     schedule=False, collectors=[collector])
    with TestClient(app) as client:
        yield Svc(client, app, clock, collector)


def test_a_lost_gpu_reads_the_risk_its_frozen_alert_holds_on_every_page(svc: Svc) -> None:
    svc.rounds(3)
    svc.collector.events.add(LOST, svc.clock.now, "xid", 79.0)  # fell off the bus
    svc.rounds(2)
    svc.collector.gone.add(LOST)
    # Five-minute rounds (the rest of the fleet reports at each): the Xid ages out of its hour.
    for _ in range(20):
        svc.rounds(1, step=300.0)
        if svc.tick_risk(LOST) == 0.0:
            break
    assert svc.tick_risk(LOST) == 0.0, "the Xid never aged out"
    (alert,) = [a for a in svc.get("/v1/alerts?state=firing")["alerts"]
                if a["entity"] == LOST and a["alertname"] == "GpuFailureRisk"]
    assert alert["level"] == 3  # frozen on stale data
    reads = svc.reads()
    for node, (grid, listed, detail) in reads.items():
        assert grid == listed == detail, node
    assert reads["n001"][0][:3] == (alert["risk"], 3, False)  # not "risk 0.00 · 3 page"
    cells = {g["gpu"]: g for n in svc.get("/v1/fleet")["nodes"] for g in n["gpus"]}
    assert cells[LOST]["silent"] and cells[LOST]["risk"] == alert["risk"]
    assert [g for g, c in cells.items() if c["silent"]] == [LOST]
    gpus = {g["entity"]: g for g in svc.get("/v1/nodes/n001")["gpus"]}
    assert gpus[LOST]["silent"] and gpus[LOST]["silent_since"] == cells[LOST]["silent_since"]
    assert svc.get(f"/v1/gpus/{LOST}")["risk"] == alert["risk"]


def test_a_silent_node_is_marked_with_its_last_sample(svc: Svc) -> None:
    svc.rounds(3)
    last = svc.clock.now - STEP  # n003's newest sample
    svc.collector.gone.add("n003")
    svc.rounds(20)
    reads = svc.reads()
    for node, (grid, listed, detail) in reads.items():
        assert grid == listed == detail, node
    assert reads["n003"][0][2:] == (True, rfc3339(last))
    assert all(not r[0][2] for n, r in reads.items() if n != "n003")
    cells = [g for n in svc.get("/v1/fleet")["nodes"] for g in n["gpus"] if n["node"] == "n003"]
    assert cells and all(g["silent"] and g["silent_since"] == rfc3339(last) for g in cells)
    (nodata,) = [a for a in svc.get("/v1/alerts?state=firing")["alerts"]
                 if a["alertname"] == "NodeNoData"]
    assert nodata["entity"] == "n003"


