"""The delivery column (service/notify/status.py) on the timeline: per alert and receiver,
sent (when, at which level), pending, muted by what, silenced by which silence, failed with
the error, held by a rate limit; the alertmanager receiver is never muted. Then through the
API: GET /v1/alerts and /v1/alerts/{id} carry it beside Alertmanager's own state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.notify.message import Delivery
from service.notify.status import DeliveryStatus
from service.settings import Settings, StorageSettings
from service.stages.alert_store import Alert
from tests.notify.test_truth import AmRecorder, storm, timeline
from tests.notify.timeline import T0, Flaky, Recorder, Timeline, notify_settings
from tests.support.fleet import STEP, Fleet, FleetCollector, ManualClock


def rows(tl: Timeline, a: Alert) -> dict[str, DeliveryStatus]:
    got = tl.notification.deliveries()
    fresh = tl.alerts.get(a.id)
    assert fresh is not None
    return {d.receiver: d for d in got.of(fresh)}


def by_entity(tl: Timeline, entity: str) -> Alert:
    (a,) = [a for a in tl.alerts.find() if a.entity == entity and a.state == "firing"]
    return a


def test_a_storm_reads_muted_for_our_pager_and_sent_to_alertmanager(state_target: str) -> None:
    tl = timeline(state_target)
    storm(tl, 0)
    tl.run(10)
    gpu = by_entity(tl, "n0:gpu0")
    assert {r: d.state for r, d in rows(tl, gpu).items()} == {
        "am": "pending", "email": "muted", "pager": "muted"}
    tl.set_level("n3:gpu0", 3, at=20)
    tl.run(100)
    got = rows(tl, gpu)
    assert got["am"] == DeliveryStatus("am", "sent", sent_at=T0 + 30, level_sent=3)
    assert got["email"] == DeliveryStatus("email", "muted", why="inhibited by FleetStorm on *")
    assert got["pager"] == DeliveryStatus("pager", "muted", why="inhibited by FleetStorm on *")
    fleet = {r: d.state for r, d in rows(tl, by_entity(tl, "fleet")).items()}
    assert fleet == {"am": "sent", "email": "sent", "pager": "sent"}
    tl.close()


def test_silenced_failed_held_and_resolved(state_target: str) -> None:
    s = notify_settings(routes=[{"receiver": "am", "continue": True},
                                {"matchers": ["node=n1"], "receiver": "down", "continue": True},
                                {"matchers": ["level>=3"], "receiver": "pager"}],
                        receivers={"am": True, "down": True, "pager": True},
                        rate_limits={"pager": {"per_hour": 1, "burst": 1}})
    down = Flaky("down", [Delivery(False, False, "HTTP 403: forbidden")] * 10)
    tl = Timeline(state_target, s, [AmRecorder("am"), down, Recorder("pager")])
    sil = tl.notification.silences.create(["node=n0"], "alice", "reboot", T0 - 1,
                                          ends_at=T0 + 7200)
    tl.fire("n0:gpu0", 3, at=0)
    tl.fire("n1:gpu0", 3, at=0)
    tl.fire("n2:gpu0", 3, at=0)
    tl.run(100)
    n0, n1, n2 = (by_entity(tl, f"{n}:gpu0") for n in ("n0", "n1", "n2"))
    assert rows(tl, n0)["pager"] == DeliveryStatus("pager", "silenced", silence_id=sil.id)
    assert rows(tl, n0)["am"].state == "sent"  # silences here are for our own receivers
    assert rows(tl, n1)["down"] == DeliveryStatus("down", "failed", error="HTTP 403: forbidden",
                                                  failed_at=T0 + 30)
    pages = {r["pager"].state for r in (rows(tl, n1), rows(tl, n2))}
    assert pages == {"sent", "held"}  # one page an hour: the other group waits for a digest
    tl.resolve("n2:gpu0", at=200)
    tl.run(600)
    done = tl.alerts.get(n2.id)
    assert done is not None and done.state == "resolved"
    assert rows(tl, done)["am"] == DeliveryStatus("am", "sent", sent_at=T0 + 330)
    tl.close()


def test_the_api_shows_deliveries_beside_alertmanager(tmp_path: Path) -> None:
    settings = Settings(storage=StorageSettings(data_dir=tmp_path / "data"), notify={
        "route": {"receiver": "record", "group_wait_s": 0}})
    fleet, clock = Fleet({"n001": 2}), ManualClock(T0)
    app = create_app(settings, clock=clock, schedule=False,
                     collectors=[FleetCollector(fleet, clock)])
    with TestClient(app) as client:
        st = app.state.gpuhealth
        fleet.set("n001:gpu1", "ecc_dbe_volatile", 1)  # a hard fault: level 3
        for _ in range(3):
            st.scheduler.collect_once("fleet")
            st.scheduler.score_once()
            clock.now += STEP
        (listed,) = client.get("/v1/alerts").json()["alerts"]
        one: dict[str, Any] = client.get(f"/v1/alerts/{listed['id']}").json()
    (d,) = listed["deliveries"]
    assert (d["receiver"], d["state"], d["level_sent"], d["why"]) == ("record", "sent", 3, "")
    assert d["sent_at"].endswith("Z") and d["error"] is None and d["failed_at"] is None
    assert one["deliveries"] == listed["deliveries"]
    assert one["alertmanager"] == []  # Alertmanager's own state stays beside it
