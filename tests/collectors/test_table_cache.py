"""collectors.table_cache: a lookup per entity table that keeps no table its maker let go, and
the caches that use it (the window store's slots, the coalescer's plan keys, the SQLite sink's
slots) under a flood of new names, where a line-protocol mapper hands out a new, longer table
for every body: before, each cache held every superseded table (about 1 GB and second-long
garbage collections in `python -m bench.fuzz`)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from collectors.catalog import Scope
from collectors.frames import Batch, Entity, EntityTable
from collectors.schema import SchemaMapper
from collectors.table_cache import TableCache
from service.api.coalesce import Coalescer
from service.history.sinks import SQLiteSink
from service.stages.ingest import EventLog, Ingestor, IngestResult
from service.stages.windows import EntityLimits, WindowStore
from tests.pipeline.builders import T0

pytestmark = pytest.mark.usefixtures("plain_gc")  # what a full collection frees, and finds


def _table(node: str, n: int) -> EntityTable:
    return EntityTable(Scope.GPU, [Entity.gpu(node, g) for g in range(n)])


def test_an_entry_leaves_with_its_table() -> None:
    cache: TableCache[int] = TableCache(max_tables=100, max_entities=10_000)
    kept, dropped = _table("a", 3), _table("b", 5)
    cache.put(kept, 1)
    cache.put(dropped, 2)
    assert cache.get(dropped) == 2 and len(cache) == 2 and cache.entities == 8
    del dropped
    gc.collect()
    assert len(cache) == 1 and cache.entities == 3
    assert cache.get(kept) == 1


def test_least_recently_used_tables_go_first_past_either_bound() -> None:
    cache: TableCache[str] = TableCache(max_tables=3, max_entities=10)
    t = [_table(f"n{i}", 3) for i in range(4)]
    for i in range(3):
        cache.put(t[i], f"v{i}")
    assert cache.get(t[0]) == "v0"  # used: t[1] is now the oldest
    cache.put(t[3], "v3")  # 12 entities, 4 tables: over both bounds until one goes
    assert cache.get(t[1]) is None
    assert [cache.get(x) for x in (t[0], t[2], t[3])] == ["v0", "v2", "v3"]
    assert cache.entities == 9
    big = _table("big", 50)
    cache.put(big, "big")  # larger than the budget alone: kept, the others go
    assert len(cache) == 1 and cache.get(big) == "big"


def test_a_table_under_a_reused_id_is_not_taken_for_the_old_one() -> None:
    cache: TableCache[int] = TableCache(max_tables=10)
    first = _table("a", 2)
    cache.put(first, 1)
    other = _table("b", 2)
    assert cache.get(other) is None  # a different table, whatever its id


class _Pipeline:
    def __init__(self) -> None:
        self.store = WindowStore(limits=EntityLimits(max_gpus=200, max_new_gpus_per_batch=50))
        self.ingestor = Ingestor(self.store, EventLog())

    def ingest(self, batch: Batch, now: float, **kw: Any) -> IngestResult:
        return self.ingestor.ingest(batch, now, **kw)


def test_a_name_flood_leaves_no_superseded_table_in_the_service_caches(tmp_path: Path) -> None:
    """A mapper fed 60 bodies of new names (past the store's limit) makes 60 ever longer
    tables; once a body is done with, only the mapper's current table may live on."""
    mapper = SchemaMapper(strict=False)
    p = _Pipeline()
    co = Coalescer(p, 0.05, lambda: T0)  # type: ignore[arg-type]
    sink = SQLiteSink(tmp_path / "samples.db", background=False)
    for k in range(60):
        lines = "\n".join(f"gpu,host=flood{k}x{i},gpu=0 gpu_temp=40 {int(T0 * 1e9)}"
                          for i in range(30))
        batch = mapper.parse(lines)
        co.plan(batch)
        res = p.ingest(batch, T0, from_wire=True)
        sink.write(res)
        del batch, res
    gc.collect()
    alive = [o for o in gc.get_objects() if isinstance(o, EntityTable) and o.scope is Scope.GPU
             and o.entities and o.entities[0].node.startswith("flood")]
    assert alive == [mapper.table(Scope.GPU)]
    assert len(p.store[Scope.GPU]) == 200  # the flood reached the limit: tables outgrew it
    assert int(np.asarray([len(t) for t in alive]).max()) == 60 * 30
    sink.close()
