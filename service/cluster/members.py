"""Live shard membership in the shared state (`cluster.membership: postgres`): which shards
exist now, and the one shard map every process uses.

- Every shard process writes a `cluster_members` row (its replica id, shard id and the URL it
  advertises) with a heartbeat on the DATABASE's clock, every lease renewal.
- The LEADER alone publishes the map: the `cluster_map` row (epoch, members as JSON). When
  the live set (a heartbeat within `ttl_s`) differs from the published one it writes the new
  set with epoch + 1, in one transaction that also checks it still holds the leader lease at
  its epoch (a leader that lost the lease while paused publishes nothing).
- Every process reads the map each renewal and uses exactly it: the ring is built from the
  map's members. A process whose shard is not in the map yet owns no node (its writes are
  answered 503, service.api.shard_route) until the leader publishes it.

Replicas of one shard should advertise the same URL (the shard's service address); if they
differ, the map names the smallest, so every process still agrees.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from service.cluster.lease import Lease
from service.cluster.shard_map import Shard, ShardMap
from service.storage.sql import Database
from service.storage.state_db import StateStore, StateTarget

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS cluster_members (
    replica_id TEXT PRIMARY KEY,
    shard_id TEXT NOT NULL,
    url TEXT NOT NULL,
    heartbeat_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS cluster_map (
    name TEXT PRIMARY KEY,
    epoch INTEGER NOT NULL,
    members TEXT NOT NULL,
    published_at REAL NOT NULL
);
"""
_MAP = "shards"  # the one row of cluster_map
FORGET_AFTER = 20  # ttls: a member row silent this long is deleted (it left long ago)


@dataclass(frozen=True, slots=True)
class PublishedMap:
    epoch: int  # 0: nothing published yet
    shards: tuple[Shard, ...]  # by id
    published_at: float


NONE_YET = PublishedMap(0, (), 0.0)

# Called with (old map, new map) before the new one is used; None: this shard owns nothing.
MapChange = Callable[[ShardMap | None, ShardMap | None], None]


class Members(StateStore):
    """The two tables. `heartbeat` is what every process does; `publish` only the leader."""

    def __init__(self, target: StateTarget, ttl_s: float = 15.0) -> None:
        super().__init__(target, _SCHEMA)
        self.ttl_s = ttl_s

    def heartbeat(self, replica_id: str, shard_id: str, url: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO cluster_members (replica_id, shard_id, url, heartbeat_at) "
                       "VALUES (?, ?, ?, ?) ON CONFLICT (replica_id) DO UPDATE SET "
                       "shard_id = excluded.shard_id, url = excluded.url, "
                       "heartbeat_at = excluded.heartbeat_at",
                       (replica_id, shard_id, url, db.now()))

    def leave(self, replica_id: str) -> None:
        """A clean shutdown: out of the live set at once rather than after the ttl."""
        with self.transaction() as db:
            db.execute("DELETE FROM cluster_members WHERE replica_id = ?", (replica_id,))

    def publish(self, leader: Lease) -> PublishedMap | None:
        """As the leader: the live set as the map when it changed. Returns the new map, or
        None when nothing was written (unchanged, or the lease is no longer ours)."""
        with self.transaction() as db:
            if not leader.still_held(db):
                return None
            now = db.now()
            db.execute("DELETE FROM cluster_members WHERE heartbeat_at < ?",
                       (now - FORGET_AFTER * self.ttl_s,))
            live = self._live(db, now)
            old = self._read(db)
            if live == old.shards:
                return None
            new = PublishedMap(old.epoch + 1, live, now)
            db.execute("INSERT INTO cluster_map (name, epoch, members, published_at) VALUES "
                       "(?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET epoch = excluded.epoch, "
                       "members = excluded.members, published_at = excluded.published_at",
                       (_MAP, new.epoch, _dump(live), now))
        gone = {s.id for s in old.shards} - {s.id for s in live}
        came = {s.id for s in live} - {s.id for s in old.shards}
        log.warning("shard map epoch %d published: %s%s%s", new.epoch,
                    ", ".join(s.id for s in live) or "no shards",
                    f"; joined: {', '.join(sorted(came))}" if came else "",
                    f"; left: {', '.join(sorted(gone))}" if gone else "")
        return new

    def current(self) -> PublishedMap:
        """The published map (epoch 0 and no shards before the first)."""
        with self._lock:
            return self._read(self._db)

    def live(self) -> tuple[Shard, ...]:
        """Shards with a member heard from within the ttl, as the database says."""
        with self._lock:
            return self._live(self._db, self._db.now())

    def _live(self, db: Database, now: float) -> tuple[Shard, ...]:
        rows = db.execute("SELECT shard_id, url FROM cluster_members WHERE heartbeat_at > ?",
                          (now - self.ttl_s,)).fetchall()
        urls: dict[str, str] = {}
        for sid, url in rows:
            urls[str(sid)] = min(urls.get(str(sid), str(url)), str(url))
        return tuple(Shard(sid, urls[sid]) for sid in sorted(urls))

    @staticmethod
    def _read(db: Database) -> PublishedMap:
        row = db.execute("SELECT epoch, members, published_at FROM cluster_map WHERE name = ?",
                         (_MAP,)).fetchone()
        if row is None:
            return NONE_YET
        shards = tuple(sorted((Shard(str(m["id"]), str(m["url"])) for m in json.loads(row[1])),
                              key=lambda s: s.id))
        return PublishedMap(int(row[0]), shards, float(row[2]))


def _dump(shards: tuple[Shard, ...]) -> str:
    return json.dumps([{"id": s.id, "url": s.url} for s in shards], separators=(",", ":"))


class Membership:
    """This process's side: heartbeat, publish when leader, follow the published map.

    `map` is the ShardMap in force (None: this shard is not in the map, it owns nothing). It
    is swapped whole, one reference assignment, so a request reads it without a lock; the
    `on_change` callbacks (rebalancing: service.cluster.replica, service.runtime.rebalance) run
    before the swap, so a gained node's history is in before its writes are accepted here."""

    def __init__(self, members: Members, *, replica_id: str, shard_id: str, url: str,
                 vnodes: int = 64, leader: Callable[[], bool] = lambda: False,
                 leader_lease: Lease | None = None, renew_s: float = 5.0) -> None:
        self.members, self.replica_id, self.shard_id, self.url = members, replica_id, \
            shard_id, url
        self.vnodes, self.leader, self.leader_lease = vnodes, leader, leader_lease
        self.renew_s = renew_s
        self.map: ShardMap | None = None
        self.epoch = 0
        self.on_change: list[MapChange] = []
        self._step_lock = threading.Lock()  # the keeper thread and a test's step
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def owns(self, host: str) -> bool:
        """Whether this shard owns `host` under the map in force (never before it is in one;
        a name ingest would refuse is nobody's)."""
        smap = self.map
        if smap is None:
            return False
        try:
            return smap.is_local(host)
        except ValueError:
            return False

    def step(self) -> None:
        """One renewal: heartbeat, publish if leader, follow the map. A failure is logged and
        the map in force stays (the leases decide the roles meanwhile)."""
        with self._step_lock:
            try:
                self.members.heartbeat(self.replica_id, self.shard_id, self.url)
                if self.leader() and self.leader_lease is not None:
                    self.members.publish(self.leader_lease)
                published = self.members.current()
            except Exception:
                log.exception("shard membership: could not reach the shared state; the map "
                              "of epoch %d stays in force", self.epoch)
                return
            if published.epoch != self.epoch:
                self._follow(published)

    def _follow(self, published: PublishedMap) -> None:
        ids = [s.id for s in published.shards]
        new = ShardMap(list(published.shards), self.shard_id, self.vnodes) \
            if self.shard_id in ids else None
        old = self.map
        for change in self.on_change:
            try:
                change(old, new)
            except Exception:  # the map must still be followed, or writes bounce forever
                log.exception("shard map epoch %d: rebalancing step %r failed", published.epoch,
                              change)
        self.map, self.epoch = new, published.epoch
        if new is None:
            log.warning("shard map epoch %d (%s) does not name shard %s: it owns no node "
                        "until the leader adds it", published.epoch, ", ".join(ids) or "empty",
                        self.shard_id)
        else:
            log.warning("shard map epoch %d in force: %s; this is shard %s", published.epoch,
                        ", ".join(ids), self.shard_id)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cluster-members", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.renew_s):
            self.step()

    def stop(self, leave: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if leave:
            try:
                self.members.leave(self.replica_id)
            except Exception:  # it leaves by the ttl
                log.exception("shard membership: could not leave the member list")

    def status(self) -> dict[str, object]:
        smap = self.map
        return {"epoch": self.epoch, "in_map": smap is not None,
                "shards": sorted(smap.shards) if smap is not None else []}
