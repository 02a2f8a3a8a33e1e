"""A named lease in the shared state: which replica does what only one may do (send
notifications, run remediation, persist a shard's alerts).

A row per lease: its holder, an epoch (the fencing token: +1 each time the lease changes
hands) and an expiry on the DATABASE's clock, so replicas whose clocks disagree still agree on
who holds it. The holder renews it every `renew_s`; a replica that finds it expired takes it.
The holder trusts its own hold only until `ttl_s` after its last successful renewal started,
on its own monotonic clock, which ends before any other replica can take it over (their wait
starts at that renewal or later). A paused or partitioned holder therefore stops by itself, and
`still_held` lets a side effect check the epoch in the same transaction as its write."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from service.storage.sql import Database
from service.storage.state_db import StateStore, StateTarget

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS cluster_lease (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class LeaseState:
    name: str
    holder: str  # "" when nobody ever held it
    epoch: int
    expires_at: float  # the database's clock
    mine: bool
    acquired_at: float = 0.0  # when its holder took it, on the database's clock


class Lease(StateStore):
    """One replica's side of one lease. `renew` is the one verb: take the lease when it is free
    or expired, extend it when it is ours, and say who holds it either way."""

    def __init__(self, target: StateTarget, name: str, holder: str, *, ttl_s: float = 15.0,
                 renew_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < renew_s < ttl_s:
            raise ValueError("a lease must be renewed more often than it expires")
        super().__init__(target, _SCHEMA)
        self.name, self.holder, self.ttl_s, self.renew_s = name, holder, ttl_s, renew_s
        self.clock = clock
        self._held_until = float("-inf")  # our monotonic clock
        self._epoch = 0
        self._since: float | None = None  # when we took it (the database's clock)

    def renew(self) -> LeaseState:
        started = self.clock()
        try:
            with self.transaction() as db:
                state = self._renew(db)
        except Exception:
            log.exception("lease %s: could not renew; holding it only until it runs out",
                          self.name)
            raise
        if state.mine:
            if state.epoch != self._epoch:
                log.warning("lease %s: %s now holds it (epoch %d)", self.name, self.holder,
                            state.epoch)
            self._epoch = state.epoch
            self._since = state.acquired_at
            self._held_until = started + self.ttl_s
        else:
            if self._epoch and self.clock() < self._held_until:
                log.warning("lease %s: lost to %s (epoch %d)", self.name, state.holder,
                            state.epoch)
            self._held_until = float("-inf")
        return state

    def _renew(self, db: Database) -> LeaseState:
        now = db.now()
        row = db.execute("SELECT holder, epoch, expires_at, acquired_at FROM cluster_lease "
                         "WHERE name = ?", (self.name,)).fetchone()
        expires = now + self.ttl_s
        if row is None:
            db.execute("INSERT INTO cluster_lease (name, holder, epoch, acquired_at, expires_at) "
                       "VALUES (?, ?, 1, ?, ?)", (self.name, self.holder, now, expires))
            return LeaseState(self.name, self.holder, 1, expires, True, now)
        holder, epoch, until, since = str(row[0]), int(row[1]), float(row[2]), float(row[3])
        if holder == self.holder and until > now:
            db.execute("UPDATE cluster_lease SET expires_at = ? WHERE name = ?",
                       (expires, self.name))
            return LeaseState(self.name, holder, epoch, expires, True, since)
        if until <= now:
            # Expired: taken, by a new holder or by the old one back after a pause; either
            # way the epoch moves on, so whatever it did under the old one is fenced off.
            db.execute("UPDATE cluster_lease SET holder = ?, epoch = ?, acquired_at = ?, "
                       "expires_at = ? WHERE name = ?",
                       (self.holder, epoch + 1, now, expires, self.name))
            return LeaseState(self.name, self.holder, epoch + 1, expires, True, now)
        return LeaseState(self.name, holder, epoch, until, False, since)

    def held(self) -> bool:
        """Ours, by our own clock: at most `ttl_s` after the last renewal that said so."""
        return self.clock() < self._held_until

    @property
    def since(self) -> float | None:
        """When we took the lease we hold (the database's clock), None while we hold none."""
        return self._since if self.held() else None

    @property
    def epoch(self) -> int:
        """The fencing token of our hold (0 before we first held it)."""
        return self._epoch

    def still_held(self, db: Database) -> bool:
        """Inside a caller's write transaction on the same database: is the lease still ours at
        the epoch we hold? A side effect recorded under a lease that moved on is refused."""
        if not self.held():
            return False
        row = db.execute("SELECT holder, epoch, expires_at FROM cluster_lease WHERE name = ?",
                         (self.name,)).fetchone()
        return (row is not None and str(row[0]) == self.holder and int(row[1]) == self._epoch
                and float(row[2]) > db.now())

    def release(self) -> None:
        """Give it up at once (a clean shutdown), so a standby need not wait out the ttl."""
        if self._epoch == 0:
            return
        with self.transaction() as db:
            db.execute("UPDATE cluster_lease SET expires_at = ? WHERE name = ? AND holder = ? "
                       "AND epoch = ?", (db.now(), self.name, self.holder, self._epoch))
        self._held_until = float("-inf")

    def current(self) -> LeaseState | None:
        """Who holds it now, as the database says (for the API and metrics)."""
        with self._lock:
            row = self._db.execute("SELECT holder, epoch, expires_at, acquired_at FROM "
                                   "cluster_lease WHERE name = ?", (self.name,)).fetchone()
            now = self._db.now()
        if row is None:
            return None
        holder, epoch, until = str(row[0]), int(row[1]), float(row[2])
        return LeaseState(self.name, holder if until > now else "", epoch, until,
                          holder == self.holder and until > now, float(row[3]))


class LeaseKeeper:
    """Renews a lease every `renew_s` on a thread of its own, and tells `on_change` when this
    replica gains or loses it. A failed renewal is logged and retried; the hold ends by the
    clock (Lease.held) whatever the thread is doing."""

    def __init__(self, lease: Lease, on_change: Callable[[bool], None] | None = None) -> None:
        self.lease, self.on_change = lease, on_change
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._was = False

    def step(self) -> bool:
        """One renewal, and the change it made; returns whether we hold the lease."""
        with contextlib.suppress(Exception):  # logged by renew; the clock decides
            self.lease.renew()
        now = self.lease.held()
        if now != self._was:
            self._was = now
            if self.on_change is not None:
                self.on_change(now)
        return now

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"lease-{self.lease.name}",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.lease.renew_s)

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if release and self.lease.held():
            try:
                self.lease.release()
            except Exception:  # it will expire by itself
                log.exception("lease %s: could not release", self.lease.name)
        if self._was and self.on_change is not None:
            self._was = False
            self.on_change(False)
