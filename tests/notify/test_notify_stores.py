"""The notification half's stores on the shared state, each on SQLite and on PostgreSQL: the
notification log, silences and the `record` receiver's deliveries keep what they kept on one
SQLite file, and two replicas on one PostgreSQL schema see each other's writes."""

from __future__ import annotations

import asyncio

import pytest

from service.notify.message import AlertRef, Message
from service.notify.notification_log import Entry, NotificationLog, Told, news
from service.notify.record import RecordReceiver
from service.notify.silences import SilenceStore
from service.storage.state_db import open_state
from tests.notify.timeline import T0

LABELS = {"alertname": "GpuFailureRisk", "node": "n1", "entity": "n1:gpu0"}


def _rows(target: str, sql: str) -> list[tuple[object, ...]]:
    db = open_state(target)
    try:
        return [tuple(r) for r in db.execute(sql)]
    finally:
        db.close()


# -- notification log --------------------------------------------------------------------------


def test_the_log_keeps_one_entry_per_group_and_forgets_resolved_ones(state_target: str) -> None:
    log = NotificationLog(state_target)
    try:
        assert log.get("pager", "g1") is None
        log.put("pager", "g1", Entry({"fp1": Told(3, 7, "", T0)}, frozenset(), T0))
        firing = {"fp1": Told(3, 7, "", T0), "fp2": Told(2, 8, "ab12", T0 + 60)}
        log.put_many([("pager", "g1", Entry(firing, frozenset({"fp0"}), T0 + 60)),
                      ("email", "g1", Entry({}, frozenset({"fp1"}), T0 + 10))])
        got = log.get("pager", "g1")
        assert got == Entry(firing, frozenset({"fp0"}), T0 + 60)
        assert log.entries() == {("pager", "g1"): got,
                                 ("email", "g1"): Entry({}, frozenset({"fp1"}), T0 + 10)}
        assert _rows(state_target, "SELECT count(*) FROM nflog") == [(2,)]  # replaced, not added
        assert log.open_groups() == [("pager", "g1")]
        assert log.prune(T0 + 5) == 0  # told everything resolved after that
        assert log.prune(T0 + 11) == 1
        assert log.get("email", "g1") is None and log.get("pager", "g1") is not None
    finally:
        log.close()


def test_rows_of_older_releases_read_with_unknown_revision(state_target: str) -> None:
    """A row written before revisions ([level, alert id]) reads back with revision None, its
    time the group's; it matches the same level whatever the revision (no upgrade re-pages),
    and a level change is still news."""
    log = NotificationLog(state_target)
    try:
        with log.transaction() as db:
            db.execute("INSERT INTO nflog (receiver, group_key, firing, resolved, sent_at) "
                       "VALUES (?,?,?,?,?)", ("pager", "g1", '{"fp1": [3, 7]}', "[]", T0))
        got = log.get("pager", "g1")
        assert got == Entry({"fp1": Told(3, 7, None, T0)}, frozenset(), T0)
        assert not news(got, {"fp1": Told(3, 7, "c0ffee", T0 + 5)})
        assert news(got, {"fp1": Told(2, 7, "", T0 + 5)})
        assert news(Entry({"fp1": Told(3, 7, "", T0)}), {"fp1": Told(3, 7, "c0ffee", T0)})
    finally:
        log.close()


def test_two_replicas_share_the_log(pg_dsn: str) -> None:
    """What one replica sent, the other will not send again (and knows to resolve)."""
    a, b = NotificationLog(pg_dsn), NotificationLog(pg_dsn)
    try:
        a.put("pager", "g1", Entry({"fp1": Told(3, 7, "", T0)}, frozenset(), T0))
        assert b.get("pager", "g1") == Entry({"fp1": Told(3, 7, "", T0)}, frozenset(), T0)
        assert b.open_groups() == [("pager", "g1")]
        b.put_many([("pager", "g1", Entry({}, frozenset({"fp1"}), T0 + 300))])
        assert a.get("pager", "g1") == Entry({}, frozenset({"fp1"}), T0 + 300)
        assert a.open_groups() == []
    finally:
        a.close()
        b.close()


# -- silences ----------------------------------------------------------------------------------


def test_silences_mute_until_they_end_or_are_expired(state_target: str) -> None:
    store = SilenceStore(state_target, max_s=3600)
    try:
        s = store.create(["node=n1"], "alice", "reboot", T0, ends_at=T0 + 600)
        later = store.create(["entity=~n1:gpu.*"], "bob", "later", T0, starts_at=T0 + 100,
                             ends_at=T0 + 200)
        with pytest.raises(ValueError, match="at most"):
            store.create(["node=n1"], "alice", "long", T0, ends_at=T0 + 7200)
        assert store.muting(LABELS, T0 + 1) == [s.id]
        assert sorted(store.muting(LABELS, T0 + 150)) == sorted([s.id, later.id])
        gone = store.expire(s.id, "carol", T0 + 300)
        assert (gone.ends_at, gone.expired_by, gone.state(T0 + 300)) == (T0 + 300, "carol",
                                                                        "expired")
        assert store.muting(LABELS, T0 + 301) == []
        with pytest.raises(KeyError):
            store.expire("nope", "carol", T0)
        again = SilenceStore(state_target)  # a restart
        assert {x.id: (x.ends_at, x.expired_by) for x in again.all()} == {
            s.id: (T0 + 300, "carol"), later.id: (T0 + 200, None)}
        again.close()
    finally:
        store.close()


def test_two_replicas_share_silences(pg_dsn: str) -> None:
    """A silence made through one replica's API mutes what the other sends: by the next flush
    (muting reads the database again once per tick), and at once in its API (`all`)."""
    a, b = SilenceStore(pg_dsn), SilenceStore(pg_dsn)
    try:
        assert b.muting(LABELS, T0) == []
        s = a.create(["node=n1"], "alice", "reboot", T0, ends_at=T0 + 600)
        assert [x.id for x in b.all()] == [s.id]
        assert b.muting(LABELS, T0 + 5) == [s.id]
        b.expire(s.id, "bob", T0 + 10)
        assert a.muting(LABELS, T0 + 15) == []
        got = a.get(s.id)
        assert got is not None and got.expired_by == "bob" and got.ends_at == T0 + 10
    finally:
        a.close()
        b.close()


# -- the record receiver -----------------------------------------------------------------------


def _message(at: float, group: str) -> Message:
    ref = AlertRef("fp1", 7, LABELS, {"summary": "n1:gpu0 at risk"}, "firing", 3, 0.95, T0)
    return Message("record", group, {"node": "n1"}, (ref,), at)


def test_every_message_is_on_record_from_every_replica(state_target: str) -> None:
    a, b = RecordReceiver(state_target), RecordReceiver(state_target, name="record-b")
    try:
        assert asyncio.run(a.notify(_message(T0, "g1"))).ok
        assert asyncio.run(b.notify(_message(T0 + 5, "g2"))).ok
        assert [m.group_key for m in a.records] == ["g1"]
    finally:
        a.close()
        b.close()
    got = _rows(state_target, "SELECT at, receiver, reason, group_key, level, status, alerts, "
                              "title FROM deliveries ORDER BY at")
    assert [r[:7] for r in got] == [(T0, "record", "new", "g1", 3, "firing", 1),
                                    (T0 + 5, "record-b", "new", "g2", 3, "firing", 1)]
