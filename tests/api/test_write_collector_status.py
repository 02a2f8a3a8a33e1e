"""Node agents' collector status through /write: accepted in strict mode, exported on /metrics
per (collector, host), down once stale, bad status lines refused with their reason."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from collectors.agent.loop import Agent
from collectors.agent.spool import Spool
from collectors.collector_status import status_line
from service.api.app import create_app
from service.api.state import Running
from service.settings import Settings
from tests.collectors.agent.test_agent_status import DownCollector
from tests.support.fleet import T0, BrokenCollector, Fleet, FleetCollector, ManualClock

NS = int(T0 * 1e9)
Labels = tuple[tuple[str, str], ...]


@dataclass
class Service:
    client: TestClient
    st: Running
    clock: ManualClock

    def metrics(self) -> dict[tuple[str, Labels], float]:
        text = self.client.get("/metrics").text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples}

    def collectors(self) -> dict[tuple[str, Labels], float]:
        return {k: v for k, v in self.metrics().items() if k[0].startswith("gpuhealth_collector")
                and not k[0].startswith("gpuhealth_collector_scrape_seconds")}


@pytest.fixture
def svc(settings: Settings) -> Iterator[Service]:
    clock = ManualClock(T0)
    local = [FleetCollector(Fleet({"svc": 1}), clock), BrokenCollector("local")]
    app = create_app(settings, collectors=local, clock=clock, schedule=False)
    with TestClient(app) as client:
        yield Service(client, app.state.gpuhealth, clock)


def _status(host: str, name: str, up: bool, seconds: float = 0.25, error: str = "",
            ts: float = T0) -> str:
    return status_line(host, name, up, seconds, 12, error, int(ts * 1e9))


def test_agent_status_lines_are_accepted_and_exported(svc: Service, tmp_path: Path) -> None:
    agent = Agent([DownCollector()], Spool(tmp_path / "spool"), None, host="n7",
                  wall_ns=lambda: NS)
    body = "\n".join([*agent.lines(), _status("n8", "dcgm", True, 0.125)])
    for strict in ("true", "false"):
        r = svc.client.post(f"/write?strict={strict}", content=body)
        assert r.status_code == 204, r.text
    svc.st.scheduler.collect_once("fleet")  # the service's own collectors: one up,
    svc.st.scheduler.collect_once("local")  # one down
    got = svc.collectors()
    assert got[("gpuhealth_collector_up", (("collector", "dcgm"), ("host", "n8")))] == 1.0
    assert got[("gpuhealth_collector_up", (("collector", "nvidia-smi"), ("host", "n7")))] == 0.0
    assert got[("gpuhealth_collector_last_error", (
        ("collector", "nvidia-smi"), ("host", "n7"),
        ("reason", "nvidia-smi: not found (is the driver loaded?)")))] == 1.0
    assert got[("gpuhealth_collector_last_scrape_seconds",
                (("collector", "dcgm"), ("host", "n8")))] == 0.125
    # Local collectors keep their series: no host label (Prometheus reads it as host="").
    assert got[("gpuhealth_collector_up", (("collector", "local"),))] == 0.0
    assert got[("gpuhealth_collector_up", (("collector", "fleet"),))] == 1.0
    assert got[("gpuhealth_collector_last_scrape_seconds", (("collector", "fleet"),))] >= 0
    assert not any(k[0] == "gpuhealth_collector_last_error" and ("host", "n8") in k[1]
                   for k in got)  # up: no error series


def test_a_collector_that_stops_reporting_goes_down(svc: Service) -> None:
    assert svc.client.post("/write", content=_status("n1", "nvml", True)).status_code == 204
    up = ("gpuhealth_collector_up", (("collector", "nvml"), ("host", "n1")))
    svc.clock.now = T0 + 15  # 3 rounds of 5 s: still fresh
    assert svc.collectors()[up] == 1.0
    svc.clock.now = T0 + 16
    got = svc.collectors()
    assert got[up] == 0.0
    assert got[("gpuhealth_collector_last_error", (
        ("collector", "nvml"), ("host", "n1"), ("reason", "no report for 16 s")))] == 1.0
    # The same view, shaped for an InfluxDB sink's `collector` points.
    [(key, status)] = svc.st.remote.as_collector_statuses(svc.st.now()).items()
    assert key == ("n1", "nvml") and (status.up, status.reason) == (False, "no report for 16 s")
    # A new report brings it back; a late older one (a spool draining) does not undo that.
    body = _status("n1", "nvml", True, ts=T0 + 16) + "\n" + _status("n1", "nvml", False,
                                                                      error="old", ts=T0 + 5)
    assert svc.client.post("/write", content=body).status_code == 204
    assert svc.collectors()[up] == 1.0


def test_bad_status_lines_are_refused_and_good_lines_kept(svc: Service) -> None:
    body = "\n".join([
        _status("n1", "nvml", True),
        f"gpuhealth_collector,collector=nvml,host=n2 up=2i,scrape_seconds=0.1 {NS}",
        f"gpuhealth_collector,host=n3 up=1i {NS}",
        f"gpuhealth_collector,collector=x,host=n4 up=1.0 {NS}",
        f"gpuhealth_collector,collector=x,host=n5 up=1i,samples=-3i {NS}",
        f"gpuhealth_collector,collector=x,host=n6 up=1i,scrape_seconds=\"slow\" {NS}",
        f"gpu,host=n1,gpu=0 gpu_temp=50 {NS}",
        f"gpuhealth_collector,collector=x,host=n7 up=0i,error=\"gone\",extra=1 {NS}",
    ])
    r = svc.client.post("/write?strict=true", content=body)
    assert r.status_code == 400
    err = r.json()
    by_line = {x["line"]: x["reason"] for x in err["rejections"]}
    assert sorted(by_line) == [2, 3, 4, 5, 6, 8]
    assert by_line[2] == "gpuhealth_collector: up must be the integer 1 or 0 (1i or 0i), got 2"
    assert by_line[3] == "gpuhealth_collector: missing tag 'collector'"
    assert "got 1.0" in by_line[4]
    assert "samples must be a non-negative integer" in by_line[5]
    assert "scrape_seconds must be a non-negative number" in by_line[6]
    assert "unknown field for measurement 'gpuhealth_collector': extra" in by_line[8]
    assert err["accepted"] == 1  # the gpu sample; status lines are not samples
    got = svc.collectors()
    ups = {dict(k[1])["host"] for k in got if k[0] == "gpuhealth_collector_up" and k[1] and
           dict(k[1]).get("host")}
    assert ups == {"n1", "n7"}  # the good status, and the one whose only fault was a field
    lenient = svc.client.post("/write", content=body).json()
    assert sorted(x["line"] for x in lenient["rejections"] if x["line"]) == [2, 3, 4, 5, 6]
