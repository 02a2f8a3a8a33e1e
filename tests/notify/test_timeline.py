"""Timeline tests of the notification pipeline on an injected clock: alerts change at known
times, the clock ticks every 5 s, and the receivers say what they were told and when
(group_wait 30 s, group_interval 300 s, repeat_interval 3600 s unless a test says otherwise)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from collectors.catalog import Scope
from collectors.frames import Entity
from service.notify.config import NotifySettings
from service.notify.message import Delivery, Notifier
from service.notify.notification_log import Told
from service.notify.refs import labels_of
from service.stages.alert_machine import AlertMachine, AlertPolicy
from service.stages.fleet_alerts import FLEET, NODATA, STORM, FleetAlerts, StormSettings
from tests.notify.timeline import (
    T0,
    Flaky,
    MachineFeed,
    Recorder,
    Seen,
    Timeline,
    notify_settings,
)

EMAIL_AND_PAGER: list[dict[str, Any]] = [
    {"matchers": ["level>=2"], "receiver": "email", "continue": True},
    {"matchers": ["level>=3"], "receiver": "pager"}]


MakeTimeline = Callable[..., Timeline]


@pytest.fixture
def mk(state_target: str) -> Iterator[MakeTimeline]:
    """Timelines over one shared-state database (SQLite, then PostgreSQL), closed at the
    end."""
    made: list[Timeline] = []

    def make(settings: NotifySettings, receivers: Sequence[Notifier] = ()) -> Timeline:
        made.append(Timeline(state_target, settings, receivers))
        return made[-1]

    yield make
    for tl in made:
        tl.close()


def email_timeline(mk: MakeTimeline, *, send_resolved: bool = True, **extra: Any) -> Timeline:
    """Level 2 and up to `email` (a Recorder), the rest to `record`."""
    s = notify_settings(routes=[{"matchers": ["level>=2"], "receiver": "email"}],
                        receivers={"email": send_resolved}, **extra)
    return mk(s, [Recorder("email")])


# -- grouping timers ---------------------------------------------------------------------------


def test_group_wait_puts_a_nodes_gpus_in_one_message(mk: MakeTimeline) -> None:
    tl = mk(notify_settings())
    tl.fire("n0:gpu0", 2, at=0)
    tl.fire("n1:gpu0", 2, at=5)
    tl.fire("n0:gpu1", 2, at=10)
    tl.run(29)
    assert tl.seen("record") == []  # group_wait: nothing before 30 s
    tl.run(600)
    got = tl.seen("record")
    assert got == [Seen(30, "new", {"n0:gpu0": 2, "n0:gpu1": 2}),
                   Seen(35, "new", {"n1:gpu0": 2})]
    assert got[0].group != got[1].group
    assert tl.messages("record")[0].group_labels == {"node": "n0"}


def test_an_alert_after_the_first_flush_waits_for_the_group_interval(mk: MakeTimeline) -> None:
    tl = mk(notify_settings())
    tl.fire("n0:gpu0", 2, at=0)
    tl.fire("n0:gpu1", 2, at=10)
    tl.run(30)
    tl.fire("n0:gpu2", 2, at=60)
    tl.run(325)
    assert [m.at for m in tl.seen("record")] == [30]
    tl.run(900)
    assert tl.seen("record") == [
        Seen(30, "new", {"n0:gpu0": 2, "n0:gpu1": 2}),
        Seen(330, "update", {"n0:gpu0": 2, "n0:gpu1": 2, "n0:gpu2": 2})]


def test_an_unchanged_group_repeats_only_after_the_repeat_interval(mk: MakeTimeline) -> None:
    tl = mk(notify_settings())
    tl.fire("n0:gpu0", 2, at=0)
    tl.run(3625)
    assert [m.at for m in tl.seen("record")] == [30]
    tl.run(7300)
    assert tl.seen("record") == [Seen(30, "new", {"n0:gpu0": 2}),
                                 Seen(3630, "repeat", {"n0:gpu0": 2}),
                                 Seen(7230, "repeat", {"n0:gpu0": 2})]


# -- escalation and routing by level -----------------------------------------------------------


def test_an_escalation_is_a_new_message_at_the_next_interval(mk: MakeTimeline) -> None:
    tl = mk(notify_settings())
    a = tl.fire("n0:gpu0", 2, at=0)
    tl.run(60)
    tl.fire("n0:gpu0", 3, at=100)
    tl.run(1000)
    got = tl.seen("record")
    assert got == [Seen(30, "new", {"n0:gpu0": 2}), Seen(330, "update", {"n0:gpu0": 3})]
    entry = tl.entry("record", got[1].group)
    assert entry is not None and entry.firing == {a.fingerprint: Told(3, a.id, "", T0 + 330)}


def test_the_pager_gets_level_3_only_and_hears_it_resolved_when_it_falls_back(
        mk: MakeTimeline) -> None:
    tl = mk(notify_settings(routes=EMAIL_AND_PAGER,
                                      receivers={"email": True, "pager": True}),
                  [Recorder("email"), Recorder("pager")])
    tl.fire("n0:gpu0", 2, at=0)
    tl.fire("n1:gpu0", 3, at=0)
    tl.fire("n2:gpu0", 1, at=0)
    tl.run(60)
    assert tl.seen("pager") == [Seen(30, "new", {"n1:gpu0": 3})]
    assert tl.seen("email") == [Seen(30, "new", {"n0:gpu0": 2}),
                                Seen(30, "new", {"n1:gpu0": 3})]
    assert tl.seen("record") == [Seen(30, "new", {"n2:gpu0": 1})]
    tl.fire("n1:gpu0", 2, at=100)
    tl.run(1500)
    assert tl.seen("pager")[1:] == [Seen(330, "resolved", {}, frozenset({"n1:gpu0"}))]
    (gone,) = tl.messages("pager")[1].alerts
    assert (gone.status, gone.level) == ("resolved", 3)  # as the pager last knew it
    # Email still shows it firing, at its new level.
    assert tl.seen("email")[2:] == [Seen(330, "update", {"n1:gpu0": 2})]
    assert len(tl.seen("record")) == 1


# -- resolve -----------------------------------------------------------------------------------


def test_a_resolve_is_sent_once(mk: MakeTimeline) -> None:
    tl = mk(notify_settings())
    tl.fire("n0:gpu0", 2, at=0)
    tl.run(60)
    tl.resolve("n0:gpu0", at=100)
    tl.run(8000)
    got = tl.seen("record")
    assert got == [Seen(30, "new", {"n0:gpu0": 2}),
                   Seen(330, "resolved", {}, frozenset({"n0:gpu0"}))]
    entry = tl.entry("record", got[0].group)
    assert entry is not None and entry.firing == {}
    assert tl.notification.dispatcher.groups == {}  # nothing left to say: the group is gone


def test_a_partial_resolve_is_sent_and_a_second_episode_resolves_again(mk: MakeTimeline) -> None:
    tl = mk(notify_settings())
    tl.fire("n0:gpu0", 2, at=0)
    tl.fire("n0:gpu1", 2, at=0)
    tl.run(60)
    tl.resolve("n0:gpu1", at=100)
    tl.run(400)
    tl.fire("n0:gpu1", 2, at=400)  # the same instance, a new episode
    tl.run(700)
    tl.resolve("n0:gpu1", at=700)
    tl.run(1000)
    assert tl.seen("record") == [
        Seen(30, "new", {"n0:gpu0": 2, "n0:gpu1": 2}),
        Seen(330, "resolved", {"n0:gpu0": 2}, frozenset({"n0:gpu1"})),
        Seen(630, "update", {"n0:gpu0": 2, "n0:gpu1": 2}),
        Seen(930, "resolved", {"n0:gpu0": 2}, frozenset({"n0:gpu1"})),
    ]


def test_send_resolved_false_gets_no_resolve_only_message(mk: MakeTimeline) -> None:
    tl = email_timeline(mk, send_resolved=False)
    tl.fire("n0:gpu0", 2, at=0)
    tl.fire("n0:gpu1", 2, at=0)
    tl.fire("n1:gpu0", 2, at=0)
    tl.run(60)
    assert len(tl.seen("email")) == 2
    tl.resolve("n0:gpu1", at=100)  # partly resolved
    tl.resolve("n1:gpu0", at=100)  # all resolved
    tl.run(3625)
    assert len(tl.seen("email")) == 2
    tl.run(3630)
    # The repeat shows what fires, never the resolved one.
    assert tl.seen("email")[2:] == [Seen(3630, "repeat", {"n0:gpu0": 2})]
    # The log forgot n1's alert all the same: a re-fire is news again.
    (n1,) = [m for m in tl.messages("email")
             if m.group_labels == {"node": "n1"}]
    entry = tl.entry("email", n1.group_key)
    assert entry is not None and entry.firing == {}
    tl.resolve("n0:gpu0", at=4000)
    tl.run(8000)
    assert len(tl.seen("email")) == 3


def test_a_resolve_reaches_a_send_resolved_receiver(mk: MakeTimeline) -> None:
    tl = email_timeline(mk, send_resolved=True)
    tl.fire("n0:gpu0", 2, at=0)
    tl.fire("n0:gpu1", 2, at=0)
    tl.run(60)
    tl.resolve("n0:gpu1", at=100)
    tl.run(400)
    assert tl.seen("email")[1:] == [Seen(330, "resolved", {"n0:gpu0": 2},
                                         frozenset({"n0:gpu1"}))]


def test_an_alert_that_resolves_within_group_wait_sends_nothing(mk: MakeTimeline) -> None:
    tl = mk(notify_settings())
    tl.fire("n0:gpu0", 2, at=0)
    tl.resolve("n0:gpu0", at=15)
    tl.run(5000)
    assert tl.seen("record") == []
    assert tl.notification.dispatcher.groups == {}


# -- inhibition --------------------------------------------------------------------------------


def test_no_data_from_a_node_mutes_its_gpu_alerts(mk: MakeTimeline) -> None:
    tl = mk(notify_settings())
    fleet = FleetAlerts(StormSettings(), grace_s=0)  # watching since before this test
    nodes = ["n0", "n1"]
    tl.fire("n0:gpu0", 2, at=0)
    tl.fire("n0:gpu1", 1, at=0)
    tl.fire("n0:gpu2", 3, at=0)  # above the node alert's level: not muted by it
    tl.fire("n1:gpu0", 2, at=0)  # another node
    tl.apply_at(0, fleet.step(T0, nodes, np.array([True, False]), np.array([3, 2], np.int8),
                              {}))
    tl.run(60)
    assert tl.seen("record") == [Seen(30, "new", {"n0": 2, "n0:gpu2": 3}),
                                 Seen(30, "new", {"n1:gpu0": 2})]
    (node_alert,) = [a for a in tl.messages("record")[0].alerts if a.labels["entity"] == "n0"]
    assert (node_alert.labels["alertname"], node_alert.labels["scope"]) == (NODATA, "node")
    # Data is back: the node alert resolves and its GPUs' alerts come through.
    tl.apply_at(100, fleet.step(T0 + 100, nodes, np.array([False, False]),
                                np.array([3, 2], np.int8), {}))
    tl.run(1000)
    assert tl.seen("record")[2:] == [
        Seen(330, "update", {"n0:gpu0": 2, "n0:gpu1": 1, "n0:gpu2": 3}, frozenset({"n0"}))]


def test_a_nodes_own_alert_mutes_none_of_its_gpu_alerts(mk: MakeTimeline) -> None:
    # NodeAtRisk (a hot inlet, lost supply redundancy) is a cause of its own beside a GPU's.
    tl = mk(notify_settings())
    tl.set_level("n0", 3, at=0, alertname="NodeAtRisk", scope=Scope.NODE, node="n0")
    tl.fire("n0:gpu0", 2, at=0)
    tl.fire("n0:gpu1", 1, at=0)
    tl.run(60)
    assert tl.seen("record") == [Seen(30, "new", {"n0": 3, "n0:gpu0": 2, "n0:gpu1": 1})]


def test_a_fleet_storm_mutes_per_node_pages_but_not_itself(mk: MakeTimeline) -> None:
    tl = mk(notify_settings(routes=EMAIL_AND_PAGER,
                                      receivers={"email": True, "pager": True}),
                  [Recorder("email"), Recorder("pager")])
    fleet = FleetAlerts(StormSettings(fraction=0.5, min_nodes=3, window_s=600, min_fleet=4))
    nodes = ["n0", "n1", "n2", "n3"]
    for n in nodes[:3]:
        tl.fire(f"{n}:gpu0", 3, at=0)
    tl.fire("n3:gpu0", 2, at=0)
    levels = np.array([3, 3, 3, 2], np.int8)
    storm = fleet.step(T0, nodes, np.zeros(4, bool), levels,
                       {"n0": 3, "n1": 3, "n2": 3, "n3": 2})
    assert [(t.alertname, t.new) for t in storm] == [(STORM, 3)]
    tl.apply_at(0, storm)
    tl.run(600)
    assert tl.seen("pager") == [Seen(30, "new", {FLEET: 3})]
    # Email hears of the storm and of the level-2 alert (a storm mutes pages only), not of
    # the per-node level-3 ones.
    assert sorted((s.at, sorted(s.firing.items())) for s in tl.seen("email")) == [
        (30, [(FLEET, 3)]), (30, [("n3:gpu0", 2)])]
    assert tl.seen("record") == []
    # The storm ends (no node entered level 2 for long): the per-node pages go out.
    ended = fleet.step(T0 + 700, nodes, np.zeros(4, bool), levels, {})
    assert [(t.alertname, t.new) for t in ended] == [(STORM, 0)]
    tl.apply_at(700, ended)
    tl.run(1000)
    after = [s for s in tl.seen("pager") if s.at > 600]
    assert sorted((s.at, s.reason, tuple(s.firing), tuple(s.resolved)) for s in after) == [
        (930, "new", ("n0:gpu0",), ()), (930, "new", ("n1:gpu0",), ()),
        (930, "new", ("n2:gpu0",), ()), (930, "resolved", (), (FLEET,))]


# -- silences ----------------------------------------------------------------------------------


def test_a_silence_mutes_until_it_is_expired_early(mk: MakeTimeline) -> None:
    tl = mk(notify_settings())
    sil = tl.notification.silences.create(["node=n0", "level>=2"], "alice", "reboot n0",
                                          T0 - 10, ends_at=T0 + 7200)
    tl.fire("n0:gpu0", 2, at=0)
    tl.fire("n0:gpu1", 1, at=0)  # level 1: the silence does not select it
    tl.fire("n1:gpu0", 2, at=0)
    tl.run(200)
    assert tl.seen("record") == [Seen(30, "new", {"n0:gpu1": 1}),
                                 Seen(30, "new", {"n1:gpu0": 2})]
    (a,) = [x for x in tl.alerts.open_alerts() if x.entity == "n0:gpu0"]
    assert tl.notification.silences.muting(labels_of(a, "c1"), T0 + 200) == [sil.id]
    expired = tl.notification.silences.expire(sil.id, "bob", T0 + 200)
    assert (expired.expired_by, expired.state(T0 + 201)) == ("bob", "expired")
    tl.notification.dispatcher.mark()
    tl.run(325)
    assert len(tl.seen("record")) == 2  # un-muted at the group's next flush, not before
    tl.run(400)
    assert tl.seen("record")[2:] == [Seen(330, "update", {"n0:gpu0": 2, "n0:gpu1": 1})]


def test_silencing_a_notified_alert_sends_nothing_until_the_silence_ends(mk: MakeTimeline) -> None:
    tl = mk(notify_settings())
    tl.fire("n0:gpu0", 2, at=0)
    tl.run(100)
    tl.notification.silences.create(["entity=n0:gpu0"], "alice", "known bad", T0 + 100,
                                    ends_at=T0 + 5000)
    tl.notification.dispatcher.mark()
    tl.run(4990)
    # Muted is not resolved: no message (an empty "resolved" one would close a page), and no
    # repeat while silenced.
    assert tl.seen("record") == [Seen(30, "new", {"n0:gpu0": 2})]
    tl.run(5200)
    # Once the silence ends the repeat that is due goes out.
    assert tl.seen("record")[1:] == [Seen(5130, "repeat", {"n0:gpu0": 2})]


@pytest.mark.parametrize("matchers,author,comment,hours,why", [
    (["node=n0"], "", "reboot", 1, "author and a comment"),
    (["node=n0"], "alice", "  ", 1, "author and a comment"),
    (["node=n0"], "alice", "reboot", 24 * 7 + 1, "at most"),
    (["node!=n0"], "alice", "reboot", 1, "selects"),
    (["node!=n0", "alertname!~Gpu.*"], "alice", "reboot", 1, "selects"),
    (["node=~.*"], "alice", "reboot", 1, "selects"),
    ([], "alice", "reboot", 1, "at least one matcher"),
])
def test_a_silence_is_refused_without_author_comment_limit_or_selection(
        mk: MakeTimeline, matchers: list[str], author: str, comment: str, hours: float,
        why: str) -> None:
    tl = mk(notify_settings())
    with pytest.raises(ValueError, match=why):
        tl.notification.silences.create(matchers, author, comment, T0,
                                        ends_at=T0 + hours * 3600)
    assert tl.notification.silences.all() == []


# -- acknowledgement ---------------------------------------------------------------------------


def test_an_ack_stops_repeats_until_the_alert_resolves_and_a_new_episode_notifies(
        mk: MakeTimeline) -> None:
    tl = mk(notify_settings())
    a = tl.fire("n0:gpu0", 2, at=0)
    tl.run(60)
    tl.ack(a.id, at=100)
    tl.run(7995)  # two repeat intervals: no repeat
    assert tl.seen("record") == [Seen(30, "new", {"n0:gpu0": 2})]
    tl.resolve("n0:gpu0", at=8000)
    tl.run(8500)
    assert tl.seen("record")[1:] == [Seen(8130, "resolved", {}, frozenset({"n0:gpu0"}))]
    b = tl.fire("n0:gpu0", 2, at=9000)
    assert b.id != a.id and b.acked_by is None
    tl.run(9000 + 3700)
    got = tl.seen("record")[2:]
    assert [(s.at, s.firing) for s in got] == [(9030, {"n0:gpu0": 2}),
                                                (12630, {"n0:gpu0": 2})]
    last = tl.messages("record")[-1].alerts[0]
    assert last.alert_id == b.id and "acknowledged" not in last.annotations


def test_an_ack_of_one_alert_in_a_group_does_not_stop_its_repeats(mk: MakeTimeline) -> None:
    tl = mk(notify_settings())
    a = tl.fire("n0:gpu0", 2, at=0)
    tl.fire("n0:gpu1", 2, at=0)
    tl.run(60)
    tl.ack(a.id, at=100)
    tl.run(3700)
    assert [(s.at, s.reason) for s in tl.seen("record")] == [(30, "new"), (3630, "repeat")]
    shown = {x.labels["entity"]: x.annotations.get("acknowledged")
             for x in tl.messages("record")[-1].alerts}
    assert shown == {"n0:gpu0": "by alice: looking", "n0:gpu1": None}


# -- rate limit and digest ---------------------------------------------------------------------


def test_a_rate_limited_receiver_holds_groups_and_sends_one_digest(mk: MakeTimeline) -> None:
    tl = email_timeline(mk, rate_limits={"email": {"per_hour": 12, "burst": 1}})
    tl.fire("n0:gpu0", 2, at=0)
    tl.fire("n1:gpu0", 2, at=10)
    tl.fire("n2:gpu0", 2, at=20)
    tl.fire("n2:gpu1", 2, at=25)
    tl.run(300)
    assert tl.seen("email") == [Seen(30, "new", {"n0:gpu0": 2})]
    assert tl.notification.dispatcher.held() == {"email": 2}  # nothing dropped
    tl.run(340)  # one token back after 300 s
    got = tl.seen("email")
    assert len(got) == 2 and 330 <= got[1].at <= 335
    digest = tl.messages("email")[1]
    assert digest.reason == "digest" and len(digest.digest_of) == 2
    assert {a.labels["entity"] for a in digest.alerts} == {"n1:gpu0", "n2:gpu0", "n2:gpu1"}
    assert tl.notification.dispatcher.held() == {}
    for key in digest.digest_of:  # the log knows every group the digest told
        assert tl.entry("email", key) is not None
    tl.run(1200)
    assert len(tl.seen("email")) == 2  # and none of them is sent again


# -- retries -----------------------------------------------------------------------------------


def test_a_transient_failure_is_retried_and_logged_only_once_delivered(mk: MakeTimeline) -> None:
    pager = Flaky("email", [Delivery(False, True, "503"), Delivery(False, True, "503")])
    tl = mk(notify_settings(routes=[{"matchers": ["level>=2"], "receiver": "email"}],
                                      receivers={"email": True}), [pager])
    pager.probe = lambda m: tl.entry(m.receiver, m.group_key)
    tl.fire("n0:gpu0", 2, at=0)
    tl.run(600)
    assert len(pager.attempts) == 3 and tl.seen("email") == [Seen(30, "new", {"n0:gpu0": 2})]
    assert pager.probed == [None, None, None]  # nothing logged while it was being tried
    assert tl.sleeps == [1.0, 2.0]  # exponential backoff
    entry = tl.entry("email", pager.messages[0].group_key)
    assert entry is not None and entry.sent_at == T0 + 30
    ((sent),) = [d for d in tl.deliveries if d.message.receiver == "email"]
    assert (sent.delivery.ok, sent.attempts) == (True, 3)


@pytest.mark.parametrize("failure", [
    Delivery(False, False, "400 bad request"),  # permanent: never retried
    Delivery(False, True, "429", retry_after_s=600.0),  # asks for longer than group_interval
])
def test_a_failure_not_retried_now_is_sent_at_the_next_interval(mk: MakeTimeline,
                                                                failure: Delivery) -> None:
    pager = Flaky("email", [failure])
    tl = mk(notify_settings(routes=[{"matchers": ["level>=2"], "receiver": "email"}],
                                      receivers={"email": True}), [pager])
    tl.fire("n0:gpu0", 2, at=0)
    tl.run(325)
    assert len(pager.attempts) == 1 and pager.messages == [] and tl.sleeps == []
    assert tl.entry("email", pager.attempts[0].group_key) is None
    assert [d.delivery.ok for d in tl.deliveries] == [False]
    tl.run(1000)
    # The log never heard of it, so the next flush sends it again (still "new").
    assert len(pager.attempts) == 2 and tl.seen("email") == [Seen(330, "new", {"n0:gpu0": 2})]


# -- flapping through the real state machine ---------------------------------------------------


def test_a_flapping_alert_never_pages_while_it_flaps(mk: MakeTimeline) -> None:
    tl = mk(notify_settings(routes=EMAIL_AND_PAGER,
                                      receivers={"email": True, "pager": True}),
                  [Recorder("email"), Recorder("pager")])
    policy = AlertPolicy(for_s=(0, 0, 0), resolve_for_s=0, dwell_s=(0, 0, 0), long_window_s=0,
                         flap_window_s=1800, flap_enter=6, flap_exit=2)
    ents = [Entity.gpu("n0", 0)]
    steady_from = 1200.0

    def risk(t: float) -> list[float]:  # across the level-3 thresholds every tick, then high
        return [0.95 if t >= steady_from or int(t // 5) % 2 == 0 else 0.5]

    feed = MachineFeed(AlertMachine(policy), ents, risk)
    tl.feeds.append(feed)
    tl.run(steady_from)
    assert len(feed.transitions) >= policy.flap_enter  # it did cross, again and again
    flapping = [t for t, f in feed.flapping_at.items() if f[0]]
    assert flapping and min(flapping) <= 30
    tl.run(4000)
    pages = tl.messages("pager")
    for m in pages:
        assert not feed.flapping_at[m.at - T0][0], f"paged at {m.at - T0} while flapping"
        assert all("flapping" not in a.labels for a in m.firing)
    # Email heard of it, at level 2 and marked flapping ...
    first = tl.messages("email")[0]
    assert (first.at - T0, first.alerts[0].level) == (30, 2)
    assert first.alerts[0].labels.get("flapping") == "true"
    # ... and once the risk stays high long enough for the flapping to clear, it pages.
    assert [a.level for m in pages for a in m.firing] == [3]
    assert pages[0].at - T0 > steady_from
