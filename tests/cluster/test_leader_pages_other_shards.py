"""The leader pages every shard's alerts: an alert opened by another shard's writer (a replica
that is not the leader) reaches the receiver through the leader, and so does its resolve,
even when the leader's own shard has nothing firing (bench.cluster found the page missing:
the leader regrouped only after changes of its own)."""

from __future__ import annotations

from pathlib import Path

from service.cluster.roles import LeasedRoles
from service.pipeline import Pipeline
from tests.cluster.test_failover_roles import T0, Dial, _replica, _states
from tests.notify.timeline import Recorder
from tests.pipeline.builders import Rounds


def _shard(tmp: Path, shard: str, target: str, dial: Dial) -> tuple[Pipeline, LeasedRoles,
                                                                      Recorder]:
    return _replica(tmp, f"replica-{shard}", target, dial, shard=shard, ttl_s=30.0,
                    renew_s=10.0)


def test_the_leader_pages_an_alert_another_shard_wrote(tmp_path: Path,
                                                       state_target: str) -> None:
    quiet, failing = Dial(), Dial()
    a, roles_a, rec_a = _shard(tmp_path, "a", state_target, quiet)
    b, roles_b, rec_b = _shard(tmp_path, "b", state_target, failing)
    rounds = Rounds(nodes=2, gpus=2)
    t = T0
    try:
        roles_a.step()
        roles_b.step()
        assert roles_a.leader() and roles_a.writer() and roles_b.writer()
        assert not roles_b.leader()
        for _ in range(2):  # both shards score; nothing fires anywhere
            t += 5
            a.process(rounds.batch(t), t)
            b.process(rounds.batch(t), t)
        failing.risk = 1.0  # shard b's GPU fails: b's writer opens the alert
        for _ in range(3):
            t += 5
            b.process(rounds.batch(t), t)
            a.process(rounds.batch(t), t)
        assert len(b.alerts.open_alerts()) == 1 and rec_b.messages == []
        assert _states(rec_a.messages) == ["firing"], "the leader never paged shard b's alert"
        failing.risk = 0.0
        for _ in range(3):
            t += 5
            b.process(rounds.batch(t), t)
            a.process(rounds.batch(t), t)
        assert b.alerts.open_alerts() == []
        assert _states(rec_a.messages) == ["firing", "resolved"]
        assert rec_b.messages == []
    finally:
        roles_a.close()
        roles_b.close()
        a.close()
        b.close()
