"""The alertmanager receiver against a real Alertmanager (Debian's `prometheus-alertmanager`,
started on loopback by the test, its route grouped by `node`): our alerts appear in its API
with our labels and fingerprint, group by node, resolve, a level change leaves one alert, and a
silence made in Alertmanager shows on our side, through the receiver and through our API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.notify.message import Delivery, Message
from service.notify.receivers.alertmanager import AlertmanagerConfig, AlertmanagerReceiver
from service.settings import Settings, StorageSettings
from tests.notify.alertmanager_server import ALERTMANAGER, AlertmanagerServer
from tests.notify.receivers.samples import alert, message, resolved, run
from tests.support.fleet import STEP, T0, Fleet, FleetCollector, ManualClock


@pytest.fixture
def am(tmp_path: Path) -> Iterator[AlertmanagerServer]:
    if ALERTMANAGER is None:
        pytest.skip("prometheus-alertmanager is not installed "
                    "(apt-get install prometheus-alertmanager; .ci/run does)")
    srv = AlertmanagerServer(tmp_path / "alertmanager")
    srv.start()
    yield srv
    srv.stop()


def post(am: AlertmanagerServer, *msgs: Message) -> tuple[AlertmanagerReceiver, list[Delivery]]:
    """Every message through one receiver (real clock: Alertmanager compares endsAt with its
    own); the receiver is returned for its read-back."""
    r = AlertmanagerReceiver("am", AlertmanagerConfig.model_validate({"urls": [am.url]}))

    async def go() -> list[Delivery]:
        try:
            return [await r.notify(m) for m in msgs]
        finally:
            await r.aclose()
    got = run(go())
    assert all(d.ok for d in got), got
    return r, got


def by_fp(alerts: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {a["labels"]["fingerprint"]: a for a in alerts}


def test_alerts_appear_with_our_labels_and_group_by_node(am: AlertmanagerServer) -> None:
    post(am, message(alert("gpu3", severity="critical"), alert("gpu5", level=2)),
         message(alert("gpu0", node="node-8"), group="route-1/node-8", node="node-8"))
    found = by_fp(am.alerts())
    assert set(found) == {"fp-node-7-gpu3", "fp-node-7-gpu5", "fp-node-8-gpu0"}
    gpu3 = found["fp-node-7-gpu3"]
    assert gpu3["labels"] == {"alertname": "GpuFailureRisk", "cluster": "c1", "node": "node-7",
                              "entity": "gpu3", "scope": "gpu", "level": "3",
                              "severity": "critical", "fingerprint": "fp-node-7-gpu3"}
    assert gpu3["annotations"]["summary"] == "ECC errors rising"
    assert gpu3["annotations"]["risk"] == "0.93"
    assert gpu3["generatorURL"] == "http://gpuhealth.test/alerts/gpu3"
    assert gpu3["status"]["state"] == "active"
    groups = {g["labels"]["node"]: sorted(a["labels"]["entity"] for a in g["alerts"])
              for g in am.groups()}
    assert groups == {"node-7": ["gpu3", "gpu5"], "node-8": ["gpu0"]}


def test_a_resolve_ends_it_and_a_level_change_leaves_one_alert(am: AlertmanagerServer) -> None:
    first = message(alert("gpu3", level=2), alert("gpu5"))
    up = message(alert("gpu3", level=3), alert("gpu5"), reason="update")
    post(am, first, up)
    found = am.alerts()
    assert sorted((a["labels"]["entity"], a["labels"]["level"]) for a in found) == [
        ("gpu3", "3"), ("gpu5", "3")]  # the level-2 set was resolved, not left to expire
    post(am, resolved(message(alert("gpu3", level=3))))
    assert [a["labels"]["entity"] for a in am.alerts()] == ["gpu5"]
    assert [a["labels"]["entity"] for g in am.groups() for a in g["alerts"]] == ["gpu5"]


def test_a_silence_made_in_alertmanager_is_read_back(am: AlertmanagerServer) -> None:
    m = message(alert("gpu3"), alert("gpu5"))
    post(am, m)
    sid = am.silence({"entity": "gpu3", "node": "node-7"})
    silenced = by_fp(am.alerts())["fp-node-7-gpu3"]["status"]
    assert silenced == {"state": "suppressed", "silencedBy": [sid], "inhibitedBy": []}
    r, _ = post(am, message(*m.alerts, reason="refresh"))  # what the dispatcher sends
    (gpu3,) = r.upstream("fp-node-7-gpu3")
    assert (gpu3.receiver, gpu3.url, gpu3.state, gpu3.silenced_by) == (
        "am", am.url, "suppressed", (sid,))
    (gpu5,) = r.upstream("fp-node-7-gpu5")
    assert (gpu5.state, gpu5.silenced_by) == ("active", ())
    assert r.upstream("fp-unknown") == []


def test_through_the_service_our_api_shows_alertmanagers_silence(
        am: AlertmanagerServer, tmp_path: Path) -> None:
    settings = Settings(storage=StorageSettings(data_dir=tmp_path / "data"), notify={
        "receivers": [{"name": "am", "type": "alertmanager",
                       "config": {"urls": [am.url], "refresh_interval_s": 30}}],
        "route": {"receiver": "am", "group_by": ["node"], "group_wait_s": 0}})
    fleet, clock = Fleet({"n001": 4, "n002": 4}), ManualClock(T0)
    app = create_app(settings, clock=clock, schedule=False,
                     collectors=[FleetCollector(fleet, clock)])
    with TestClient(app) as client:
        st = app.state.gpuhealth
        sender = st.pipeline.notification.sender

        def rounds(n: int) -> None:
            for _ in range(n):
                st.scheduler.collect_once("fleet")
                st.scheduler.score_once()
                clock.now += STEP
            assert sender.wait(30.0)

        rounds(1)
        fleet.set("n001:gpu2", "ecc_dbe_volatile", 1)  # a hard fault: level 3
        rounds(2)
        (ours,) = [a for a in client.get("/v1/alerts").json()["alerts"]
                   if a["entity"] == "n001:gpu2"]
        assert ours["alertname"] == "GpuFailureRisk" and len(ours["fingerprint"]) == 16
        assert ours["labels"].pop("signal")  # the top rule: an annotation to Alertmanager
        assert ours["labels"] == {
            "alertname": "GpuFailureRisk", "cluster": "default", "node": "n001",
            "entity": "n001:gpu2", "scope": "gpu", "gpu": "2", "level": "3",
            "severity": "critical"}
        (theirs,) = [a for a in am.alerts() if a["labels"]["entity"] == "n001:gpu2"]
        assert theirs["labels"]["fingerprint"] == ours["fingerprint"]
        assert ours["labels"] == {k: v for k, v in theirs["labels"].items()
                                  if k != "fingerprint"}
        assert theirs["generatorURL"] == f"http://127.0.0.1:8080/#/alert/{ours['id']}"
        assert theirs["annotations"]["runbook_url"] == (
            "http://127.0.0.1:8080/v1/runbooks/GpuFailureRisk")
        assert ours["alertmanager"] == []  # nothing read back before the first refresh

        sid = am.silence({"node": "n001"})
        rounds(30 // int(STEP) + 1)  # past the refresh interval: re-sent, then read back
        got = client.get(f"/v1/alerts/{ours['id']}").json()
        (seen,) = got["alertmanager"]
        assert (seen["receiver"], seen["url"], seen["state"], seen["silenced_by"]) == (
            "am", am.url, "suppressed", [sid])
        assert got["fingerprint"] == ours["fingerprint"]
