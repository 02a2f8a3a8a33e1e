"""Ingest's counter state has one owner (service/stages/counters.py): it moves with its entities
when the store compacts and grows, and nothing else can write it."""

import numpy as np
import pytest

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame
from service.stages.ingest import REBASE_AFTER, EventLog, Ingestor
from service.stages.windows import WindowStore
from tests.pipeline.builders import T0

GPU = Scope.GPU
ECC = CATALOG.column(GPU, "ecc_sbe_aggregate")
NOW = T0 + 3600


def _send(ing: Ingestor, table: EntityTable, ts: float, ecc: list[float]) -> tuple[int, int]:
    v = np.full((len(table), len(CATALOG.columns(GPU))), np.nan)
    v[:, ECC] = ecc
    b = Batch()
    b.add(Frame(table, np.arange(len(table), dtype=np.int32), np.full(len(table), ts), v))
    r = ing.ingest(b, NOW)
    assert r.rejected == 0
    return r.counter_drops, r.rebased


def test_a_drop_streak_follows_its_gpu_through_a_compaction_and_a_growth() -> None:
    store = WindowStore()
    ing = Ingestor(store, EventLog())
    gpus = store[GPU]
    t = EntityTable(GPU, [Entity.gpu("a", 0), Entity.gpu("b", 0), Entity.gpu("c", 0)])
    _send(ing, t, T0, [100.0, 500.0, 7.0])
    # b reads lower, one short of being taken as a new device.
    for i in range(1, REBASE_AFTER):
        assert _send(ing, t, T0 + 5 * i, [100.0, 3.0, 7.0]) == (1, 0)
    assert store.forget_nodes(["a"]) is not None  # b moves from slot 1 to slot 0
    b = gpus.slot(Entity.gpu("b", 0))
    assert b == 0 and gpus.last_val[b, ECC] == 500 and gpus.last_val[1, ECC] == 7
    assert gpus.last_k[b] == store.step_of(np.array([T0 + 5.0 * (REBASE_AFTER - 1)]))[0]
    assert np.isnan(gpus.last_val[2, ECC]) and gpus.last_k[2] == -1
    capacity = gpus.capacity
    many = EntityTable(GPU, [Entity.gpu(f"n{i}", 0) for i in range(capacity + 1)])
    _send(ing, many, T0 + 5 * REBASE_AFTER, [1.0] * len(many))
    assert gpus.capacity > capacity
    t2 = EntityTable(GPU, [Entity.gpu("b", 0), Entity.gpu("c", 0)])
    # The streak came along: b's next lower reading proves a new device, c's is untouched.
    assert _send(ing, t2, T0 + 5 * REBASE_AFTER, [4.0, 7.0]) == (0, 1)
    assert gpus.last_val[b, ECC] == 4 and gpus.last_val[1, ECC] == 7


def test_the_counter_state_is_read_only_outside_its_owner() -> None:
    store = WindowStore()
    ing = Ingestor(store, EventLog())
    gpus = store[GPU]
    _send(ing, EntityTable(GPU, [Entity.gpu("a", 0)]), T0, [10.0])
    for view in (gpus.last_val, gpus.last_ts, gpus.last_k, gpus.latest("ecc_sbe_aggregate")):
        with pytest.raises(ValueError, match="read-only"):
            view[0] = 1
    # A growth reallocates the arrays; the views follow and stay read-only.
    many = EntityTable(GPU, [Entity.gpu(f"n{i}", 0) for i in range(gpus.capacity + 1)])
    _send(ing, many, T0 + 5, [3.0] * len(many))
    assert gpus.last_val.shape[0] == gpus.capacity
    assert gpus.last_val[gpus.slot(Entity.gpu("n0", 0)), ECC] == 3
    with pytest.raises(ValueError, match="read-only"):
        gpus.last_ts[0, ECC] = 0.0
