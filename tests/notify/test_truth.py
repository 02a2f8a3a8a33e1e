"""The alertmanager receiver gets the truth (timeline, injected clock): our inhibitions and
silences mute the pager and email only; every firing alert, muted or not, reaches the
refreshing receiver with its current level, in its groups' messages and in every refresh, and
never as resolved while it fires; a restarted process (or a new leader) refreshes everything
firing at its first tick. And a firing alert whose hard evidence changes is news."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from collectors.catalog import Scope
from models.detectors.findings import Signal
from service.notify.message import Message
from service.stages.alert_machine import Transition
from service.stages.fleet_alerts import FLEET, STORM, FleetAlerts, StormSettings
from tests.notify.timeline import T0, Recorder, Seen, Timeline, notify_settings

ROUTES: list[dict[str, Any]] = [
    {"receiver": "am", "continue": True},
    {"matchers": ["level>=2"], "receiver": "email", "continue": True},
    {"matchers": ["level>=3"], "receiver": "pager"}]
NODES = ["n0", "n1", "n2", "n3"]


class AmRecorder(Recorder):
    refresh_interval_s = 60.0


def settings() -> Any:
    return notify_settings(routes=ROUTES, receivers={"am": True, "email": True, "pager": True})


def timeline(db: str, *, start: float = 0.0) -> Timeline:
    return Timeline(db, settings(), [AmRecorder("am"), Recorder("email"), Recorder("pager")],
                    start=start)


@pytest.fixture
def db(state_target: str) -> str:
    return state_target


def storm(tl: Timeline, at: float) -> None:
    """Three nodes at level 3 and one at 1 (n3:gpu0), then the storm over them."""
    fleet = FleetAlerts(StormSettings(fraction=0.5, min_nodes=3, window_s=600, min_fleet=4))
    for n in NODES[:3]:
        tl.fire(f"{n}:gpu0", 3, at=at)
    tl.fire("n3:gpu0", 1, at=at)
    raised = fleet.step(T0 + at, NODES, np.zeros(4, bool), np.array([3, 3, 3, 1], np.int8),
                        {"n0": 3, "n1": 3, "n2": 3})
    assert [(t.alertname, t.new) for t in raised] == [(STORM, 3)]
    tl.apply_at(at, raised)


def levels(m: Message) -> dict[str, int]:
    return {a.labels["entity"]: a.level for a in m.firing}


def firing_in_am(tl: Timeline) -> dict[str, int]:
    """What the alertmanager receiver holds firing: every message applied in order."""
    held: dict[str, int] = {}
    for m in tl.messages("am"):
        held |= levels(m)
        for a in m.resolved:
            held.pop(a.labels["entity"], None)
    return held


def test_a_storm_mutes_our_pages_never_what_alertmanager_gets(db: str) -> None:
    tl = timeline(db)
    storm(tl, 0)
    tl.set_level("n3:gpu0", 3, at=100)  # escalates while the storm mutes level 3
    tl.run(600)
    assert tl.seen("pager") == [Seen(30, "new", {FLEET: 3})]  # one page for the fleet
    every = {FLEET: 3, "n0:gpu0": 3, "n1:gpu0": 3, "n2:gpu0": 3, "n3:gpu0": 3}
    assert firing_in_am(tl) == every
    am = tl.messages("am")
    assert all(not m.resolved for m in am)  # nothing fires here that it was told resolved
    updates = [(m.at - T0, m.reason, levels(m)) for m in am
               if m.reason == "update"]
    assert updates == [(330, "update", {"n3:gpu0": 3})]  # the escalation, muted or not
    refreshes = [(m.at - T0, levels(m)) for m in am if m.reason == "refresh"]
    assert refreshes[0] == (60, {**every, "n3:gpu0": 1})
    assert all(got == every for t, got in refreshes if t >= 120)  # the level-3 labels
    # Our own receivers: the per-node level-3 alerts are muted by the storm, and say so.
    muted = {fp: why for (rcv, _), g in tl.notification.dispatcher.groups.items()
             if rcv == "pager" for fp, why in g.muted.items()}
    assert sorted(muted.values()) == ["inhibited by FleetStorm on *"] * 4
    assert not any(g.muted for (rcv, _), g in tl.notification.dispatcher.groups.items()
                   if rcv == "am")


def test_a_silence_here_mutes_our_receivers_not_alertmanager(db: str) -> None:
    tl = timeline(db)
    tl.notification.silences.create(["node=n0"], "alice", "reboot", T0 - 10, ends_at=T0 + 7200)
    tl.fire("n0:gpu0", 3, at=0)
    tl.run(200)
    assert tl.seen("pager") == [] and tl.seen("email") == []
    assert [(s.at, s.reason, s.firing) for s in tl.seen("am")] == [
        (30, "new", {"n0:gpu0": 3}), (60, "refresh", {"n0:gpu0": 3}),
        (120, "refresh", {"n0:gpu0": 3}), (180, "refresh", {"n0:gpu0": 3})]


def test_an_alert_is_resolved_to_alertmanager_only_when_it_resolved(db: str) -> None:
    tl = timeline(db)
    storm(tl, 0)
    tl.run(400)
    tl.resolve("n1:gpu0", at=410)
    tl.run(700)
    resolved = [(m.at - T0, sorted(a.labels["entity"] for a in m.resolved))
                for m in tl.messages("am") if m.resolved]
    assert resolved == [(630, ["n1:gpu0"])]
    assert "n1:gpu0" not in firing_in_am(tl) and len(firing_in_am(tl)) == 4


def test_a_restarted_process_refreshes_everything_firing_at_its_first_tick(db: str) -> None:
    before = timeline(db)
    storm(before, 0)
    before.run(100)
    before.close()

    after = timeline(db, start=1000)
    after.run(1000)  # one tick: before any group_wait could pass
    (first,) = after.messages("am")
    assert (first.at - T0, first.reason) == (1000, "refresh")
    assert levels(first) == {FLEET: 3, "n0:gpu0": 3, "n1:gpu0": 3, "n2:gpu0": 3,
                             "n3:gpu0": 1}
    after.run(2000)
    assert after.seen("pager") == []  # nothing changed: no page again
    assert [m.reason for m in after.messages("am") if m.reason != "refresh"] == []


def test_a_new_leader_refreshes_at_once(db: str) -> None:
    tl = timeline(db)
    storm(tl, 0)
    tl.run(100)  # refreshed at 60; the next is due at 120
    tl.notification.dispatcher.restart()  # this replica just became the leader
    tl.run(105)
    assert [(m.at - T0, m.reason, len(m.alerts)) for m in tl.messages("am")][-1] == (
        105, "refresh", 5)


def hard(rule: str, signal: str) -> Signal:
    return Signal(rule, signal, 1.0, 0.0, 1.0, True)


def test_new_hard_evidence_under_a_firing_alert_is_an_update(db: str) -> None:
    tl = timeline(db)
    storm(tl, 0)
    tl.run(100)

    def explain(at: float, *signals: Signal) -> None:
        tl.advance(at)
        t = Transition(Scope.NODE, -1, FLEET, "*", 3, 3, T0 + at, 0.9, alertname=STORM)
        tl.alerts.apply([t], {(STORM, FLEET): list(signals)})
        tl.notification.dispatcher.mark()

    dbe = hard("ecc_dbe", "n0:gpu0 uncorrectable ECC errors")
    explain(150, dbe)
    tl.run(700)
    explain(800, Signal("trend", "risk rising", 0.5, 0.4, 0.5, False), dbe)  # no new hard one
    tl.run(1300)
    explain(1400, dbe, hard("xid", "n1:gpu0 Xid 79"))
    tl.run(1700)
    pages = [(s.at, s.reason, s.firing) for s in tl.seen("pager")]
    assert pages == [(30, "new", {FLEET: 3}), (330, "update", {FLEET: 3}),
                     (1530, "update", {FLEET: 3})]
    (storm_ref,) = tl.messages("pager")[-1].firing
    assert len(storm_ref.revision) == 12
