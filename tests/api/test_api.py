"""The read API through the app's lifespan, over a real Pipeline fed real Batches: three nodes,
a double-bit ECC error and a dead NVLink link on n001:gpu3, retired pages past the DCGM soft
limit on n002:gpu5."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from service.api.app import create_app
from service.api.state import Running
from service.api.timefmt import rfc3339
from service.settings import Settings
from tests.support.fleet import STEP, T0, BrokenCollector, Fleet, FleetCollector, ManualClock


@dataclass
class Service:
    client: TestClient
    st: Running
    fleet: Fleet
    clock: ManualClock

    def round(self) -> None:
        """One collect and one score at the clock's time, then the clock moves a step on."""
        self.st.scheduler.collect_once("fleet")
        self.st.scheduler.score_once()
        self.clock.now += STEP

    def get(self, url: str, status: int = 200) -> Any:
        r = self.client.get(url)
        assert r.status_code == status, r.text
        return r.json()


@pytest.fixture
def svc(settings: Settings) -> Iterator[Service]:
    fleet = Fleet({"n001": 8, "n002": 8, "n003": 4})
    clock = ManualClock(T0)
    app = create_app(settings, clock=clock, schedule=False,
                     collectors=[FleetCollector(fleet, clock), BrokenCollector()])
    with TestClient(app) as client:
        yield Service(client, app.state.gpuhealth, fleet, clock)


@pytest.fixture
def faulty(svc: Service) -> Service:
    for _ in range(2):
        svc.round()
    svc.fleet.set("n001:gpu3", "ecc_dbe_volatile", 2)
    svc.fleet.set("n001:gpu3:nvlink1", "nvlink_state", 0)
    svc.fleet.set("n002:gpu5", "retired_pages_sbe", 20)
    svc.round()
    return svc


def test_healthz_and_readiness_before_and_after_the_first_tick(svc: Service) -> None:
    assert svc.get("/healthz") == {"status": "ok"}
    body = svc.get("/readyz", 503)
    assert body["ready"] is False
    assert "no scoring tick has run yet" in body["reasons"]
    svc.st.scheduler.collect_once("broken")
    body = svc.get("/readyz", 503)
    assert any("collector broken is down" in r and "/dev/nvidiactl" in r for r in body["reasons"])
    svc.round()
    body = svc.get("/readyz", 503)
    assert body["reasons"] == [r for r in body["reasons"] if r.startswith("collector broken")]
    assert body["collectors"]["fleet"]["up"] is True
    assert "/dev/nvidiactl" in svc.get("/v1/collectors")["broken"]["reason"]


def test_ready_once_scored_with_every_collector_up(settings: Settings) -> None:
    fleet, clock = Fleet({"n001": 8}), ManualClock(T0)
    app = create_app(settings, clock=clock, schedule=False,
                     collectors=[FleetCollector(fleet, clock)])
    with TestClient(app) as client:
        assert client.get("/readyz").status_code == 503
        app.state.gpuhealth.scheduler.collect_once("fleet")
        app.state.gpuhealth.scheduler.score_once()
        r = client.get("/readyz")
        assert r.status_code == 200, r.text
        body = r.json()
        model = body.pop("model")
        assert set(body.pop("detectors")) == {"hard", "chassis", "dynamic", "lstm"}
        # One process on its own file leads, and its sender and remediation run.
        assert body.pop("cluster") == {
            "leader": {"replica": "self", "epoch": 0, "since": None}, "leading": True,
            "leading_since": None, "dispatcher_running": True, "remediation_running": True,
            "last_notified": {}}
        assert body == {"ready": True, "reasons": [],
                        "collectors": {"fleet": {"up": True, "reason": "", "exhausted": False}}}
        # The shipped model is the default; a model is never a readiness condition.
        assert model["loaded"] is True and model["version"].startswith("lstm-")


def test_nodes_summary_and_sorting(faulty: Service) -> None:
    body = faulty.get("/v1/nodes")
    assert body["total"] == 3
    nodes = {n["node"]: n for n in body["nodes"]}
    assert [n["node"] for n in body["nodes"]] == ["n001", "n002", "n003"]
    n1 = nodes["n001"]
    assert (n1["risk"], n1["level"], n1["alerts"]) == (1.0, 3, 2)
    assert (n1["gpus"], n1["links"], n1["ports"]) == (8, 16, 2)
    assert n1["top_signal"]["entity"] in ("n001:gpu3", "n001:gpu3:nvlink1")
    assert n1["top_signal"]["risk"] == 1.0
    n2 = nodes["n002"]
    assert n2["level"] == 1 and n2["alerts"] == 1 and 0 < n2["risk"] < 1
    assert n2["top_signal"] == {"entity": "n002:gpu5", "rule": "retired_pages_soft",
                                "signal": n2["top_signal"]["signal"], "risk": n2["risk"]}
    n3 = nodes["n003"]
    assert (n3["risk"], n3["level"], n3["alerts"], n3["gpus"], n3["top_signal"]) == (
        0.0, 0, 0, 4, None)

    def order(query: str) -> list[str]:
        return [n["node"] for n in faulty.get(f"/v1/nodes?{query}")["nodes"]]

    assert order("sort=risk&order=asc") == ["n003", "n002", "n001"]
    assert order("sort=node") == ["n001", "n002", "n003"]
    assert order("sort=node&order=desc") == ["n003", "n002", "n001"]
    assert order("sort=alerts") == ["n001", "n002", "n003"]
    assert order("sort=alerts&order=asc") == ["n003", "n002", "n001"]
    page = faulty.get("/v1/nodes?sort=node&limit=1")
    assert [n["node"] for n in page["nodes"]] == ["n001"] and page["next_cursor"]
    assert order(f"sort=node&limit=1&cursor={page['next_cursor']}") == ["n002"]


def test_node_detail(faulty: Service) -> None:
    body = faulty.get("/v1/nodes/n001")
    assert body["node"] == "n001" and body["risk"] == 1.0 and body["level"] == 3
    assert [g["entity"] for g in body["gpus"]] == [f"n001:gpu{i}" for i in range(8)]
    assert len(body["links"]) == 16 and len(body["ports"]) == 2
    gpu3 = body["gpus"][3]
    assert gpu3["risk"] == 1.0 and gpu3["level"] == 3
    assert gpu3["explanation"][0]["rule"] == "dbe"
    quiet = body["gpus"][0]
    assert quiet["risk"] == 0.0 and quiet["level"] == 0 and quiet["explanation"] == []
    link = next(lk for lk in body["links"] if lk["entity"] == "n001:gpu3:nvlink1")
    assert link["level"] == 3 and link["explanation"][0]["rule"] == "nvlink_down"
    assert {a["entity"] for a in body["alerts"]} == {"n001:gpu3", "n001:gpu3:nvlink1"}


def test_gpu_detail(faulty: Service) -> None:
    body = faulty.get("/v1/gpus/n001:gpu3")
    assert body["gpu"] == "n001:gpu3" and body["node"] == "n001"
    assert body["risk"] == 1.0 and body["level"] == 3
    metrics = {m["name"]: m for m in body["metrics"]}
    assert metrics["ecc_dbe_volatile"]["value"] == 2.0
    assert metrics["ecc_dbe_volatile"]["unit"] == "errors"
    assert metrics["gpu_temp"] == {"name": "gpu_temp", "unit": "degC", "kind": "gauge",
                                   "value": 55.0, "ts": rfc3339(T0 + 2 * STEP)}
    assert metrics["xid"]["value"] is None  # an event metric never reported
    dbe = body["explanation"][0]
    assert (dbe["rule"], dbe["value"], dbe["threshold"], dbe["risk"], dbe["hard"]) == (
        "dbe", 2.0, 1.0, 1.0, True)
    links = {lk["entity"]: lk for lk in body["links"]}
    assert set(links) == {"n001:gpu3:nvlink0", "n001:gpu3:nvlink1"}
    assert links["n001:gpu3:nvlink1"]["risk"] == 1.0
    assert links["n001:gpu3:nvlink0"]["risk"] == 0.0
    assert {a["entity"] for a in body["alerts"]} == {"n001:gpu3", "n001:gpu3:nvlink1"}
    assert faulty.get("/v1/gpus/n001:gpu03")["gpu"] == "n001:gpu3"
    assert faulty.get("/v1/gpus/n001:gpu0")["alerts"] == []


def test_unknown_nodes_gpus_and_alerts_are_404(faulty: Service) -> None:
    assert "n999" in faulty.get("/v1/nodes/n999", 404)["detail"]
    assert "not known" in faulty.get("/v1/gpus/n001:gpu9", 404)["detail"]
    assert "not a GPU key" in faulty.get("/v1/gpus/n001", 404)["detail"]
    assert "not a GPU key" in faulty.get("/v1/gpus/n001:mlx5_0:1", 404)["detail"]
    assert "does not exist" in faulty.get("/v1/alerts/999", 404)["detail"]


@pytest.mark.slow
@pytest.mark.parametrize("url", [
    "/v1/alerts?level=4", "/v1/alerts?level=0", "/v1/alerts?state=open", "/v1/alerts?limit=0",
    "/v1/alerts?limit=1001", "/v1/alerts/abc", "/v1/nodes?sort=temperature",
    "/v1/nodes?order=up", "/v1/nodes?limit=0",
])
def test_bad_parameters_are_422(faulty: Service, url: str) -> None:
    assert faulty.get(url, 422)["detail"]


def test_alert_filters_and_history(faulty: Service) -> None:
    def entities(query: str) -> list[str]:
        return [a["entity"] for a in faulty.get(f"/v1/alerts?{query}")["alerts"]]

    assert sorted(entities("")) == ["n001:gpu3", "n001:gpu3:nvlink1", "n002:gpu5"]
    assert sorted(entities("level=3")) == ["n001:gpu3", "n001:gpu3:nvlink1"]
    assert sorted(entities("level=1&state=firing")) == sorted(entities(""))
    assert entities("state=resolved") == []
    assert entities("node=n002") == ["n002:gpu5"]
    assert entities("entity=n001:gpu3") == ["n001:gpu3"]
    first = faulty.get("/v1/alerts?limit=2")
    assert len(first["alerts"]) == 2 and first["next_cursor"]
    rest = faulty.get(f"/v1/alerts?limit=2&cursor={first['next_cursor']}")
    assert len(rest["alerts"]) == 1 and rest["next_cursor"] is None

    alert = faulty.get("/v1/alerts?entity=n001:gpu3")["alerts"][0]
    assert alert["state"] == "firing" and alert["level"] == 3 and alert["scope"] == "gpu"
    detail = faulty.get(f"/v1/alerts/{alert['id']}")
    assert detail["explanation"][0]["rule"] == "dbe"
    assert detail["history"] == [{"at": rfc3339(T0 + 2 * STEP), "old_level": 0,
                                  "new_level": 3, "risk": 1.0}]


def test_resolved_alerts(settings: Settings) -> None:
    settings = settings.model_copy(update={"alerts": type(settings.alerts)(resolve_for_s=10.0,
                                                                  dwell_s=(0, 0, 0))})
    fleet, clock = Fleet({"n001": 8}), ManualClock(T0)
    app = create_app(settings, clock=clock, schedule=False,
                     collectors=[FleetCollector(fleet, clock)])
    with TestClient(app) as client:
        svc = Service(client, app.state.gpuhealth, fleet, clock)
        fleet.set("n001:gpu3", "ecc_dbe_volatile", 1)
        svc.round()
        fleet.set("n001:gpu3", "ecc_dbe_volatile", 0)  # a GPU reset clears the counter
        for _ in range(4):
            svc.round()
        resolved = svc.get("/v1/alerts?state=resolved")["alerts"]
        assert [a["entity"] for a in resolved] == ["n001:gpu3"]
        assert resolved[0]["level"] == 0 and resolved[0]["peak_level"] == 3
        history = svc.get(f"/v1/alerts/{resolved[0]['id']}")["history"]
        assert [(h["old_level"], h["new_level"]) for h in history] == [(0, 3), (3, 0)]
        assert svc.get("/v1/nodes")["nodes"][0]["level"] == 0


def test_metrics(faulty: Service) -> None:
    faulty.st.scheduler.collect_once("broken")
    note = faulty.st.pipeline.notification
    assert note is not None and note.sender.wait(10)  # messages leave on the sender's thread
    r = faulty.client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(r.text) for s in fam.samples}

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("gpuhealth_alerts_firing", level="3") == 2
    assert value("gpuhealth_alerts_firing", level="1") == 1
    assert value("gpuhealth_collector_up", collector="fleet") == 1
    assert value("gpuhealth_collector_up", collector="broken") == 0
    assert value("gpuhealth_collector_scrape_seconds_count", collector="fleet") == 3
    down = [lbl for (name, lbl), v in samples.items()
            if name == "gpuhealth_collector_last_error" and v == 1]
    assert [dict(lbl)["collector"] for lbl in down] == ["broken"]
    assert dict(down[0])["reason"]
    assert value("gpuhealth_samples_ingested_total") > 0
    assert value("gpuhealth_samples_rejected_total") == 0
    assert value("gpuhealth_score_ticks_total") == 3
    assert value("gpuhealth_notifications_sent_total", receiver="record",
                 integration="record") > 0
    assert value("gpuhealth_score_tick_seconds_count") == 3
    # The phases split the ticks' time: each named, together no more than the ticks took.
    phases = {dict(lbl)["phase"]: v for (name, lbl), v in samples.items()
              if name == "gpuhealth_score_tick_phase_seconds_total"}
    assert set(phases) == {"claim", "lock", "forget", "score", "alerts", "record", "notify",
                           "remediate"}
    assert phases["score"] > 0
    assert sum(phases.values()) <= value("gpuhealth_score_tick_seconds_sum") + 1e-6
    assert value("gpuhealth_ingest_seconds_count", source="fleet") == 3
    assert value("gpuhealth_job_errors_total", job="collect:broken") == 1
    assert value("gpuhealth_entities", scope="gpu") == 20
    assert value("gpuhealth_entities_at_risk", scope="gpu", level="3") == 1
    assert value("gpuhealth_entities_at_risk", scope="gpu", level="1") == 2
    assert value("gpuhealth_entities_at_risk", scope="nvlink", level="3") == 1
    assert value("gpuhealth_entities_at_risk", scope="node", level="1") == 2
    assert value("gpuhealth_last_tick_timestamp_seconds") == T0 + 2 * STEP
    assert value("process_resident_memory_bytes") > 10 * 2**20  # the service's own memory
    assert value("gpuhealth_rows_late_total") == 0 and value("gpuhealth_lifetime_drops_total") == 0
    # Per entity only in the entity families (tests/runtime/test_prometheus_metrics.py).
    assert {name for name, labels in samples if "n001" in str(labels)} == {
        "gpuhealth_gpu_risk", "gpuhealth_gpu_alert_level", "gpuhealth_gpu_nvlink_risk",
        "gpuhealth_gpu_nvlink_alert_level", "gpuhealth_ib_port_risk",
        "gpuhealth_ib_port_alert_level", "gpuhealth_node_risk", "gpuhealth_node_alert_level"}
    # The app's own registry, never the process-global one.
    assert REGISTRY.get_sample_value("gpuhealth_score_ticks_total") is None


def test_openapi_docs(svc: Service) -> None:
    assert svc.client.get("/docs").status_code == 200
    paths = svc.get("/openapi.json")["paths"]
    assert {"/v1/nodes", "/v1/nodes/{node}", "/v1/gpus/{gpu}", "/v1/alerts",
            "/v1/alerts/{alert_id}", "/write", "/v1/write", "/metrics", "/readyz"} <= set(paths)
