"""Message identity against a real webhook receiver on loopback (the timeline's pipeline, on
SQLite and PostgreSQL): each message is one delivery of one state with an id of its own; a
process that dies after the receiver answered but before the log was written sends the same
body under the same id after its restart; what was answered and logged is never sent again.
The crash is the process stopping dead inside the log write (an exception nothing catches)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from service.notify.notification_log import NotificationLog
from service.notify.outbox import decode_message, encode_message
from service.notify.receivers.webhook import WebhookConfig, WebhookReceiver
from tests.notify.receivers.samples import alert, message
from tests.notify.receivers.servers import HttpRecorder, Request
from tests.notify.timeline import Timeline, notify_settings

PAGER = [{"matchers": ["level>=3"], "receiver": "pager"}]


class Crash(BaseException):
    """The process dies here: nothing after it runs."""


@pytest.fixture
def srv() -> Iterator[HttpRecorder]:
    with HttpRecorder() as s:
        yield s


def paging(db: str, url: str, *, start: float = 0.0) -> Timeline:
    hook = WebhookReceiver("pager", WebhookConfig.model_validate(
        {"url": url, "secret": "0123456789abcdef0123"}))
    tl = Timeline(db, notify_settings(routes=PAGER, receivers={"pager": True}), [hook],
                  start=start)
    tl.notification.sender.concurrency = 1  # one message at a time: a crash between two
    return tl


def posts(srv: HttpRecorder) -> list[Request]:
    return [r for r in srv.requests if r.method == "POST"]


def crash_on_write(tl: Timeline, nth: int) -> None:
    """The `nth` write of answered messages to the log dies (the receiver has answered)."""
    log = tl.notification.notification_log
    real = log.settle
    calls = Counter[str]()

    def settle(entries: list[Any], done: Iterable[str]) -> None:
        done = list(done)
        if entries:
            calls["n"] += 1
            if calls["n"] == nth:
                raise Crash
        real(entries, done)

    log.settle = settle  # type: ignore[method-assign]


def test_a_crash_after_the_answer_resends_the_same_body_under_the_same_id(
        state_target: str, srv: HttpRecorder) -> None:
    before = paging(state_target, srv.url)
    for n in ("n0", "n1", "n2"):
        before.fire(f"{n}:gpu0", 3, at=0)
    crash_on_write(before, 2)
    with pytest.raises(Crash):
        before.run(30)  # three pages due: the first is answered and logged, the second
        # answered when the process dies writing it, the third never left
    before.close()
    first = posts(srv)
    assert len(first) == 2

    after = paging(state_target, srv.url, start=100)
    after.run(1000)
    after.close()
    every = posts(srv)
    by_id: dict[str, list[bytes]] = {}
    for r in every:
        by_id.setdefault(r.headers["webhook-id"], []).append(r.body)
    # Three pages, three ids; only the one answered but not logged came twice, identical.
    assert sorted(len(v) for v in by_id.values()) == [1, 1, 2]
    (twice,) = [v for v in by_id.values() if len(v) == 2]
    assert twice[0] == twice[1]
    logged, crashed = (r.headers["webhook-id"] for r in first)
    assert len(by_id[logged]) == 1 and len(by_id[crashed]) == 2
    groups = {r.json()["groupKey"] for r in every}
    assert len(groups) == 3
    log = NotificationLog(state_target)
    try:
        assert log.staged() == []  # the outbox is empty once everything was answered
        assert len(log.open_groups()) == 3
    finally:
        log.close()


def test_nothing_answered_and_logged_is_sent_again_after_a_stop(
        state_target: str, srv: HttpRecorder) -> None:
    before = paging(state_target, srv.url)
    for n in ("n0", "n1", "n2"):
        before.fire(f"{n}:gpu0", 3, at=0)
    before.run(100)
    before.close()
    after = paging(state_target, srv.url, start=200)
    after.run(1000)
    after.close()
    ids = Counter(r.headers["webhook-id"] for r in posts(srv))
    assert sorted(ids.values()) == [1, 1, 1]


def test_the_same_state_again_within_an_episode_is_another_message(
        state_target: str, srv: HttpRecorder) -> None:
    """Paged at 3, down to 2 (resolved for the pager route), at 3 again, twice: pages that
    say the same thing are distinct deliveries, so a receiver dropping duplicates keeps all."""
    tl = paging(state_target, srv.url)
    tl.fire("n0:gpu0", 3, at=0)
    for t in (100, 700):
        tl.set_level("n0:gpu0", 2, at=t)
        tl.set_level("n0:gpu0", 3, at=t + 300)
    tl.run(1500)
    tl.close()
    sent = [(r.json()["reason"], r.json()["status"], r.headers["webhook-id"])
            for r in posts(srv)]
    assert [s[:2] for s in sent] == [("new", "firing"), ("resolved", "resolved"),
                                     ("update", "firing"), ("resolved", "resolved"),
                                     ("update", "firing")]
    assert len({s[2] for s in sent}) == 5


def test_a_message_survives_the_outbox_unchanged() -> None:
    m = message(alert("gpu3"), alert("gpu5", level=2, status="resolved", ends_at=5.0),
                reason="update")
    assert decode_message(encode_message(m)) == m
