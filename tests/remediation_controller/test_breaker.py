from __future__ import annotations

from collections.abc import Callable

import pytest

from service.remediation.actions import ActionConflict
from tests.remediation_controller.conftest import T0, Rig, migration

MakeRig = Callable[..., Rig]


def _act_on(rig: Rig, nodes: range, now: float) -> None:
    for i in nodes:
        rig.ctl.request(migration(f"n{i}", alert_id=i, at=now), now)
    rig.run(now)


def test_trips_at_the_absolute_cap(make_rig: MakeRig) -> None:
    rig = make_rig(breaker_max_nodes=5, max_concurrent=10)  # fleet 1000: 10 % is 100 nodes
    _act_on(rig, range(5), T0)
    assert sorted(rig.hook.executed()) == [f"n{i}" for i in range(5)]
    assert not rig.ctl.breaker.is_open
    sixth = rig.ctl.request(migration("n5", alert_id=5, at=T0 + 10), T0 + 10)
    seventh = rig.ctl.request(migration("n6", alert_id=6, at=T0 + 10), T0 + 10)
    rig.run(T0 + 11)
    assert rig.state(sixth) == rig.state(seventh) == "planned"
    assert len(rig.hook.executed()) == 5
    st = rig.ctl.breaker.status(T0 + 11, fleet_size=1000)
    assert st.state == "open" and "max_nodes=5" in st.reason
    assert st.allowed_nodes == 5 and len(st.nodes_in_window) == 5
    assert "breaker_tripped" in [e.event for e in rig.store.audit()]
    assert sixth is not None and rig.events(sixth) == ["requested", "refused"]


def test_trips_at_the_fraction_of_the_fleet(make_rig: MakeRig) -> None:
    rig = make_rig(fleet=20)  # 10 % of 20 nodes: 2
    _act_on(rig, range(2), T0)
    assert len(rig.hook.executed()) == 2
    third = rig.ctl.request(migration("n2", alert_id=2), T0 + 1)
    assert third is not None and rig.state(third) == "planned"
    st = rig.ctl.breaker.status(T0 + 1, fleet_size=20)
    assert st.state == "open" and "3 of 20 nodes" in st.reason and "max_fraction" in st.reason


def test_the_same_node_again_and_an_old_window_do_not_count(make_rig: MakeRig) -> None:
    rig = make_rig(breaker_max_nodes=2, breaker_window_s=600, release_mode="auto")
    _act_on(rig, range(2), T0)
    rig.ctl.release("n1", "alice", T0 + 30)
    rig.run(T0 + 30)
    rig.ctl.request(migration("n1", alert_id=99, at=T0 + 60), T0 + 60)  # n1 again
    rig.run(T0 + 60)
    assert not rig.ctl.breaker.is_open
    _act_on(rig, range(2, 4), T0 + 700)  # n0/n1 left the window
    assert not rig.ctl.breaker.is_open
    assert len(rig.hook.executed()) == 5


def test_unknown_fleet_size_refuses_without_tripping(make_rig: MakeRig) -> None:
    rig = make_rig(fleet=0)
    a = rig.ctl.request(migration("n1"), T0)
    assert a is not None and rig.state(a) == "planned"
    assert not rig.ctl.breaker.is_open
    rig.fleet[0] = 1000
    rig.run(T0 + 5)
    assert rig.state(a) == "succeeded"


def test_stays_tripped_across_a_restart(make_rig: MakeRig) -> None:
    rig = make_rig(file=True)
    assert rig.ctl.breaker.trip("fleet-wide alert storm: 40 % of nodes at level 2+", T0)
    assert not rig.ctl.breaker.trip("another storm", T0 + 1)  # the first reason is kept
    rig.restart()
    a = rig.ctl.request(migration("n1"), T0 + 10)
    rig.run(T0 + 11)
    assert rig.state(a) == "planned" and rig.hook.executed() == []
    st = rig.ctl.breaker.status(T0 + 11)
    assert st.state == "open" and st.reason.startswith("fleet-wide alert storm")


def test_reset_by_an_admin_expires_what_was_queued(make_rig: MakeRig) -> None:
    """NVSentinel #450: after a reset the breaker must not replay the queued, stale events."""
    rig = make_rig(file=True, mode="approve", breaker_max_nodes=1)
    first = rig.ctl.request(migration("n0", alert_id=1), T0)
    assert first is not None
    rig.ctl.approve(first.id, "alice", T0 + 1)
    rig.run(T0 + 1)
    queued = rig.ctl.request(migration("n1", alert_id=2, at=T0 + 20), T0 + 20)
    waiting = rig.ctl.request(migration("n2", alert_id=3, at=T0 + 20), T0 + 20)
    assert queued is not None and waiting is not None
    rig.ctl.approve(queued.id, "alice", T0 + 30)  # refused: would be a second node
    assert rig.ctl.breaker.is_open and rig.state(queued) == "planned"
    rig.restart()
    assert rig.ctl.breaker.reset("admin", T0 + 60)
    assert not rig.ctl.breaker.reset("admin", T0 + 61)  # already closed
    with pytest.raises(ActionConflict, match="before the circuit breaker was reset"):
        rig.ctl.approve(waiting.id, "alice", T0 + 62)
    rig.run(T0 + 62)
    assert rig.state(queued) == rig.state(waiting) == "expired"
    assert rig.hook.executed() == []  # the new process ran nothing stale
    st = rig.ctl.breaker.status(T0 + 63)
    assert (st.state, st.reset_by, st.nodes_in_window) == ("closed", "admin", [])
    fresh = rig.ctl.request(migration("n3", alert_id=4, at=T0 + 70), T0 + 70)
    assert fresh is not None
    rig.ctl.approve(fresh.id, "alice", T0 + 71)  # a fresh window after the reset
    rig.run(T0 + 72)
    assert rig.state(fresh) == "succeeded"
    assert [e.event for e in rig.store.audit() if e.event.startswith("breaker")] == [
        "breaker_tripped", "breaker_reset"]
