from __future__ import annotations

import threading
from collections.abc import Callable

from tests.remediation_controller.conftest import T0, Rig, migration

MakeRig = Callable[..., Rig]


def test_max_concurrent(make_rig: MakeRig) -> None:
    rig = make_rig(max_concurrent=2)
    rig.hook.gate = threading.Event()
    a, b, c = (rig.ctl.request(migration(f"n{i}", alert_id=i), T0) for i in range(3))
    for t in (T0 + 5, T0 + 10, T0 + 15):
        rig.ctl.step(t)
    assert rig.state(a) == rig.state(b) == "executing" and rig.state(c) == "planned"
    assert c is not None and rig.events(c) == ["requested", "refused"]  # audited once
    assert "max_concurrent=2" in rig.store.audit(action_id=c.id)[-1].result
    rig.hook.gate.set()
    assert rig.ctl.wait(5)
    rig.ctl.step(T0 + 20)  # collects a and b, then starts c
    assert rig.state(c) == "executing"
    rig.run(T0 + 21)
    assert sorted(rig.hook.executed()) == ["n0", "n1", "n2"]


def test_per_node_attempt_cap(make_rig: MakeRig) -> None:
    """NVSentinel #1543: a remediation that brings its own fault back must not loop."""
    rig = make_rig(max_attempts_per_node=2, attempt_window_s=3600, release_mode="auto")
    for episode, t in ((1, T0), (2, T0 + 600)):  # drain, resume, the fault comes back, ...
        rig.ctl.request(migration("n1", alert_id=episode, at=t), t)
        rig.run(t)
        rig.ctl.release("n1", "gpuhealth", t + 100)
        rig.run(t + 100)
    third = rig.ctl.request(migration("n1", alert_id=3, at=T0 + 1200), T0 + 1200)
    rig.run(T0 + 1201)
    assert rig.hook.executed() == ["n1", "n1"] and rig.state(third) == "planned"
    assert third is not None and "needs a human" in rig.store.audit(action_id=third.id)[-1].result
    rig.run(T0 + 1501)
    assert rig.state(third) == "expired"
    fourth = rig.ctl.request(migration("n1", alert_id=4, at=T0 + 4000), T0 + 4000)
    rig.run(T0 + 4001)  # the first attempt left the window
    assert rig.state(fourth) == "succeeded"


def test_a_node_we_drained_is_not_drained_again(make_rig: MakeRig) -> None:
    rig = make_rig()
    rig.ctl.request(migration("n1", alert_id=1), T0)
    rig.run(T0 + 1)
    again = rig.ctl.request(migration("n1", alert_id=2, at=T0 + 60), T0 + 60)
    rig.run(T0 + 61)
    assert rig.hook.executed() == ["n1"] and rig.state(again) == "planned"
    assert again is not None
    assert "release it first" in rig.store.audit(action_id=again.id)[-1].result


def test_event_ttl(make_rig: MakeRig) -> None:
    rig = make_rig(event_ttl_s=300)
    rig.recheck.verdicts["n1"] = "telemetry 40 s old"
    a = rig.ctl.request(migration("n1"), T0)
    rig.run(T0 + 200)
    assert rig.state(a) == "planned"
    rig.recheck.verdicts.clear()  # fresh again, but too late
    rig.run(T0 + 301)
    assert rig.state(a) == "expired" and rig.hook.executed() == []
    late = rig.ctl.request(migration("n2", at=T0), T0 + 400)  # handed over late
    assert rig.state(late) == "expired" and rig.hook.executed() == []
    got = rig.store.get(late.id if late else "")
    assert got is not None and got.result is not None and "event is 400 s old" in \
        got.result["detail"]


def test_opt_out(make_rig: MakeRig) -> None:
    rig = make_rig(opt_out_nodes=["n1*", "login-?"])
    a = rig.ctl.request(migration("n12"), T0)
    b = rig.ctl.request(migration("n2"), T0)
    rig.run(T0 + 1)
    rig.run(T0 + 301)
    assert rig.state(a) == "expired" and rig.state(b) == "succeeded"
    assert rig.hook.executed() == ["n2"]
    assert a is not None and rig.events(a) == ["requested", "refused", "expired"]
    assert "'n1*'" in rig.store.audit(action_id=a.id)[1].result


def test_recheck_refusing_means_no_action(make_rig: MakeRig) -> None:
    rig = make_rig()
    rig.recheck.verdicts["n1"] = "recovered: risk 0.2 on fresh data"
    rig.recheck.verdicts["n2"] = "telemetry stale: last sample 45 s ago"
    a = rig.ctl.request(migration("n1"), T0)
    b = rig.ctl.request(migration("n2"), T0)
    for t in range(5, 305, 5):
        rig.ctl.step(T0 + t)
    rig.run(T0 + 305)
    assert rig.state(a) == rig.state(b) == "expired" and rig.hook.executed() == []
    assert a is not None and b is not None
    assert rig.events(a) == ["requested", "refused", "expired"]
    assert "recovered" in rig.store.audit(action_id=a.id)[1].result
    assert "stale" in rig.store.audit(action_id=b.id)[1].result
    assert not rig.ctl.breaker.nodes_in_window(T0 + 305)


def test_a_failing_recheck_fails_closed(make_rig: MakeRig) -> None:
    rig = make_rig()
    rig.recheck.raises = True
    a = rig.ctl.request(migration("n1"), T0)
    assert a is not None and rig.state(a) == "planned"
    assert "recheck failed: TimeoutError" in rig.store.audit(action_id=a.id)[-1].result
