"""Node-wide readings through the whole service, as GPU readings go: `psu`, `fan` and `node` line
protocol for two nodes (one supply failing on n1, one fan under its critical speed on n2) reach
the window store, the chassis rules, the alert machine and store, the API's reads and /metrics
with the right scope, entity key, level and text; a late point, a point sent twice and a node
whose agent stops sending behave as they do for GPUs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from collectors.catalog import Scope
from service.api.app import create_app
from service.settings import Settings, StorageSettings
from service.stages.alert_store import Alert
from tests.support.chassis_fleet import chassis_lines
from tests.support.fleet import STEP, T0, ManualClock

# A service driven for minutes of data time per test: seconds each.
pytestmark = pytest.mark.slow
NODES = ("n1", "n2")


def _ns(t: float) -> int:
    return round(t * 1e9)


def gpu_lines(node: str, t: float) -> list[str]:
    return [f"gpu,host={node},gpu={g} gpu_temp=55,ecc_dbe_volatile=0i {_ns(t)}" for g in (0, 1)]


class Svc:
    def __init__(self, client: TestClient, clock: ManualClock) -> None:
        self.client, self.clock = client, clock
        self.st = client.app.state.gpuhealth  # type: ignore[attr-defined]

    def write(self, lines: list[str]) -> None:
        r = self.client.post("/write", content="\n".join(lines) + "\n")
        assert r.status_code == 204, r.text

    def rounds(self, n: int, gpus: tuple[str, ...] = NODES,
               chassis: tuple[str, ...] = NODES) -> None:
        for _ in range(n):
            t = self.clock.now
            self.write([x for node in gpus for x in gpu_lines(node, t)]
                       + [x for node in chassis for x in chassis_lines(node, t)])
            self.st.scheduler.score_once()
            self.clock.now += STEP

    def get(self, path: str) -> Any:
        r = self.client.get(path)
        assert r.status_code == 200, r.text
        return r.json()

    def open_alerts(self) -> dict[tuple[str, str], Alert]:
        return {(a.name, a.entity): a for a in self.st.pipeline.alerts.open_alerts()}

    def gauges(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = self.client.get("/metrics").text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Svc]:
    clock = ManualClock(T0)
    settings = Settings(storage=StorageSettings(data_dir=tmp_path / "data"))
    app = create_app(settings, clock=clock, schedule=False)
    with TestClient(app) as client:
        yield Svc(client, clock)


# The policy's level-2 for-duration (120 s) and a few steps to spare.
WARN_ROUNDS = 30


def test_a_failed_supply_and_a_slow_fan_alert_with_their_scope_key_and_level(svc: Svc) -> None:
    svc.rounds(WARN_ROUNDS)
    alerts = svc.open_alerts()
    psu = alerts[("PsuFailureRisk", "n1:psuPSU0")]
    assert (psu.scope.value, psu.node, psu.level) == ("psu", "n1", 2)
    assert psu.explanation[0]["rule"] == "psu_failed"
    assert "not delivering" in psu.explanation[0]["signal"]
    fan = alerts[("FanFailureRisk", "n2:fan3")]
    assert (fan.scope.value, fan.node, fan.level) == ("fan", "n2", 2)
    assert fan.explanation[0]["rule"] == "fan_failed" and fan.explanation[0]["value"] == 1000
    node = alerts[("NodeAtRisk", "n1")]
    assert (node.scope.value, node.level) == ("node", 2)
    assert node.explanation[0]["rule"] == "psu_redundancy_lost"
    # Nothing else: the spares in standby by design, the healthy fans and GPUs stay quiet,
    # and a supply warning drains nothing.
    assert set(alerts) == {("PsuFailureRisk", "n1:psuPSU0"), ("FanFailureRisk", "n2:fan3"),
                           ("NodeAtRisk", "n1")}
    assert svc.get("/v1/actions")["actions"] == []

    # The API: the alert list, an alert, a node's page.
    listed = svc.get("/v1/alerts?state=firing&node=n1")["alerts"]
    assert {(a["alertname"], a["entity"], a["scope"], a["level"]) for a in listed} == {
        ("PsuFailureRisk", "n1:psuPSU0", "psu", 2), ("NodeAtRisk", "n1", "node", 2)}
    one = svc.get(f"/v1/alerts/{psu.id}")
    assert one["alertname"] == "PsuFailureRisk" and one["history"][-1]["new_level"] == 2
    page = svc.get("/v1/nodes/n1")
    psus = {p["entity"]: p for p in page["psus"]}
    assert set(psus) == {"n1:psuPSU0", "n1:psuPSU1", "n1:psuPSU2"}
    assert psus["n1:psuPSU0"]["level"] == 2 and psus["n1:psuPSU0"]["scope"] == "psu"
    assert psus["n1:psuPSU2"]["level"] == 0 and not psus["n1:psuPSU2"]["risk"]
    assert len(page["fans"]) == 4 and page["own"]["entity"] == "n1"
    assert page["own"]["level"] == 2
    sensors = {m["name"]: m["value"] for m in page["sensors"]}
    assert sensors["inlet_temp_c"] == 24.5 and sensors["psu_redundant"] == 0
    listed_nodes = {n["node"]: n for n in svc.get("/v1/nodes")["nodes"]}
    assert (listed_nodes["n2"]["psus"], listed_nodes["n2"]["fans"]) == (3, 4)
    history = svc.get("/v1/psus/n1:psuPSU0/metrics?metric=psu_health&start="
                      f"{int(T0)}&end={int(svc.clock.now)}")
    assert history["scope"] == "psu" and max(history["series"][0]["values"]) == 2

    # /metrics: a risk and a level per supply and fan, labelled by node and id.
    g = svc.gauges()
    assert g[("gpuhealth_psu_alert_level", (("node", "n1"), ("psu", "PSU0")))] == 2
    assert g[("gpuhealth_psu_alert_level", (("node", "n1"), ("psu", "PSU2")))] == 0
    assert g[("gpuhealth_fan_alert_level", (("fan", "3"), ("node", "n2")))] == 2
    assert g[("gpuhealth_fan_risk", (("fan", "3"), ("node", "n2")))] > 0.6
    assert g[("gpuhealth_node_alert_level", (("node", "n1"),))] == 2
    assert g[("gpuhealth_node_alert_level", (("node", "n2"),))] == 2


def test_a_repaired_supply_resolves(svc: Svc) -> None:
    svc.rounds(WARN_ROUNDS)
    assert ("PsuFailureRisk", "n1:psuPSU0") in svc.open_alerts()
    # The supply replaced: its BMC reads it OK and delivering, redundancy back.
    for _ in range(90):  # resolve_for_s (300 s) and the level's dwell
        t = svc.clock.now
        lines = [x for node in NODES for x in gpu_lines(node, t) + chassis_lines(node, t)]
        svc.write([x.replace("psu_health=2i,psu_state=3i", "psu_health=0i,psu_state=0i")
                   .replace("psu_redundant=0i", "psu_redundant=1i") for x in lines])
        svc.st.scheduler.score_once()
        svc.clock.now += STEP
    alerts = svc.open_alerts()
    assert ("PsuFailureRisk", "n1:psuPSU0") not in alerts and ("NodeAtRisk", "n1") not in alerts
    assert ("FanFailureRisk", "n2:fan3") in alerts  # the fan was not repaired
    resolved = svc.get("/v1/alerts?state=resolved&entity=n1:psuPSU0")["alerts"]
    assert [a["alertname"] for a in resolved] == ["PsuFailureRisk"]


def test_a_late_point_and_a_resent_one_change_nothing(svc: Svc) -> None:
    svc.rounds(WARN_ROUNDS)
    before = {k: (a.id, a.level) for k, a in svc.open_alerts().items()}
    store = svc.st.pipeline.store
    # A point a poll late (behind the newest), and the newest one sent again: both accepted,
    # the newest reading stays the newest, the open alerts stay as they were.
    late = svc.clock.now - 10 * STEP
    svc.write(chassis_lines("n2", late))
    newest = svc.clock.now - STEP
    svc.write(chassis_lines("n2", newest))
    fans = store[Scope.FAN]
    slot = next(i for i, e in enumerate(fans.entities) if e.key == "n2:fan3")
    j = fans.col("fan_rpm")
    assert fans.last_ts[slot, j] == newest and fans.last_val[slot, j] == 1000.0
    # A BMC event log entry sent twice is one event.
    sel = f"sel,host=n2 code=2i {_ns(newest)}"
    svc.write([sel])
    svc.write([sel])
    assert sum(1 for e in svc.st.pipeline.events.events if e.metric == "sel") == 1
    svc.st.scheduler.score_once()
    assert {k: (a.id, a.level) for k, a in svc.open_alerts().items()} == before


def test_a_node_whose_agent_stops_is_silent_though_its_bmc_answers(svc: Svc) -> None:
    svc.rounds(WARN_ROUNDS)
    # n2's agent (its GPUs) stops; the BMC poller still reads its supplies and fans.
    svc.rounds(30, gpus=("n1",))
    alerts = svc.open_alerts()
    assert ("NodeNoData", "n2") in alerts and ("NodeNoData", "n1") not in alerts
    # Its fan's alert stands (the BMC still says so); n1 is untouched.
    assert alerts[("FanFailureRisk", "n2:fan3")].level == 2
    assert svc.get("/v1/nodes/n2")["silent"] is True
    assert svc.get("/v1/nodes/n1")["silent"] is False


def test_a_node_that_stops_sending_everything_goes_silent_as_for_gpus(svc: Svc) -> None:
    svc.rounds(WARN_ROUNDS)
    svc.rounds(30, gpus=("n1",), chassis=("n1",))
    alerts = svc.open_alerts()
    assert ("NodeNoData", "n2") in alerts
    # Its supplies' and fans' levels are frozen on stale data, as a silent GPU's are.
    fan = alerts[("FanFailureRisk", "n2:fan3")]
    assert fan.level == 2 and fan.stale
