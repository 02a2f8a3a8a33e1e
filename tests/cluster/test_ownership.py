"""service.cluster.ownership: what a shard keeps of a batch, and what it refuses by entity."""

from __future__ import annotations

import numpy as np

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame, JoinedTable
from service.cluster.ownership import Ownership
from service.cluster.shard_map import Shard, ShardMap

MAP = ShardMap([Shard("a", "http://a:1"), Shard("b", "http://b:1")], "a")
WIDTH = len(CATALOG.columns(Scope.GPU))


def _hosts() -> tuple[list[str], list[str]]:
    names = [f"h{i}" for i in range(40)]
    return [h for h in names if MAP.is_local(h)][:3], [h for h in names
                                                        if not MAP.is_local(h)][:3]


def _frame(table: EntityTable) -> Frame:
    n = len(table)
    v = np.full((n, WIDTH), np.nan)
    v[:, :2] = 1.0  # two values a row
    return Frame(table, np.arange(n, dtype=np.int32), np.zeros(n), v)


def test_without_a_map_everything_is_kept_as_it_is() -> None:
    b = Batch()
    b.add(_frame(EntityTable(Scope.GPU, [Entity.gpu("x", 0)])))
    assert Ownership(None).keep_owned(b) == (b, [])
    assert Ownership(None).owns("anything")


def test_foreign_rows_and_events_are_refused_by_entity_naming_the_owner() -> None:
    own, foreign = _hosts()
    t1 = EntityTable(Scope.GPU, [Entity.gpu(own[0], 0), Entity.gpu(foreign[0], 0)])
    t2 = EntityTable(Scope.GPU, [Entity.gpu(foreign[1], 1), Entity.gpu(own[1], 1)])
    b = Batch()
    b.add(_frame(JoinedTable(Scope.GPU, [t1, t2])))  # a coalesced ingest's table
    b.events.add(f"{own[2]}:gpu0", 1.0, "xid", 79.0)
    b.events.add(f"{foreign[2]}:gpu0", 1.0, "xid", 79.0)
    o = Ownership(MAP)
    kept, refused = o.keep_owned(b)
    f = kept.frames[Scope.GPU]
    assert sorted(f.entities[i].node for i in f.rows) == sorted(own[:2])
    assert kept.events.keys == [f"{own[2]}:gpu0"]
    assert {(r.entity, r.n, r.metric) for r in refused} == {
        (f"{foreign[0]}:gpu0", 2, None), (f"{foreign[1]}:gpu1", 2, None),
        (f"{foreign[2]}:gpu0", 1, "xid")}
    assert all("belongs to shard b (http://b:1)" in r.reason for r in refused)
    # all owned: the very same batch, no copy
    mine = Batch()
    mine.add(_frame(t1).take(np.array([True, False])))
    assert o.keep_owned(mine)[0] is mine


def test_a_live_map_not_naming_this_shard_owns_nothing() -> None:
    own, _ = _hosts()
    o = Ownership(None, lambda: None)
    assert not o.owns(own[0])
    b = Batch()
    b.add(_frame(EntityTable(Scope.GPU, [Entity.gpu(own[0], 0)])))
    kept, refused = o.keep_owned(b)
    assert len(kept.frames[Scope.GPU]) == 0 and "in no shard map" in refused[0].reason
