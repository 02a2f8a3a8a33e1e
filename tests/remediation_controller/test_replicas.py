"""Two replicas on one shared state (a PostgreSQL schema, or one SQLite file): two action
stores and controllers that both see the same planned migration never both run it, and they
share one breaker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.remediation.actions import (
    Action,
    ActionConflict,
    ActionState,
    ActionStore,
    AuditEntry,
    action_id,
)
from service.remediation.config import RemediationSettings
from service.remediation.controller import RemediationController
from tests.remediation_controller.conftest import T0, migration
from tests.remediation_controller.scheduler_model import (
    FreshTelemetry,
    SchedulerModel,
    SchedulerModelHook,
)


class Replica:
    def __init__(self, target: str, model: SchedulerModel, **settings: object) -> None:
        self.store = ActionStore(target)
        self.hook = SchedulerModelHook(model)
        self.ctl = RemediationController(
            self.store, self.hook, RemediationSettings.model_validate(
                {"mode": "auto", "max_concurrent": 50, "breaker_max_nodes": 50, **settings}),
            FreshTelemetry(), lambda: 1000)

    def close(self) -> None:
        self.ctl.close()
        self.store.close()


def _planned(node: str, episode: int) -> Action:
    aid = action_id(node, f"fp-{node}", "migrate", str(episode))
    return Action(id=aid, kind="migrate", episode=str(episode), node=node, alert_id=episode,
                  fingerprint=f"fp-{node}", summary="ecc", mode="auto",
                  state=ActionState.PLANNED, requested_at=T0, deadline=T0 + 300)


@pytest.fixture
def pair(state_target: str) -> Iterator[tuple[Replica, Replica]]:
    model = SchedulerModel(40)
    a, b = Replica(state_target, model), Replica(state_target, model)
    yield a, b
    a.close()
    b.close()


def test_a_stale_snapshot_cannot_start_an_action(state_target: str) -> None:
    one, two = ActionStore(state_target), ActionStore(state_target)
    try:
        a, _ = one.insert(_planned("n1", 1), AuditEntry(at=T0, actor="t", event="requested"))
        aid = a.id
        seen = two.get(aid)
        assert seen == a
        one.update(aid, expect=a, state=ActionState.EXECUTING, attempts=1)
        with pytest.raises(ActionConflict, match="moved on to executing"):
            two.update(aid, expect=seen, state=ActionState.EXECUTING, attempts=1)
        got = two.get(aid)
        assert got is not None and got.attempts == 1
    finally:
        one.close()
        two.close()


def test_two_replicas_never_run_the_same_action_twice(pair: tuple[Replica, Replica],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = pair
    nodes = [f"n{i}" for i in range(20)]
    # Twenty migrations planned (requested while neither replica could start them) ...
    for i, node in enumerate(nodes):
        a.store.insert(_planned(node, i), AuditEntry(at=T0, actor="t", event="requested"))
    # ... and B read them as planned just before A started them all: the race, held open.
    stale = b.store.open_actions()
    assert {x.state for x in stale} == {ActionState.PLANNED} and len(stale) == 20
    a.ctl.step(T0)
    assert a.ctl.wait(5)
    monkeypatch.setattr(b.store, "open_actions", lambda: stale)
    b.ctl.step(T0)
    assert b.ctl.wait(5)
    monkeypatch.undo()
    for r in (a, b, a, b):
        r.ctl.step(T0 + 1)
        assert r.ctl.wait(5)
    assert b.hook.executed() == []
    assert sorted(a.hook.executed()) == sorted(nodes)  # each node once
    done = b.store.find(state=ActionState.SUCCEEDED, limit=100)
    assert len(done) == 20 and all(x.attempts == 1 for x in done)
    started = [e for e in b.store.audit(limit=10_000) if e.event == "started"]
    assert len(started) == 20
    # The breaker's window is one: both replicas count the 20 nodes once.
    assert a.ctl.breaker.nodes_in_window(T0 + 1) == sorted(nodes)
    assert b.ctl.breaker.nodes_in_window(T0 + 1) == sorted(nodes)


def test_the_breaker_is_shared(pair: tuple[Replica, Replica]) -> None:
    a, b = pair
    assert a.ctl.breaker.trip("alert storm", T0)
    assert b.ctl.breaker.is_open and b.ctl.breaker.status(T0).reason == "alert storm"
    assert not b.ctl.breaker.trip("again", T0 + 1)  # the first reason stays
    b.ctl.request(migration("n1", alert_id=1, at=T0 + 2), T0 + 2)
    b.ctl.step(T0 + 2)
    assert b.hook.executed() == []  # held by the breaker the other replica tripped
    assert b.ctl.breaker.reset("alice", T0 + 3)
    assert not a.ctl.breaker.is_open and a.ctl.breaker.last_reset_at == T0 + 3
    assert not a.ctl.breaker.reset("bob", T0 + 4)
    events = [e.event for e in a.store.audit() if e.event.startswith("breaker")]
    assert events == ["breaker_tripped", "breaker_reset"]


def test_audit_is_append_only_on_postgres(pg_dsn: str) -> None:
    import psycopg

    store = ActionStore(pg_dsn)
    store.append_audit(AuditEntry(at=T0, actor="gpuhealth", event="requested"))
    ActionStore(pg_dsn).close()  # a second replica starting replaces the guard, keeps it
    with psycopg.connect(pg_dsn, autocommit=True) as raw:
        for sql in ("UPDATE audit SET actor = 'mallory'", "DELETE FROM audit"):
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                raw.execute(sql)
    assert [e.actor for e in store.audit()] == ["gpuhealth"]
    store.close()
