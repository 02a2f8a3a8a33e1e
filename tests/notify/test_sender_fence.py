"""A leader that stops leading sends nothing more (issue 36's fencing): the sender asks, before
every attempt, whether this replica still holds the leader lease. A message it had queued or
was retrying when it was paused past its lease stays in the shared outbox, unsent here, and
the next leader (a restart over the same shared state) sends it, once."""

from __future__ import annotations

from service.notify.notification_log import NotificationLog
from tests.notify import test_outbox as outbox
from tests.notify.receivers.servers import HttpRecorder, Reply
from tests.notify.test_outbox import paging, srv

__all__ = ["srv"]  # the receiver fixture, shared with the outbox tests

def posts(srv: HttpRecorder) -> list[str]:
    """The webhook ids the receiver got, in order."""
    return [r.headers["webhook-id"] for r in outbox.posts(srv)]


def test_a_replica_that_no_longer_leads_sends_nothing_and_the_next_leader_does(
        state_target: str, srv: HttpRecorder) -> None:
    old = paging(state_target, srv.url)
    leads = [True]
    old.notification.sender.may_send = lambda: leads[0]
    old.fire("n0:gpu0", 3, at=0)
    leads[0] = False  # paused past its lease between the flush and the send
    old.run(40)  # past the group's wait
    sender = old.notification.sender
    assert posts(srv) == [] and sender.abandoned >= 1 and sender.sent == 0
    # Nothing is left in flight here: were it to lead again, its groups would flush.
    assert old.notification.dispatcher.inflight == set()
    old.close()
    log = NotificationLog(state_target)
    try:
        assert len(log.staged()) == 1  # in the shared outbox, for the next leader
    finally:
        log.close()
    new = paging(state_target, srv.url, start=50)
    new.run(100)
    new.close()
    assert len(posts(srv)) == 1  # the next leader sent it, once


def test_a_leader_cut_off_while_retrying_stops_retrying(
        state_target: str, srv: HttpRecorder) -> None:
    srv.script(Reply(503), Reply(503), Reply(503))
    tl = paging(state_target, srv.url)
    # The lease runs out once the receiver has refused two attempts.
    tl.notification.sender.may_send = lambda: len(posts(srv)) < 2
    tl.fire("n0:gpu0", 3, at=0)
    tl.run(40)
    tl.close()
    assert len(posts(srv)) == 2  # two attempts, then no third
    sender = tl.notification.sender
    assert sender.abandoned == 1 and sender.failed == 0
