"""A restart mid-execution: the action is left EXECUTING in the db while the old process's
hook call hangs (as if the process died); the new controller reconciles (NVSentinel #1280,
#1808) instead of running it again blindly."""

from __future__ import annotations

import threading
from collections.abc import Callable

from service.remediation.actions import Action
from tests.remediation_controller.conftest import T0, Rig, migration

MakeRig = Callable[..., Rig]


def _die_mid_execution(rig: Rig, node: str, *, after_drain: bool) -> Action:
    rig.hook.gate = threading.Event()
    rig.hook.hang_after_drain = after_drain
    a = rig.ctl.request(migration(node), T0)
    assert a is not None and rig.hook.entered.wait(5)
    rig.restart()
    assert rig.state(a) == "executing"
    return a


def test_drained_by_us_is_succeeded_without_a_second_execute(make_rig: MakeRig) -> None:
    rig = make_rig(file=True)
    a = _die_mid_execution(rig, "n1", after_drain=True)
    [got] = rig.ctl.reconcile(T0 + 60)
    assert got.state == "succeeded" and got.drained
    rig.run(T0 + 61)
    assert rig.hook.calls == [("inspect", "n1")]  # the new process never executed
    assert rig.events(a)[-1] == "reconciled"
    assert "reconciled after restart" in rig.store.audit(action_id=a.id)[-1].result


def test_not_drained_and_fresh_is_planned_again(make_rig: MakeRig) -> None:
    rig = make_rig(file=True, event_ttl_s=300)
    a = _die_mid_execution(rig, "n1", after_drain=False)
    [got] = rig.ctl.reconcile(T0 + 60)
    assert got.state == "planned"
    rig.run(T0 + 61)  # guards pass on the next step, so it runs once in this process
    assert rig.state(a) == "succeeded"
    assert rig.hook.executed() == ["n1"]
    assert rig.model.nodes["n1"].drained


def test_not_drained_and_old_is_expired(make_rig: MakeRig) -> None:
    rig = make_rig(file=True, event_ttl_s=300)
    a = _die_mid_execution(rig, "n1", after_drain=False)
    [got] = rig.ctl.reconcile(T0 + 3600)
    assert got.state == "expired"
    rig.run(T0 + 3601)
    assert rig.hook.executed() == [] and rig.state(a) == "expired"


def test_node_gone_is_failed(make_rig: MakeRig) -> None:
    rig = make_rig(file=True)
    a = _die_mid_execution(rig, "n1", after_drain=False)
    del rig.model.nodes["n1"]
    rig.ctl.reconcile(T0 + 60)
    assert rig.state(a) == "failed"


def test_reconcile_leaves_live_executions_alone(make_rig: MakeRig) -> None:
    rig = make_rig()
    rig.hook.gate = threading.Event()
    rig.ctl.request(migration("n1"), T0)
    assert rig.ctl.reconcile(T0 + 1) == []
    assert ("inspect", "n1") not in rig.hook.calls
