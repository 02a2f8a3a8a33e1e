"""The scoring half's stores on the shared state, each on SQLite and on PostgreSQL: alerts with
their history, flags and acks, labels and verdicts keep what they kept on one SQLite file, and
two replicas on one PostgreSQL schema see each other's writes (the pipeline tests that build a
whole service stay on SQLite; these are the same stores, store by store)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from collectors.catalog import Scope
from collectors.labels import FailureMode
from models.detectors.findings import Signal
from service.learning.verdicts import VerdictRefused, VerdictStore
from service.stages.alert_machine import Transition
from service.stages.alert_store import AlertStore
from service.stages.label_store import LabelStore, NewLabel
from service.storage.state_db import open_state

T0 = 1_700_000_000.0


def tr(entity: str, old: int, new: int, at: float, risk: float = 0.5, *,
       corroborated: bool = False, alertname: str = "") -> Transition:
    return Transition(Scope.GPU, 0, entity, entity.split(":")[0], old, new, T0 + at, risk,
                      corroborated=corroborated, alertname=alertname)


@dataclass
class Replica:
    """One process's alert, label and verdict stores on the shared state."""

    alerts: AlertStore
    labels: LabelStore
    verdicts: VerdictStore

    @staticmethod
    def open(target: str) -> Replica:
        alerts, labels = AlertStore(target), LabelStore(target)
        return Replica(alerts, labels, VerdictStore(target, alerts, labels))

    def close(self) -> None:
        for store in (self.verdicts, self.labels, self.alerts):
            store.close()


@pytest.fixture
def one(state_target: str) -> Iterator[Replica]:
    r = Replica.open(state_target)
    yield r
    r.close()


@pytest.fixture
def two(pg_dsn: str) -> Iterator[tuple[Replica, Replica]]:
    a, b = Replica.open(pg_dsn), Replica.open(pg_dsn)
    yield a, b
    a.close()
    b.close()


# -- alerts ------------------------------------------------------------------------------------


def test_an_alert_keeps_its_peak_history_flags_and_ack(one: Replica) -> None:
    store = one.alerts
    sig = Signal("dbe", "ecc_dbe_volatile", 1.0, 0.0, 1.0, True)
    ((_, a),) = store.apply([tr("n1:gpu0", 0, 3, 0, 0.9, corroborated=True)],
                            {("", "n1:gpu0"): [sig]})
    assert (a.level, a.peak_level, a.corroborated, a.name) == (3, 3, True, "GpuFailureRisk")
    assert a.explanation[0]["rule"] == "dbe"
    # Two changes at one time (a tie): the history still reads in the order written.
    store.apply([tr("n1:gpu0", 3, 1, 10, 0.4), tr("n1:gpu0", 1, 2, 10, 0.7)], {})
    got = store.get(a.id)
    assert got is not None
    assert (got.level, got.peak_level, got.corroborated) == (2, 3, True)  # peak and proof stay
    assert [h["new_level"] for h in store.history(a.id)] == [3, 1, 2]
    flagged = store.set_flags("n1:gpu0", flapping=True, stale=False, at=T0 + 11)
    assert flagged is not None and flagged.flapping and not flagged.stale
    assert store.set_flags("n9:gpu0", flapping=True, stale=True, at=T0) is None
    acked = store.ack(a.id, "alice", "looking", T0 + 12)
    assert (acked.acked_by, acked.acked_at, acked.ack_comment) == ("alice", T0 + 12, "looking")
    with pytest.raises(KeyError):
        store.ack(999, "alice", "", T0)
    store.apply([tr("n1:gpu0", 2, 0, 20, 0.1)], {})
    with pytest.raises(ValueError, match="resolved"):
        store.ack(a.id, "alice", "late", T0 + 21)
    with pytest.raises(ValueError, match="without an open alert"):
        store.apply([tr("n1:gpu0", 2, 0, 30)], {})
    assert [x.id for x in store.recent(T0 + 20)] == [a.id]
    assert store.recent(T0 + 21) == []


def test_alerts_page_newest_first_with_a_keyset_cursor(one: Replica) -> None:
    store = one.alerts
    for i in range(5):
        store.apply([tr(f"n{i}:gpu0", 0, 1 + i % 3, i)], {})
    first = store.find(limit=2)
    assert [a.entity for a in first] == ["n4:gpu0", "n3:gpu0"]
    rest = store.find(before=(first[-1].started_at, first[-1].id))
    assert [a.entity for a in rest] == ["n2:gpu0", "n1:gpu0", "n0:gpu0"]
    assert [a.entity for a in store.find(level=3)] == ["n2:gpu0"]
    assert [a.entity for a in store.find(node="n1", state="firing")] == ["n1:gpu0"]
    assert len(store.open_alerts()) == 5


def test_two_replicas_see_one_alert_and_its_resolve(two: tuple[Replica, Replica]) -> None:
    a, b = two
    ((_, fired),) = a.alerts.apply([tr("n1:gpu0", 0, 3, 0)], {})
    assert [x.id for x in b.alerts.open_alerts()] == [fired.id]
    b.alerts.ack(fired.id, "bob", "on it", T0 + 5)
    b.alerts.apply([tr("n1:gpu0", 3, 0, 10)], {})
    got = a.alerts.get(fired.id)
    assert got is not None and (got.state, got.acked_by) == ("resolved", "bob")
    assert [h["new_level"] for h in a.alerts.history(fired.id)] == [3, 0]


def test_two_replicas_opening_one_alert_at_once_make_one_episode(
        two: tuple[Replica, Replica]) -> None:
    """Each looks for the open alert and inserts one when there is none, in one write
    transaction: the second waits for the first and finds its alert."""
    start = threading.Barrier(2)

    def fire(r: Replica, level: int) -> None:
        start.wait()
        r.alerts.apply([tr("n1:gpu0", 0, level, level)], {})

    threads = [threading.Thread(target=fire, args=(r, lv)) for r, lv in zip(two, (2, 3),
                                                                           strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (only,) = two[0].alerts.find()
    assert only.peak_level == 3 and len(two[1].alerts.history(only.id)) == 2


# -- labels ------------------------------------------------------------------------------------


def failure(entity: str, at: float, **kw: object) -> NewLabel:
    return NewLabel("failure", T0 + at, entity.split(":")[0], entity, Scope.GPU, "rule:dbe",
                    mode=FailureMode("M1_hbm"), **kw)  # type: ignore[arg-type]


def test_labels_open_close_withdraw_and_page(one: Replica) -> None:
    store = one.labels
    (ep,) = store.add([failure("n1:gpu0", 0, episode=True, alert_id=5)], T0)
    store.add([failure("n2:gpu0", 5, extra={"why": "test"})], T0 + 5)
    assert [lb.id for lb in store.open_episodes()] == [ep.id]
    store.add([NewLabel("repair", T0 + 50, "n1", "n1:gpu0", Scope.GPU, "rule:dbe",
                        action="gpu_reset")], T0 + 50, close=[ep.id])
    assert store.open_episodes() == []
    benign = NewLabel("benign", T0, "n1", "n1:gpu0", Scope.GPU, "verdict", action="false_alarm",
                      end_time=T0 + 60, alert_id=5)
    (v1,) = store.replace_verdict(5, [benign], T0 + 60)
    store.replace_verdict(5, [benign], T0 + 70)  # a second verdict withdraws the first
    assert [lb.kind for lb in store.find()] == ["failure", "benign", "failure", "repair"]
    # n1's failure is overruled; n2's, with no alert, is nobody's to overrule.
    assert [lb.entity for lb in store.find(kind="failure", overruled=False)] == ["n2:gpu0"]
    withdrawn = [lb for lb in store.find(withdrawn=True) if lb.withdrawn_at is not None]
    assert [(lb.id, lb.withdrawn_at) for lb in withdrawn] == [(v1.id, T0 + 70)]
    page = store.find(limit=2)
    assert [lb.time for lb in store.find(after=(page[-1].time, page[-1].id))] == [T0 + 5, T0 + 50]
    assert store.counts() == {"M1_hbm": 1}
    assert len(store.drain()) == 6 and store.drain() == []


def test_two_replicas_share_labels(two: tuple[Replica, Replica]) -> None:
    a, b = two
    (ep,) = a.labels.add([failure("n1:gpu0", 0, episode=True)], T0)
    assert [lb.id for lb in b.labels.open_episodes()] == [ep.id]
    b.labels.add([], T0 + 10, close=[ep.id])
    assert a.labels.open_episodes() == [] and a.labels.counts() == {"M1_hbm": 1}


# -- verdicts ----------------------------------------------------------------------------------


def test_a_verdict_is_kept_logged_and_replaces_the_labels_of_the_last(one: Replica,
                                                                       state_target: str) -> None:
    ((_, alert),) = one.alerts.apply([tr("n1:gpu0", 0, 3, 0)], {})
    with pytest.raises(VerdictRefused, match="needs its mode"):
        one.verdicts.give(alert.id, "failed", actor="alice", via="api", now=T0 + 10)
    with pytest.raises(KeyError):
        one.verdicts.give(999, "unknown", actor="alice", via="api", now=T0 + 10)
    v, labels = one.verdicts.give(alert.id, "failed", actor="alice", via="api", now=T0 + 10,
                                  mode="M1_hbm", comment="RMA")
    assert (v.verdict, v.mode, v.failed_at) == ("failed", "M1_hbm", T0 + 10)
    assert [(lb.kind, lb.source) for lb in labels] == [("failure", "verdict")]
    v2, labels2 = one.verdicts.give(alert.id, "false_alarm", actor="bob", via="link",
                                    now=T0 + 20)
    assert [lb.action for lb in labels2] == ["false_alarm"]
    assert one.verdicts.latest(alert.id) == v2
    assert [x.id for x in one.verdicts.history(alert.id)] == [v.id, v2.id]
    assert [lb.kind for lb in one.labels.find()] == ["benign"]  # the failure withdrawn
    db = open_state(state_target)
    try:
        logged = db.execute("SELECT receiver, group_key, level, status FROM deliveries "
                            "ORDER BY at").fetchall()
    finally:
        db.close()
    assert [tuple(r) for r in logged] == [("verdict", f"alert:{alert.id}", 3, "failed"),
                                          ("verdict", f"alert:{alert.id}", 3, "false_alarm")]


def test_two_replicas_share_verdicts(two: tuple[Replica, Replica]) -> None:
    a, b = two
    ((_, alert),) = a.alerts.apply([tr("n1:gpu0", 0, 3, 0)], {})
    v, _ = b.verdicts.give(alert.id, "maintenance", actor="bob", via="api", now=T0 + 10)
    assert a.verdicts.latest(alert.id) == v
    v2, _ = a.verdicts.give(alert.id, "unknown", actor="alice", via="api", now=T0 + 20)
    assert [x.id for x in b.verdicts.history(alert.id)] == [v.id, v2.id]
    assert b.labels.find() == []  # maintenance's benign span withdrawn by a's verdict
