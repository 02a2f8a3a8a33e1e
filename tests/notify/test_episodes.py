"""One alert instance (a fingerprint: alertname and entity) that ends and fires again within a
group interval is two episodes, and each is told whole: the first episode's resolve (with its
own start) and the second's firing go out together, and the second's resolve later names the
second (bench.soak saw a FleetStorm that came back within the interval lose its first resolve,
and its second resolve name a start the receiver never saw fire). Alertmanager, which holds
one alert per label set, gets the new episode only."""

from __future__ import annotations

from service.notify.receivers.alertmanager import payload
from tests.notify.timeline import Recorder, Timeline, notify_settings

PAGER = [{"matchers": ["level>=3"], "receiver": "pager"}]


def _told(tl: Timeline) -> list[list[tuple[str, int, float]]]:
    """Each message to the pager: (status, alert id, start relative to t0) per alert."""
    return [[(a.status, a.alert_id, a.starts_at - tl.t0) for a in m.alerts]
            for m in tl.messages("pager")]


def test_an_instance_that_ends_and_fires_again_within_the_interval_is_told_both_episodes(
        state_target: str) -> None:
    tl = Timeline(state_target, notify_settings(routes=PAGER, receivers={"pager": True}),
                  [Recorder("pager")])
    try:
        first = tl.fire("n0:gpu0", 3, at=0)
        tl.run(60)  # paged after the group's 30-s wait
        tl.resolve("n0:gpu0", at=100)
        second = tl.fire("n0:gpu0", 3, at=200)  # back before the group's next flush (330 s)
        tl.run(400)
        tl.resolve("n0:gpu0", at=500)
        tl.run(1000)
        msgs = tl.messages("pager")
    finally:
        tl.close()
    assert second.id != first.id and second.fingerprint == first.fingerprint
    assert _told(tl) == [
        [("firing", first.id, 0.0)],
        [("firing", second.id, 200.0), ("resolved", first.id, 0.0)],
        [("resolved", second.id, 200.0)]]
    # Alertmanager holds one alert per label set: the new episode continues it.
    body, changes = payload(msgs[1], tl.t0 + 330, 300.0, {})
    assert [a["startsAt"] for a in body] == ["2023-11-14T22:16:40.000Z"]
    assert changes == {first.fingerprint: tuple(sorted(body[0]["labels"].items()))}
