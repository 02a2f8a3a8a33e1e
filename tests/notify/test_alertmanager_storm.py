"""A storm against a real Alertmanager, in real time with short timings (resolve_timeout 6 s,
refreshed every 2 s, run for three resolve_timeouts): a FleetStorm at level 3 over per-node
level-3 hard faults, our default inhibit rules active and our own webhook pager beside it.
Our pager gets the one fleet page; Alertmanager holds every critical, read back through its
API at every tick: active, or suppressed by its own inhibit rule (ours mirrored there), never
absent and never resolved while it fires here, including a GPU that escalates from level 1
to 3 while the storm mutes it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from collectors.catalog import Scope
from models.detectors.findings import Signal
from service.notify.receivers.alertmanager import AlertmanagerConfig, AlertmanagerReceiver
from service.notify.receivers.webhook import WebhookConfig, WebhookReceiver
from service.stages.alert_machine import Transition
from service.stages.fleet_alerts import FLEET, STORM, FleetAlerts, StormSettings
from tests.notify.alertmanager_server import ALERTMANAGER, AlertmanagerServer
from tests.notify.receivers.servers import HttpRecorder
from tests.notify.timeline import Timeline, notify_settings

# Ours, mirrored in Alertmanager: a storm suppresses the per-node criticals there too.
INHIBIT = """inhibit_rules:
  - source_matchers: [alertname="FleetStorm"]
    target_matchers: [severity="critical", alertname!="FleetStorm"]
"""
RESOLVE_S, REFRESH_S, STEP_S = 6.0, 2.0, 0.5
NODES = ["n0", "n1", "n2", "n3"]


@pytest.fixture
def am(tmp_path: Path) -> Iterator[AlertmanagerServer]:
    if ALERTMANAGER is None:
        pytest.skip("prometheus-alertmanager is not installed "
                    "(apt-get install prometheus-alertmanager; .ci/run does)")
    srv = AlertmanagerServer(tmp_path / "alertmanager", INHIBIT)
    srv.start()
    yield srv
    srv.stop()


@pytest.mark.slow
def test_every_critical_stays_in_alertmanager_through_a_storm(
        am: AlertmanagerServer, state_target: str) -> None:
    settings = notify_settings(
        routes=[{"receiver": "am", "continue": True},
                {"matchers": ["level>=3"], "receiver": "pager"}],
        receivers={"am": True, "pager": True},
        group_wait_s=1.0, group_interval_s=2.0)
    with HttpRecorder() as hook:
        receivers = [
            AlertmanagerReceiver("am", AlertmanagerConfig.model_validate(
                {"urls": [am.url], "resolve_timeout_s": RESOLVE_S,
                 "refresh_interval_s": REFRESH_S})),
            WebhookReceiver("pager", WebhookConfig.model_validate({"url": hook.url}))]
        tl = Timeline(state_target, settings, receivers, t0=time.time(), step_s=STEP_S)
        try:
            checks = storm_in_real_time(tl, am, until=3 * RESOLVE_S)
        finally:
            tl.close()
        pages = [r.json() for r in hook.requests]
    assert checks >= 20
    # Our pager: one page, for the fleet; the per-node criticals are muted here.
    assert [(p["reason"], [a["labels"]["alertname"] for a in p["alerts"]]) for p in pages] == [
        ("new", [STORM])]


def storm_in_real_time(tl: Timeline, am: AlertmanagerServer, until: float) -> int:
    fleet = FleetAlerts(StormSettings(fraction=0.5, min_nodes=3, window_s=600, min_fleet=4))
    for n in NODES[:3]:
        tl.fire(f"{n}:gpu0", 3, at=0)
    tl.fire("n3:gpu0", 1, at=0)
    raised = fleet.step(tl.abs(0), NODES, np.zeros(4, bool), np.array([3, 3, 3, 1], np.int8),
                        {"n0": 3, "n1": 3, "n2": 3})
    tl.apply_at(0, raised)
    # The storm's page lists the hard faults under it.
    tl.alerts.apply([Transition(Scope.NODE, -1, FLEET, "*", 3, 3, tl.abs(0), 0.9,
                                alertname=STORM)],
                    {(STORM, FLEET): [Signal("ecc_dbe", f"{n}:gpu0 uncorrectable ECC", 1.0, 0.0,
                                             1.0, True) for n in NODES[:3]]})
    escalated = False
    checks = 0
    while tl.next <= until:
        if not escalated and tl.next >= 3.0:
            tl.set_level("n3:gpu0", 3, at=tl.next)  # escalates while the storm mutes it
            escalated = True
        wait = tl.abs(tl.next) - time.time()
        if wait > 0:
            time.sleep(wait)
        t = tl.next
        tl.run(t)
        if t >= 2.0:  # past the first group_wait and its post
            check(tl, am.alerts(), t)
            checks += 1
    return checks


def check(tl: Timeline, found: list[dict[str, Any]], t: float) -> None:
    ours = {a.fingerprint: a for a in tl.alerts.open_alerts()}
    now = time.time()
    theirs: dict[str, list[dict[str, Any]]] = {}
    for x in found:
        theirs.setdefault(x["labels"]["fingerprint"], []).append(x)
    for fp, a in ours.items():
        if a.level < 3 or (a.entity == "n3:gpu0" and t < 6.0):  # its update: by 5 s
            continue
        got = theirs.get(fp, [])
        assert got, f"t={t}: {a.name} {a.entity} fires at {a.level} here, absent there"
        (one,) = [x for x in got if x["labels"]["level"] == str(a.level)]
        assert one["labels"]["severity"] == "critical"
        assert one["endsAt"] > _rfc3339(now), f"t={t}: {a.entity} resolved there"
        state = one["status"]["state"]
        if a.name == STORM:
            assert state == "active", f"t={t}: the storm is {state}"
        else:
            assert state == "suppressed" and one["status"]["inhibitedBy"], (
                f"t={t}: {a.entity} is {state}, not suppressed by the storm")
        if a.entity == "n3:gpu0":  # the level-1 label set it was sent with is over
            assert [x["labels"]["level"] for x in got] == ["3"], f"t={t}: {got}"


def _rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts))
