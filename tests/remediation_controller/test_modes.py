from __future__ import annotations

from collections.abc import Callable

import pytest

from service.remediation.actions import ActionConflict, ActionNotFound
from tests.remediation_controller.conftest import T0, Rig, migration

MakeRig = Callable[..., Rig]


def test_dry_run_stores_the_plan_and_never_executes(make_rig: MakeRig) -> None:
    rig = make_rig(mode="dry_run")
    a = rig.ctl.request(migration("n1"), T0)
    assert a is not None and rig.state(a) == "dry_run"
    assert [s["call"] for s in a.plan] == ["drain n1 reason=gpuhealth:1", "requeue job1.0"]
    assert a.result == {"would_execute": True, "detail": "would execute"}
    for t in (T0 + 1, T0 + 60, T0 + 4000):
        rig.run(t)
    assert rig.hook.executed() == []
    assert not rig.model.nodes["n1"].drained
    [row] = rig.store.audit(action_id=a.id)
    assert (row.event, row.dry_run, row.mode, row.steps) == ("dry_run", True, "dry_run", a.plan)
    assert rig.ctl.breaker.nodes_in_window(T0 + 1) == []  # a dry run acts on nothing


def test_dry_run_says_what_a_guard_would_refuse(make_rig: MakeRig) -> None:
    rig = make_rig(mode="dry_run", opt_out_nodes=["n1"])
    a = rig.ctl.request(migration("n1"), T0)
    assert a is not None and a.result is not None
    assert a.result["would_execute"] is False
    assert "opt_out" in a.result["detail"]


def test_a_plan_that_raises_is_recorded_not_raised(make_rig: MakeRig) -> None:
    rig = make_rig(mode="dry_run")
    rig.hook.raise_on_plan = True
    a = rig.ctl.request(migration("n1"), T0)
    assert a is not None and a.result is not None and a.result["would_execute"] is False
    assert "plan failed: KeyError" in a.result["detail"]
    assert a.plan[0]["ok"] is False


def test_off_records_one_audit_line_and_nothing_else(make_rig: MakeRig) -> None:
    rig = make_rig(mode="off")
    assert rig.ctl.request(migration("n1"), T0) is None
    assert rig.ctl.request(migration("n1"), T0 + 5) is None
    rig.run(T0 + 10)
    assert rig.store.find() == []
    assert [e.event for e in rig.store.audit()] == ["off"]
    assert rig.hook.calls == []


def test_approve_flow(make_rig: MakeRig) -> None:
    rig = make_rig(mode="approve")
    a = rig.ctl.request(migration("n1"), T0)
    assert a is not None and rig.state(a) == "awaiting_approval"
    assert a.plan  # the approver sees what will be called
    rig.run(T0 + 600)  # waiting for a human is not an event-age expiry
    assert rig.state(a) == "awaiting_approval" and rig.hook.executed() == []
    got = rig.ctl.approve(a.id, "alice", T0 + 700)
    assert got.actor == "alice"
    rig.run(T0 + 701)
    assert rig.state(a) == "succeeded"
    assert rig.hook.executed() == ["n1"]
    assert rig.model.nodes["n1"].drained and rig.model.nodes["n1"].jobs == []
    assert rig.events(a) == ["requested", "approved", "started", "succeeded"]
    approved = rig.store.audit(action_id=a.id)[1]
    assert approved.actor == "alice"
    with pytest.raises(ActionConflict, match="not awaiting approval"):
        rig.ctl.approve(a.id, "alice", T0 + 702)
    with pytest.raises(ActionNotFound):
        rig.ctl.approve("act-unknown", "alice", T0)


def test_unapproved_actions_expire(make_rig: MakeRig) -> None:
    rig = make_rig(mode="approve", approval_ttl_s=600)
    a = rig.ctl.request(migration("n1"), T0)
    b = rig.ctl.request(migration("n2"), T0)
    assert a is not None and b is not None
    rig.run(T0 + 601)
    assert rig.state(a) == "expired"
    with pytest.raises(ActionConflict, match="expired"):
        rig.ctl.approve(b.id, "bob", T0 + 602)  # stepped or not, too late is too late
    assert rig.state(b) == "expired"
    assert rig.hook.executed() == []


def test_auto_flow_executes_at_once_on_a_worker(make_rig: MakeRig) -> None:
    rig = make_rig()
    a = rig.ctl.request(migration("n1"), T0)
    assert a is not None and rig.state(a) == "executing"  # started by request itself
    assert rig.ctl.wait(5)
    rig.ctl.step(T0 + 5)
    done = rig.store.get(a.id)
    assert done is not None and done.state == "succeeded" and done.drained
    assert done.result is not None and done.result["moved"] == ["job1.0"]
    last = rig.store.audit(action_id=a.id)[-1]
    assert last.event == "succeeded" and last.actor == "gpuhealth"
    assert [s["call"] for s in last.steps] == ["drain n1", "requeue job1.0"]
    assert last.duration_s is not None and last.duration_s >= 0
    assert rig.recheck.calls == ["n1"]  # fresh data checked right before acting


def test_same_episode_twice_is_one_action(make_rig: MakeRig) -> None:
    rig = make_rig()
    a = rig.ctl.request(migration("n1", alert_id=4), T0)
    b = rig.ctl.request(migration("n1", alert_id=4), T0 + 5)
    assert a is not None and b is not None and a.id == b.id
    rig.run(T0 + 10)
    rig.ctl.request(migration("n1", alert_id=4), T0 + 15)
    rig.run(T0 + 20)
    assert len(rig.store.find()) == 1
    assert rig.hook.executed() == ["n1"]
    c = rig.ctl.request(migration("n1", alert_id=5, at=T0 + 30), T0 + 30)  # a new episode
    assert c is not None and c.id != a.id


def test_status_summarises(make_rig: MakeRig) -> None:
    rig = make_rig()
    rig.ctl.request(migration("n1"), T0)
    rig.run(T0 + 1)
    st = rig.ctl.status(T0 + 2)
    assert st["mode"] == "auto" and st["hook"] == "scheduler-model"
    assert st["counts"]["succeeded"] == 1 and st["counts"]["planned"] == 0
    assert st["breaker"]["state"] == "closed"
    assert st["breaker"]["nodes_in_window"] == ["n1"]
    assert st["concurrency"] == {"running": 0, "max": 2}
