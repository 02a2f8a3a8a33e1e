"""A detector that raises loses only its own findings for that tick: the hard rules still page
on a double-bit error, the failure is logged once per cause and counted per detector in
/metrics; a tick that fails outright turns /readyz not ready, with the reason, until a tick
succeeds again."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from models.detectors.findings import Finding
from models.detectors.view import FleetView
from service.api.app import create_app
from service.api.state import Running
from service.assembly import Wiring, default_detectors
from service.pipeline import build_pipeline
from service.settings import Settings
from service.tick import TickResult
from tests.support.fleet import STEP, T0, Fleet, FleetCollector, ManualClock


class Exploding:
    """A detector with a bug that shows on some ticks only."""

    name = "exploding"

    def __init__(self) -> None:
        self.broken = True

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        if self.broken:
            raise ValueError("operands could not be broadcast together")
        return []


def _metric(text: str, name: str, **labels: str) -> float:
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"{name} {labels} not exported")


def test_a_failing_detector_loses_only_its_own_findings(settings: Settings,
                                                         caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    bad = Exploding()
    fleet = Fleet({"n001": 8, "n002": 8})
    clock = ManualClock(T0)
    app = create_app(lambda: build_pipeline(settings,
                                            Wiring(detectors=[*default_detectors(settings), bad])),
                     clock=clock, schedule=False, collectors=[FleetCollector(fleet, clock)])
    with TestClient(app) as c, caplog.at_level(logging.DEBUG, "service.stages.scoring"):
        st = app.state.gpuhealth
        fleet.set("n001:gpu3", "ecc_dbe_volatile", 1.0)
        for _ in range(4):
            st.scheduler.collect_once("fleet")
            assert st.scheduler.score_once() is not None
            clock.now += STEP
        open_ = {a.entity: a.level for a in st.pipeline.alerts.open_alerts()}
        assert open_.get("n001:gpu3") == 3
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "exploding" in errors[0].getMessage()
        text = c.get("/metrics").text
        assert _metric(text, "gpuhealth_detector_errors_total", detector="exploding") == 4
        assert _metric(text, "gpuhealth_detector_up", detector="exploding") == 0
        assert _metric(text, "gpuhealth_detector_up", detector="hard") == 1
        ready = c.get("/readyz")
        assert ready.status_code == 200  # degraded, but the rules score
        body = ready.json()["detectors"]["exploding"]
        assert body["ok"] is False and "broadcast" in body["reason"]
        bad.broken = False
        st.scheduler.collect_once("fleet")
        st.scheduler.score_once()
        assert c.get("/readyz").json()["detectors"]["exploding"]["ok"] is True


class FlakySink:
    """A tick observer (as the InfluxDB recorder is) whose bug shows on some ticks only."""

    def __init__(self) -> None:
        self.broken = False

    def observe(self, tick: TickResult) -> None:
        if self.broken:
            raise RuntimeError("alert state out of step")


@contextmanager
def _scored_once(settings: Settings, *, schedule: bool = False,
                 observer: FlakySink | None = None
                 ) -> Iterator[tuple[TestClient, Running, ManualClock]]:
    """A one-node service that has collected and scored once."""
    fleet = Fleet({"n001": 8})
    clock = ManualClock(T0)
    app = create_app(lambda: build_pipeline(settings,
                                            Wiring(observers=[observer] if observer else ())),
                     clock=clock, schedule=schedule, collectors=[FleetCollector(fleet, clock)])
    with TestClient(app) as c:
        st = app.state.gpuhealth
        if not schedule:
            st.scheduler.collect_once("fleet")
            assert st.scheduler.score_once() is not None
        yield c, st, clock


def test_readiness_false_exactly_while_ticks_fail(settings: Settings) -> None:
    flaky = FlakySink()
    with _scored_once(settings, observer=flaky) as (c, st, clock):
        assert c.get("/readyz").status_code == 200
        flaky.broken = True
        clock.now += STEP
        assert st.scheduler.score_once() is None
        r = c.get("/readyz")
        assert r.status_code == 503
        assert any("scoring ticks are failing" in x and "out of step" in x
                   for x in r.json()["reasons"])
        text = c.get("/metrics").text
        assert _metric(text, "gpuhealth_score_tick_failures_total") == 1
        flaky.broken = False
        clock.now += STEP
        assert st.scheduler.score_once() is not None
        assert c.get("/readyz").status_code == 200


def test_readiness_false_when_ticks_stop_succeeding(settings: Settings) -> None:
    # The real scheduler: one tick at start, the next an hour away (a wedged scheduler).
    slow = settings.model_copy(update={"service": settings.service.model_copy(
        update={"score_interval_s": 3600.0, "collect_interval_s": 3600.0})})
    with _scored_once(slow, schedule=True) as (c, st, _):
        deadline = time.monotonic() + 10
        while st.pipeline.last_tick_ok is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert st.scheduler.running and c.get("/readyz").status_code == 200
        # as if three intervals and more had passed since the last tick that succeeded
        st.pipeline.last_tick_ok = time.monotonic() - 4 * 3600
        r = c.get("/readyz")
        assert r.status_code == 503
        assert any("no scoring tick has succeeded" in x for x in r.json()["reasons"])
