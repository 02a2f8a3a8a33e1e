"""The fleet census on SQLite and a real PostgreSQL: one row per shard, summed while fresh."""

from __future__ import annotations

import time

from service.cluster.census import Census


def test_shards_add_up_and_replace_their_own_row(state_target: str) -> None:
    a, b = Census(state_target, "a"), Census(state_target, "b")
    a.publish(live=100, hot=3)
    b.publish(live=50, hot=1)
    a.publish(live=98, hot=4)  # a's newer tick replaces its row
    t = b.totals()
    assert (t.live, t.hot, t.shards) == (148, 5, 2)
    b.forget("a")
    assert (b.totals().live, b.totals().shards) == (50, 1)
    a.close()
    b.close()


def test_a_silent_shard_stops_counting(state_target: str) -> None:
    a = Census(state_target, "a", max_age_s=0.3)
    b = Census(state_target, "b", max_age_s=0.3)
    a.publish(live=10, hot=2)
    time.sleep(0.4)
    b.publish(live=5, hot=0)
    t = b.totals()
    assert (t.live, t.hot, t.shards) == (5, 0, 1)
    a.close()
    b.close()
