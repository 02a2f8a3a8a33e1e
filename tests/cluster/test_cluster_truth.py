"""`/v1/cluster` and `/readyz` tell the truth about leading (issue 36): which replica holds the
leader lease, at which epoch and since when, the same from either replica; whether this one
leads and since when; whether its sender runs; when each receiver was last told. A leader
whose sender has stopped is not ready."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.cluster_truth import cluster_truth, truth_problems
from service.notify.sender import Sender
from service.settings import Settings
from tests.cluster.test_failover_roles import TTL, Dial, _replica
from tests.pipeline.builders import Rounds
from tests.support.fleet import ManualClock

T0 = 1_700_000_000.0


def test_both_replicas_name_the_leader_and_only_it_says_it_leads(
        tmp_path: Path, state_target: str) -> None:
    dial = Dial()
    a, roles_a, _ = _replica(tmp_path, "a", state_target, dial)
    b, roles_b, _ = _replica(tmp_path, "b", state_target, dial)
    rounds = Rounds(nodes=1, gpus=2)
    try:
        roles_a.step()
        roles_b.step()
        ta, tb = cluster_truth(a), cluster_truth(b)
        assert ta.leader == tb.leader and ta.leader.replica == "a" and ta.leader.epoch == 1
        assert ta.leading and ta.dispatcher_running and ta.remediation_running is False
        assert ta.leading_since == ta.leader.since is not None
        assert not tb.leading and not tb.dispatcher_running and tb.leading_since is None
        assert truth_problems(ta) == truth_problems(tb) == []
        # A page goes out: both replicas read when (the shared notification log).
        dial.risk = 1.0
        for k in range(2):
            a.process(rounds.batch(T0 + 5 * k), T0 + 5 * k)
        assert set(cluster_truth(b).last_notified) == {"record"}
        # a dies without a word: once its leases ran out, b leads, and says so from then.
        time.sleep(TTL + 0.2)
        roles_b.step()
        tb = cluster_truth(b)
        assert tb.leading and tb.leader.replica == "b" and tb.leader.epoch == 2
        assert tb.leading_since is not None and tb.leading_since > ta.leading_since
        assert not cluster_truth(a).leading  # by its own clock, before anyone could take it
    finally:
        roles_a.close()
        roles_b.close()
        a.close()
        b.close()


def test_a_leader_whose_sender_stopped_is_not_ready(tmp_path: Path, state_target: str) -> None:
    a, roles_a, _ = _replica(tmp_path, "a", state_target, Dial())
    try:
        roles_a.step()
        note = a.notification
        assert note is not None
        # A real sending thread, then stopped (the inline sender the test uses has none).
        note.sender = Sender(note.sender.receivers, note.dispatcher, background=True)
        assert cluster_truth(a).dispatcher_running
        note.sender.close()
        truth = cluster_truth(a)
        assert truth.leading and not truth.dispatcher_running
        assert truth_problems(truth) == [
            "this replica leads but its notification sender is not running: nothing would be "
            "sent"]
    finally:
        roles_a.close()
        a.close()


def test_readyz_writes_when_a_receiver_was_told_as_rfc3339(settings: Settings) -> None:
    """The schema says date-time: /readyz writes its times as /v1/cluster does, not as epoch
    floats."""
    clock = ManualClock(T0)
    with TestClient(create_app(settings, clock=clock, schedule=False)) as client:
        st = client.app.state.gpuhealth  # type: ignore[attr-defined]
        for k in range(3):  # a double-bit ECC error: the record receiver is told at once
            clock.now = T0 + 5 * k
            r = client.post("/write", content=f"gpu,host=n1,gpu=0 ecc_dbe_volatile=1i "
                                              f"{round(clock.now * 1e9)}\n")
            assert r.status_code == 204, r.text
            st.scheduler.score_once()
        note = st.pipeline.notification
        assert note is not None and note.sender.wait(10)
        ready = client.get("/readyz").json()["cluster"]
        cluster = client.get("/v1/cluster").json()
    assert ready["last_notified"] == cluster["last_notified"]
    told = ready["last_notified"]["record"]
    assert isinstance(told, str) and told.endswith("Z")
