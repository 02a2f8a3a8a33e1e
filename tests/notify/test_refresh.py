"""The dispatcher's periodic refresh for receivers whose far end forgets (Alertmanager drops an
alert once its endsAt passed), on the timeline's injected clock: one message per receiver per
interval however many groups, only alerts their groups released, outside rate limits and the
notification log; and an alertmanager receiver whose post fails is retried and counted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.notify.message import Refreshes
from service.notify.receivers.alertmanager import AlertmanagerConfig, AlertmanagerReceiver
from tests.notify.receivers.servers import HttpRecorder, Reply
from tests.notify.timeline import T0, Recorder, Timeline, notify_settings


class RefreshRecorder(Recorder):
    refresh_interval_s = 60.0


def refreshes(r: Recorder) -> list[tuple[float, list[str]]]:
    return [(m.at - T0, sorted(a.labels["entity"] for a in m.alerts))
            for m in r.messages if m.reason == "refresh"]


@pytest.fixture
def tl(state_target: str) -> Iterator[Timeline]:
    settings = notify_settings(receivers={"am": True}, routes=[{"receiver": "am"}],
                               rate_limits={"am": {"per_hour": 1, "burst": 1}})
    t = Timeline(state_target, settings, [RefreshRecorder("am")])
    yield t
    t.close()


def test_one_refresh_per_interval_with_every_released_alert(tl: Timeline) -> None:
    am = tl.receivers["am"]
    assert isinstance(am, RefreshRecorder) and isinstance(am, Refreshes)
    tl.set_level("n1:gpu0", 2, 0)
    tl.set_level("n2:gpu1", 3, 10)
    tl.set_level("n1:gpu3", 2, 100)  # joins a released group: in the next refresh
    tl.set_level("n3:gpu0", 2, 110)  # a new group: held back until its group_wait ends
    tl.set_level("n1:gpu0", 0, 200)  # resolved: no longer refreshed
    tl.run(300)
    assert refreshes(am) == [
        (60, ["n1:gpu0", "n2:gpu1"]),
        (120, ["n1:gpu0", "n1:gpu3", "n2:gpu1"]),
        (180, ["n1:gpu0", "n1:gpu3", "n2:gpu1", "n3:gpu0"]),
        (240, ["n1:gpu3", "n2:gpu1", "n3:gpu0"]),
        (300, ["n1:gpu3", "n2:gpu1", "n3:gpu0"])]
    # The rate limit (one message an hour) held the groups' own messages after the first,
    # not the refreshes; and refreshes never touch the notification log.
    assert [m.reason for m in am.messages if m.reason != "refresh"] == ["new"]
    assert tl.notification.notification_log.get("am", "refresh:am") is None


def test_nothing_firing_means_no_refresh(tl: Timeline) -> None:
    tl.run(600)
    am = tl.receivers["am"]
    assert isinstance(am, RefreshRecorder) and refreshes(am) == []


def test_a_failing_alertmanager_is_retried_counted_and_told_again(state_target: str) -> None:
    """A 500 is retried within the group's budget (the timeline's sleep takes no time); a 400
    gives up, is counted as a failed delivery, and the group's next flush sends it again."""
    settings = notify_settings(receivers={"am": True}, routes=[{"receiver": "am"}],
                               group_interval_s=120.0)
    with HttpRecorder([Reply(500, "busy"), Reply(200), Reply(400, "bad alert")]) as srv:
        am = AlertmanagerReceiver("am", AlertmanagerConfig.model_validate({
            "urls": [srv.url], "refresh_interval_s": 600, "resolve_timeout_s": 1200,
            "read_back": False}))
        tl = Timeline(state_target, settings, [am])
        try:
            tl.set_level("n1:gpu0", 2, 0)
            tl.run(30)  # the group's first message: 500, then delivered
            tl.set_level("n1:gpu0", 3, 40)
            tl.run(150)  # the update at 150: 400, given up
            tl.run(270)  # told again at the next group flush
        finally:
            tl.close()
    sent = [(d.message.at - T0, d.message.reason, d.delivery.ok, d.attempts)
            for d in tl.deliveries]
    assert sent == [(30, "new", True, 2), (150, "update", False, 1), (270, "update", True, 1)]
    assert tl.notification.sender.failed == 1
    levels = [[x["labels"]["level"] for x in r.json()] for r in srv.requests]
    assert levels == [["2"], ["2"], ["3", "2"], ["3", "2"]]
