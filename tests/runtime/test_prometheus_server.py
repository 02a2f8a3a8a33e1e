"""A real Prometheus (Debian's `prometheus`) on loopback scrapes the real service every second
and evaluates the shipped rules: the per-GPU series arrive with their labels, a recording rule
records, the watchdog fires and no dead-service alert does while the service answers; once it
stops, `GpuHealthDown` is pending for it. (The GPU's own alert is gpuhealth's, not a rule's.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from service.api.app import create_app
from service.settings import Settings
from tests.support.fleet import STEP, T0, Fleet, FleetCollector, ManualClock
from tests.support.prometheus import PROMETHEUS, RULES_DIR, PrometheusServer, free_port

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="prometheus is not installed (apt-get install prometheus; .ci/run does)")


class Service:
    """The service on a loopback port, scored by hand: two healthy rounds, then a double-bit
    ECC error and a dead NVLink link on n001:gpu3."""

    def __init__(self, settings: Settings) -> None:
        self.fleet = Fleet({"n001": 8, "n002": 8})
        self.clock = ManualClock(T0)
        self.app = create_app(settings, clock=self.clock, schedule=False,
                              collectors=[FleetCollector(self.fleet, self.clock)])
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Service:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.server.started
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)

    def scored_with_failures(self) -> None:
        st = self.app.state.gpuhealth
        for k in range(3):
            if k == 2:
                self.fleet.set("n001:gpu3", "ecc_dbe_volatile", 2)
                self.fleet.set("n001:gpu3:nvlink1", "nvlink_state", 0)
            st.scheduler.collect_once("fleet")
            st.scheduler.score_once()
            self.clock.now += STEP


@pytest.fixture
def scraped(settings: Settings, tmp_path: Path) -> Iterator[tuple[Service, PrometheusServer]]:
    with Service(settings) as svc:
        svc.scored_with_failures()
        prom = PrometheusServer(tmp_path / "prometheus", [f"127.0.0.1:{svc.port}"],
                                [RULES_DIR / "rules.yml"])
        prom.start()
        try:
            yield svc, prom
        finally:
            prom.stop()


@pytest.mark.slow
def test_prometheus_scrapes_the_service_and_evaluates_the_rules(
        scraped: tuple[Service, PrometheusServer]) -> None:
    svc, prom = scraped
    gpus = prom.wait_for("gpuhealth_gpu_risk", lambda: prom.query("gpuhealth_gpu_risk"))
    assert len(gpus) == 16
    labels = {tuple(sorted(g["metric"].items())) for g in gpus}
    assert (("__name__", "gpuhealth_gpu_risk"), ("gpu", "3"), ("instance", gpus[0]["metric"]
            ["instance"]), ("job", "gpuhealth"), ("node", "n001")) in labels
    risk = {(g["metric"]["node"], g["metric"]["gpu"]): float(g["value"][1]) for g in gpus}
    assert risk[("n001", "3")] == 1.0 and risk[("n002", "3")] == 0.0
    targets = prom.api("targets")["activeTargets"]
    assert [t["health"] for t in targets] == ["up"], targets

    worst = prom.query('gpuhealth_gpu_nvlink_alert_level{node="n001",gpu="3"}')
    assert [(w["metric"]["link"], w["value"][1]) for w in worst] == [("1", "3")]

    recorded = prom.wait_for("job:gpuhealth_gpus_at_warning:count", lambda: prom.query(
        "job:gpuhealth_gpus_at_warning:count"))
    assert [(r["metric"], r["value"][1]) for r in recorded] == [
        ({"__name__": "job:gpuhealth_gpus_at_warning:count", "job": "gpuhealth"}, "1")]
    by_node = prom.wait_for("node:gpuhealth_gpu_risk:max", lambda: prom.query(
        "node:gpuhealth_gpu_risk:max"))
    assert {r["metric"]["node"]: r["value"][1] for r in by_node} == {"n001": "1", "n002": "0"}

    def alerts(name: str) -> list[dict[str, Any]]:
        return [a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == name]

    prom.wait_for("GpuHealthWatchdog firing", lambda: [
        a for a in alerts("GpuHealthWatchdog") if a["state"] == "firing"])
    # Alive and scored: no dead-service alert, not even pending.
    assert prom.query('up{job="gpuhealth"} == 1')
    prom.wait_for("gpuhealth_score_ticks_total", lambda: prom.query(
        'gpuhealth_score_ticks_total{job="gpuhealth"}'))
    # A rule evaluated before the first scrape saw no `up` and may hold GpuHealthAbsent
    # pending; the first evaluation after a scrape must clear it, and none may stay.
    dead = ("GpuHealthDown", "GpuHealthAbsent", "GpuHealthMetricsAbsent")
    prom.wait_for("no dead-service alert once scraped", lambda: not [
        a for name in dead for a in alerts(name)], timeout_s=30)
    # Every rule group loaded and evaluated without an error.
    groups = prom.api("rules")["groups"]
    assert {g["name"] for g in groups} == {"gpuhealth-fleet", "gpuhealth-deadman",
                                           "gpuhealth-service"}
    assert all(r["health"] != "err" for g in groups for r in g["rules"]), groups

    svc.__exit__(None, None, None)  # the service dies; Prometheus goes on scraping its port
    down = prom.wait_for("GpuHealthDown pending", lambda: alerts("GpuHealthDown"))
    assert [(a["state"], a["labels"]["instance"]) for a in down] == [
        ("pending", f"127.0.0.1:{svc.port}")]
    assert alerts("GpuHealthMetricsAbsent") == []  # one death, one alert
