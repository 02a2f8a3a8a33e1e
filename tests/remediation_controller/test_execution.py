from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from service.remediation.actions import ActionConflict
from tests.remediation_controller.conftest import T0, Rig, migration

MakeRig = Callable[..., Rig]


def test_transient_failure_is_retried_after_a_backoff(make_rig: MakeRig) -> None:
    rig = make_rig(retry_backoff_s=30)
    rig.hook.transient_failures = 1
    a = rig.ctl.request(migration("n1"), T0)
    assert rig.ctl.wait(5)
    rig.ctl.step(T0 + 1)
    assert rig.state(a) == "planned"
    rig.run(T0 + 20)  # still backing off
    assert rig.hook.executed() == ["n1"]
    rig.run(T0 + 31)
    assert rig.state(a) == "succeeded" and rig.hook.executed() == ["n1", "n1"]
    got = rig.store.get(a.id if a else "")
    assert got is not None and got.attempts == 2
    assert rig.events(got) == ["requested", "started", "retry_scheduled", "started",
                               "succeeded"]


def test_gives_up_after_max_retries_with_doubling_backoff(make_rig: MakeRig) -> None:
    rig = make_rig(retry_backoff_s=30, max_retries=3)
    rig.hook.transient_failures = 100
    a = rig.ctl.request(migration("n1"), T0)
    assert a is not None
    t = T0
    for _ in range(10):
        t += 1
        rig.run(t)
        got = rig.store.get(a.id)
        assert got is not None
        if got.next_try_at is not None:
            t = got.next_try_at
    got = rig.store.get(a.id)
    assert got is not None and got.state == "failed" and got.attempts == 4
    retries = [e.result for e in rig.store.audit(action_id=a.id) if e.event == "retry_scheduled"]
    gaps = [float(r.rsplit("retry at ", 1)[1]) for r in retries]
    assert [round(b - a) for a, b in zip([T0 + 1, *gaps], gaps, strict=False)] == [30, 61, 121]
    assert len(rig.hook.executed()) == 4


def test_a_permanent_failure_is_not_retried(make_rig: MakeRig) -> None:
    rig = make_rig(nodes=3)
    a = rig.ctl.request(migration("n7"), T0)  # not in the scheduler
    rig.run(T0 + 1)
    rig.run(T0 + 100)
    assert rig.state(a) == "failed" and rig.hook.executed() == ["n7"]


def test_a_raising_hook_fails_the_action(make_rig: MakeRig) -> None:
    rig = make_rig()
    rig.hook.raise_on_execute = True
    a = rig.ctl.request(migration("n1"), T0)
    rig.run(T0 + 1)
    got = rig.store.get(a.id if a else "")
    assert got is not None and got.state == "failed" and got.result is not None
    assert "RuntimeError" in got.result["detail"]


def test_timeout_fails_the_action_and_keeps_its_slot(make_rig: MakeRig) -> None:
    """NVSentinel #1808: nothing stays "in progress" forever."""
    rig = make_rig(action_timeout_s=900, max_concurrent=1)
    rig.hook.gate = threading.Event()
    rig.hook.hang_after_drain = True
    a = rig.ctl.request(migration("n1"), T0)
    b = rig.ctl.request(migration("n2", alert_id=2, at=T0 + 850), T0 + 850)
    rig.ctl.step(T0 + 901)
    assert rig.state(a) == "failed"
    assert rig.state(b) == "planned"  # the hung call still holds the only slot
    assert rig.hook.entered.wait(5)
    rig.hook.gate.set()
    assert rig.ctl.wait(5)
    rig.run(T0 + 950)
    got = rig.store.get(a.id if a else "")
    assert got is not None and got.state == "failed" and got.drained  # the late drain counts
    assert rig.events(got)[-2:] == ["timed_out", "late_result"]
    assert rig.state(b) == "succeeded"


def test_abort(make_rig: MakeRig) -> None:
    rig = make_rig(mode="approve")
    waiting = rig.ctl.request(migration("n1"), T0)
    running = rig.ctl.request(migration("n2", alert_id=2), T0)
    assert waiting is not None and running is not None
    assert rig.ctl.abort(waiting.id, "bob", T0 + 1).state == "aborted"
    rig.hook.gate = threading.Event()
    rig.hook.transient_failures = 1
    rig.ctl.approve(running.id, "alice", T0 + 2)
    got = rig.ctl.abort(running.id, "bob", T0 + 3)
    assert got.state == "executing" and got.abort_requested  # a scheduler call runs to its end
    rig.hook.gate.set()
    rig.run(T0 + 4)
    rig.run(T0 + 100)
    assert rig.state(running) == "aborted"
    assert rig.hook.executed() == ["n2"]  # a transient failure after abort is not retried
    for a in (waiting, running):
        with pytest.raises(ActionConflict, match="nothing to abort"):
            rig.ctl.abort(a.id, "bob", T0 + 101)
