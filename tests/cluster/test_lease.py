"""The leader lease on the shared state (SQLite and a real PostgreSQL): one holder at a time,
taken over only after it expired on the database's clock, fenced by its epoch."""

from __future__ import annotations

import threading
import time

import pytest

from service.cluster.lease import Lease, LeaseKeeper


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_one_holder_and_the_others_see_it(state_target: str) -> None:
    a, b = Lease(state_target, "leader", "a"), Lease(state_target, "leader", "b")
    sa = a.renew()
    assert sa.mine and sa.epoch == 1 and a.held() and a.epoch == 1
    sb = b.renew()
    assert not sb.mine and sb.holder == "a" and not b.held()
    assert a.renew().epoch == 1  # renewing keeps the epoch
    current = b.current()
    assert current is not None and current.holder == "a" and not current.mine
    a.close()
    b.close()


def test_taken_over_only_once_it_expired(state_target: str) -> None:
    ttl = 0.6
    ca = Clock()
    a = Lease(state_target, "leader", "a", ttl_s=ttl, renew_s=0.2, clock=ca)
    b = Lease(state_target, "leader", "b", ttl_s=ttl, renew_s=0.2)
    assert a.renew().mine
    assert not b.renew().mine  # not yet expired
    time.sleep(ttl + 0.2)  # a stopped renewing (killed, paused)
    sb = b.renew()
    assert sb.mine and sb.epoch == 2 and b.held()
    # a, back from its pause: its own clock ended its hold, and the database fences it.
    ca.t += ttl
    assert not a.held()
    with a.transaction() as db:
        assert not a.still_held(db)
    with b.transaction() as db:
        assert b.still_held(db)
    sa = a.renew()
    assert not sa.mine and sa.holder == "b"
    a.close()
    b.close()


def test_a_holder_trusts_its_hold_only_for_the_ttl_after_renewing() -> None:
    c = Clock()
    a = Lease(":memory:", "leader", "a", ttl_s=15, renew_s=5, clock=c)
    a.renew()
    c.t += 14.9
    assert a.held()
    c.t += 0.2  # no renewal got through (the database is down): stop by ourselves
    assert not a.held()
    a.close()


def test_release_hands_over_at_once(state_target: str) -> None:
    a, b = Lease(state_target, "leader", "a"), Lease(state_target, "leader", "b")
    a.renew()
    a.release()
    assert not a.held()
    sb = b.renew()
    assert sb.mine and sb.epoch == 2
    a.close()
    b.close()


def test_leases_are_independent_by_name(state_target: str) -> None:
    a = Lease(state_target, "leader", "a")
    b = Lease(state_target, "writer:shard-2", "a")
    assert a.renew().mine and b.renew().mine
    a.close()
    b.close()


def test_bad_timing_is_refused() -> None:
    with pytest.raises(ValueError, match="renewed more often"):
        Lease(":memory:", "leader", "a", ttl_s=5, renew_s=5)


def test_the_keeper_reports_gains_and_losses(state_target: str) -> None:
    changes: list[tuple[str, bool]] = []
    ka = LeaseKeeper(Lease(state_target, "leader", "a", ttl_s=0.6, renew_s=0.1),
                     lambda held: changes.append(("a", held)))
    kb = LeaseKeeper(Lease(state_target, "leader", "b", ttl_s=0.6, renew_s=0.1),
                     lambda held: changes.append(("b", held)))
    assert ka.step() and not kb.step()
    ka.stop(release=False)  # a dies without a word
    assert changes == [("a", True), ("a", False)]
    deadline = time.monotonic() + 5
    while not kb.step():
        assert time.monotonic() < deadline, "b never took the lease over"
        time.sleep(0.05)
    assert changes[-1] == ("b", True)
    kb.stop()
    assert changes[-1] == ("b", False)
    ka.lease.close()
    kb.lease.close()


@pytest.mark.slow
def test_many_replicas_racing_never_share_an_epoch(state_target: str) -> None:
    """Replicas renewing at once, the lease expiring under them again and again: each epoch
    has exactly one holder."""
    seen: dict[int, set[str]] = {}
    guard = threading.Lock()

    def replica(name: str) -> None:
        lease = Lease(state_target, "leader", name, ttl_s=0.15, renew_s=0.05)
        try:
            for i in range(30):
                s = lease.renew()
                if s.mine:
                    with guard:
                        seen.setdefault(s.epoch, set()).add(name)
                    if i % 3 == 0:
                        time.sleep(0.2)  # a pause long enough to lose it
        finally:
            lease.close()

    threads = [threading.Thread(target=replica, args=(f"r{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) >= 2, "the lease never changed hands"
    assert all(len(holders) == 1 for holders in seen.values()), seen
