"""The fleet's size and heat across shards, for what is judged fleet-wide: a storm (nodes that
entered warning or worse lately, as a share of the fleet) and the breaker's fraction.

Each shard's writer publishes one row per tick: the nodes it saw reporting and the nodes of
its own that count towards a storm. The leader sums the rows that are fresh (a shard silent
for longer than `max_age_s` counts for nothing, rather than forever). One row per shard, not
per node: 100,000 GPUs cost the database a handful of small writes per tick."""

from __future__ import annotations

from dataclasses import dataclass

from service.storage.state_db import StateStore, StateTarget

_SCHEMA = """
CREATE TABLE IF NOT EXISTS fleet_census (
    shard TEXT PRIMARY KEY,
    live INTEGER NOT NULL,   -- nodes with fresh data at the shard's newest tick
    hot INTEGER NOT NULL,    -- of them, nodes that entered level 2+ within the storm window
    at REAL NOT NULL         -- the database's clock
);
"""


@dataclass(frozen=True, slots=True)
class Totals:
    live: int
    hot: int
    shards: int  # rows counted (fresh)


class Census(StateStore):
    def __init__(self, target: StateTarget, shard: str, *, max_age_s: float = 60.0) -> None:
        super().__init__(target, _SCHEMA)
        self.shard, self.max_age_s = shard, max_age_s

    def publish(self, live: int, hot: int) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO fleet_census (shard, live, hot, at) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT (shard) DO UPDATE SET live = excluded.live, "
                       "hot = excluded.hot, at = excluded.at",
                       (self.shard, int(live), int(hot), db.now()))

    def totals(self) -> Totals:
        with self._lock:
            now = self._db.now()
            row = self._db.execute("SELECT COALESCE(sum(live), 0), COALESCE(sum(hot), 0), "
                                   "count(*) FROM fleet_census WHERE at >= ?",
                                   (now - self.max_age_s,)).fetchone()
        return Totals(int(row[0]), int(row[1]), int(row[2]))

    def forget(self, shard: str) -> None:
        """A shard removed from the map: its row goes at once rather than by age."""
        with self.transaction() as db:
            db.execute("DELETE FROM fleet_census WHERE shard = ?", (shard,))
