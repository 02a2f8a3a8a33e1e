"""Two replicas on one shared state: only the writer persists alerts and only the leader
pages; when the one holding both dies without a word, the other takes over once the leases
ran out and goes on from the shared state: the page is not sent again and the resolve is not
lost. (In one process on a fake data clock; bench.cluster does it with real processes.)"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from collectors.catalog import Scope
from models.detectors.findings import Finding
from models.detectors.view import FleetView
from service.assembly import Wiring, build_parts
from service.cluster.roles import LeasedRoles
from service.notify.message import Message
from service.pipeline import Pipeline
from service.settings import Settings, StorageSettings
from tests.notify.timeline import Recorder
from tests.pipeline.builders import Rounds

T0 = 1_700_000_000.0
TTL = 1.0


class Dial:
    """A hard rule on the first GPU whose risk the test turns up and down."""

    name = "dial"

    def __init__(self) -> None:
        self.risk = 0.0

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        n = len(view.scope(Scope.GPU).entities)
        risk = np.zeros(n, np.float32)
        risk[:1] = self.risk
        return [Finding("dial", Scope.GPU, risk, risk.astype(np.float64), 0.9, "the dial",
                        hard=True)]


def _replica(tmp: Path, name: str, target: str, dial: Dial, *, shard: str = "default",
             ttl_s: float = TTL, renew_s: float = 0.3) -> tuple[Pipeline, LeasedRoles,
                                                                Recorder]:
    """A replica (`name`) of `shard` on the shared state `target`, paging into a Recorder."""
    settings = Settings(storage=StorageSettings(data_dir=tmp / name),
                        alerts={"resolve_for_s": 0, "dwell_s": (0, 0, 0)},
                        notify={"route": {"receiver": "record", "group_wait_s": 0,
                                          "group_interval_s": 0.001}})
    record = Recorder("record")
    parts = build_parts(settings, Wiring.offline(alert_db=target, detectors=[dial],
                                                 notifiers=[record], notify_background=False))
    roles = LeasedRoles(target, replica_id=name, shard_id=shard, ttl_s=ttl_s, renew_s=renew_s)
    parts.cluster = roles
    return Pipeline(parts), roles, record


def _states(messages: list[Message]) -> list[str]:
    return [a.status for m in messages for a in m.alerts]


@pytest.mark.slow
def test_the_standby_takes_over_without_a_second_page_or_a_lost_resolve(
        tmp_path: Path, state_target: str) -> None:
    dial = Dial()
    a, roles_a, rec_a = _replica(tmp_path, "a", state_target, dial)
    b, roles_b, rec_b = _replica(tmp_path, "b", state_target, dial)
    rounds = Rounds(nodes=2, gpus=2)
    t = T0
    try:
        roles_a.step()
        roles_b.step()
        assert roles_a.writer() and roles_a.leader() and not roles_b.writer()
        dial.risk = 1.0
        for _ in range(3):  # both ingest and score the same rounds
            t += 5
            a.process(rounds.batch(t), t)
            b.process(rounds.batch(t), t)
        assert _states(rec_a.messages) == ["firing"] and rec_b.messages == []
        (alert,) = a.alerts.open_alerts()
        assert alert.level == 3 and len(b.alerts.find()) == 1  # one episode, in shared state

        # a dies: no release, no more renewals. b takes both roles once they ran out.
        time.sleep(TTL + 0.3)
        roles_b.step()
        assert roles_b.writer() and roles_b.leader()
        for _ in range(3):
            t += 5
            b.process(rounds.batch(t), t)
        assert rec_b.messages == [], "the new leader paged again what the old one had paged"
        assert [x.id for x in b.alerts.open_alerts()] == [alert.id]  # the same episode

        dial.risk = 0.0  # the GPU recovers on b's watch: its resolve goes out from b
        for _ in range(3):
            t += 5
            b.process(rounds.batch(t), t)
        assert _states(rec_b.messages) == ["resolved"]
        assert b.alerts.open_alerts() == []
        assert len(b.alerts.find()) == 1
    finally:
        roles_a.close()
        roles_b.close()
        a.close()
        b.close()
