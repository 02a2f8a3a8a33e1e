"""Rebalancing on a real PostgreSQL and a real InfluxDB: shard b joins, the map moves a node
with an open alert from shard a to shard b. a forgets the node without resolving its alert;
b warm-starts the node's windows from InfluxDB and its writer restores the alert; the leader
(a) does not page it again, and the resolve, when it comes on b's watch, goes out once.
(In-process pipelines on a fake data clock, as tests/cluster/test_failover_roles.py.)"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from collectors.catalog import Scope
from collectors.frames import Entity
from models.detectors.findings import Finding
from models.detectors.view import FleetView
from service.assembly import Wiring, build_parts
from service.cluster.members import Members, Membership
from service.cluster.roles import LeasedRoles
from service.cluster.shard_map import Shard, ShardMap
from service.history.influx.sink import InfluxSink
from service.notify.message import Message
from service.pipeline import Pipeline
from service.runtime.rebalance import WarmGained, follow_membership
from service.settings import Settings
from tests.influx.conftest import influx_server  # noqa: F401  (the real influxd fixture)
from tests.influx.server import InfluxServer
from tests.notify.timeline import Recorder
from tests.pipeline.builders import T0, Rounds

_db = itertools.count()
NODES = 6


class Dial:
    """A hard rule on one GPU (by key) whose risk the test turns up and down."""

    name = "dial"

    def __init__(self, key: str) -> None:
        self.key, self.risk = key, 0.0

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        ents = view.scope(Scope.GPU).entities
        risk = np.array([self.risk if e.key == self.key else 0.0 for e in ents], np.float32)
        return [Finding("dial", Scope.GPU, risk, risk.astype(np.float64), 0.9, "the dial",
                        hard=True)]


class Shard_:
    def __init__(self, tmp: Path, sid: str, dsn: str, influx: dict[str, str] | None,
                 dial: Dial, clock: list[float]) -> None:
        settings = Settings(  # type: ignore[arg-type]
            storage={"data_dir": tmp / sid, **({"influxdb": influx} if influx else {})},
            alerts={"resolve_for_s": 0, "dwell_s": (0, 0, 0)},
            notify={"route": {"receiver": "record", "group_wait_s": 0,
                              "group_interval_s": 0.001}})
        self.record = Recorder("record")
        parts = build_parts(settings, Wiring.offline(
            alert_db=dsn, detectors=[dial], notifiers=[self.record], notify_background=False))
        # Long leases, renewed by the test's steps only: who leads is the test's choice.
        self.roles = LeasedRoles(dsn, replica_id=f"r{sid}", shard_id=sid, ttl_s=60.0,
                                 renew_s=20.0)
        self.roles.membership = parts.members = Membership(
            Members(dsn, ttl_s=60.0), replica_id=f"r{sid}", shard_id=sid,
            url=f"http://{sid}.test:8080", leader=self.roles.leader,
            leader_lease=self.roles.leader_lease)
        parts.cluster = self.roles
        self.p = Pipeline(parts)
        self.warm = follow_membership(self.p, clock=lambda: clock[0])

    def holds(self, key: str) -> bool:
        e = Entity.parse(key)
        return self.p.store[e.scope].slot(e) is not None

    def level(self, key: str) -> int:
        e = Entity.parse(key)
        slot = self.p.store[e.scope].slot(e)
        return 0 if slot is None else int(self.p.machine.level(e.scope)[slot])

    def close(self) -> None:
        self.roles.close()
        self.p.close()


def _states(messages: list[Message]) -> list[str]:
    return [a.status for m in messages for a in m.alerts]


def _moved(nodes: list[str]) -> str:
    both = ShardMap([Shard("a", "http://a.test:8080"), Shard("b", "http://b.test:8080")], "b")
    return next(n for n in nodes if both.is_local(n))


def test_a_moved_node_keeps_its_alert_and_its_history(
        pg_dsn: str, influx_server: InfluxServer, tmp_path: Path) -> None:  # noqa: F811
    rounds = Rounds(nodes=NODES, gpus=2, links=1, ports=1)
    moved = _moved([f"n{i}" for i in range(NODES)])
    key = f"{moved}:gpu0"
    dial = Dial(key)
    clock = [T0]
    influx = {"url": influx_server.url, "database": f"rb{next(_db)}", "raw_retention": "INF"}
    a = Shard_(tmp_path, "a", pg_dsn, influx, dial, clock)
    b: Shard_ | None = None
    try:
        a.roles.step()  # a leads, writes shard a, and publishes a map of itself
        assert a.roles.leader() and a.roles.writer() and a.p.members is not None
        assert a.p.members.map is not None
        dial.risk = 1.0
        for _ in range(12):
            clock[0] += 5
            a.p.process(rounds.batch(clock[0]), clock[0])
        assert _states(a.record.messages) == ["firing"]
        (alert,) = a.p.alerts.open_alerts()
        assert alert.node == moved and alert.level == 3
        (sink,) = [s for s in a.p.sinks if isinstance(s, InfluxSink)]
        assert sink.flush(30)

        b = Shard_(tmp_path, "b", pg_dsn, influx, dial, clock)
        assert isinstance(b.warm, WarmGained)
        b.roles.step()  # b heartbeats and writes shard b; not in the map yet: owns nothing
        assert b.p.members is not None and b.p.members.map is None and b.roles.writer()
        a.roles.step()  # the leader publishes {a, b}; a hands the node over
        b.roles.step()  # b follows: warm start of its gained nodes, then the map in force
        assert not a.holds(key), "a still keeps the windows of a node it handed over"
        assert b.holds(key), "b did not warm-start the node it gained"
        assert b.warm.last is not None and b.warm.last.samples > 0
        # Only the gained nodes' history: the warm start is filtered by host.
        assert b.p.store.registry.nodes and all(b.p.members.owns(n)
                                                for n in b.p.store.registry.nodes)
        assert all(a.p.members.owns(n) != b.p.members.owns(n) for n in
                   (f"n{i}" for i in range(NODES)))

        # Both shards go on. a is sent every node still (writes in flight under the old
        # map): it must neither keep alerting on the node nor resolve its alert.
        for _ in range(3):
            clock[0] += 5
            batch = rounds.batch(clock[0])
            a.p.process(batch, clock[0])
            b.p.process(batch, clock[0])
        assert [x.id for x in a.p.alerts.open_alerts()] == [alert.id], \
            "the handed-over alert was resolved or reopened"
        assert b.level(key) == 3, "b's writer did not restore the alert it gained"
        assert len(a.p.alerts.find()) == 1  # one episode in the shared state
        assert _states(a.record.messages) == ["firing"], "the node's move paged again"
        assert b.record.messages == []  # b is not the leader: it never sends

        dial.risk = 0.0  # the GPU recovers on b's watch: b resolves, the leader tells once
        for _ in range(3):
            clock[0] += 5
            batch = rounds.batch(clock[0])
            b.p.process(batch, clock[0])
            a.p.process(batch, clock[0])
        assert a.p.alerts.open_alerts() == []
        assert _states(a.record.messages) == ["firing", "resolved"]
        assert b.record.messages == []
    finally:
        if b is not None:
            b.close()
        a.close()


def test_without_influxdb_gained_nodes_start_cold_and_say_so(
        pg_dsn: str, tmp_path: Path, caplog: object) -> None:
    import logging

    import pytest

    assert isinstance(caplog, pytest.LogCaptureFixture)
    rounds = Rounds(nodes=NODES, gpus=2, links=1, ports=1)
    moved = _moved([f"n{i}" for i in range(NODES)])
    dial = Dial(f"{moved}:gpu0")
    clock = [T0]
    a = Shard_(tmp_path, "a", pg_dsn, None, dial, clock)
    b: Shard_ | None = None
    try:
        a.roles.step()
        dial.risk = 1.0
        for _ in range(3):
            clock[0] += 5
            a.p.process(rounds.batch(clock[0]), clock[0])
        b = Shard_(tmp_path, "b", pg_dsn, None, dial, clock)
        b.roles.step()
        a.roles.step()
        with caplog.at_level(logging.WARNING, logger="service.runtime.rebalance"):
            b.roles.step()
        assert any("start cold" in r.getMessage() and moved in r.getMessage()
                   for r in caplog.records)
        assert not b.holds(f"{moved}:gpu0")  # nothing to warm it from
        clock[0] += 5
        b.p.process(rounds.batch(clock[0]), clock[0])
        assert b.level(f"{moved}:gpu0") == 3  # the alert is restored all the same
    finally:
        if b is not None:
            b.close()
        a.close()


def test_a_tick_between_the_hand_over_and_the_new_map_resolves_nothing(
        pg_dsn: str, tmp_path: Path) -> None:
    """The handed-over entities are forgotten before the new map is in force (b warm-starts
    meanwhile): a tick in between must not resolve their alerts as silent ones."""
    rounds = Rounds(nodes=NODES, gpus=2, links=1, ports=1)
    moved = _moved([f"n{i}" for i in range(NODES)])
    dial = Dial(f"{moved}:gpu0")
    clock = [T0]
    a = Shard_(tmp_path, "a", pg_dsn, None, dial, clock)
    try:
        a.roles.step()
        dial.risk = 1.0
        for _ in range(3):
            clock[0] += 5
            a.p.process(rounds.batch(clock[0]), clock[0])
        (alert,) = a.p.alerts.open_alerts()
        assert a.p.members is not None
        old = a.p.members.map
        both = ShardMap([Shard("a", "http://a.test:8080"), Shard("b", "http://b.test:8080")],
                        "a")
        a.p.replica.rebalance(old, both)  # as Membership does, before it swaps the map in
        assert a.p.members.map is old and not a.holds(f"{moved}:gpu0")
        clock[0] += 5
        a.p.tick(clock[0])
        assert [x.id for x in a.p.alerts.open_alerts()] == [alert.id]
    finally:
        a.close()
