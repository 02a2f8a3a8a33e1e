"""A coalesced (merged) ingest leaves the store as ingesting each request alone would, and
answers each request the same, through entity churn: new entities (ingested alone, within
the per-request admission limit), entities the store forgot (whose tables the plan cache
knew as held) and the per-table slot caches a merged ingest reuses (issue 18)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame, JoinedTable
from service.api.coalesce import Coalescer, Pending, groups
from service.stages.ingest import EventLog, Ingestor, IngestResult
from service.stages.windows import EntityLimits, WindowStore
from tests.pipeline.builders import T0

STEP = 5.0
DAY = 86400.0


class _Pipeline:
    """What the coalescer uses of a Pipeline: its store and its ingest."""

    def __init__(self) -> None:
        self.store = WindowStore(limits=EntityLimits(max_gpus=100, max_new_gpus_per_batch=3))
        self.ingestor = Ingestor(self.store, EventLog())

    def ingest(self, batch: Batch, now: float, **kw: Any) -> IngestResult:
        return self.ingestor.ingest(batch, now, **kw)


class _Sender:
    """A node agent: the same entity tables every round, as the mapper keeps one per layout."""

    def __init__(self, node: str, gpus: int) -> None:
        self.gpus = EntityTable(Scope.GPU, [Entity.gpu(node, g) for g in range(gpus)])
        self.links = EntityTable(Scope.NVLINK, [Entity.nvlink(node, g, 0) for g in range(gpus)])

    def batch(self, k: int, ts: float) -> Batch:
        b = Batch()
        for table, metric, base in ((self.gpus, "gpu_temp", 40.0),
                                    (self.links, "nvlink_replay", 100.0)):
            n = len(table)
            v = np.full((n, len(CATALOG.columns(table.scope))), np.nan)
            v[:, CATALOG.column(table.scope, metric)] = base + k * 10 + np.arange(n)
            b.add(Frame(table, np.arange(n, dtype=np.int32), np.full(n, ts), v))
        return b


def _answer(r: IngestResult) -> tuple[int, int, list[tuple[str, str | None]]]:
    return r.accepted, r.rejected, [(x.reason, x.entity) for x in r.rejections]


def _plain(a: np.ndarray) -> Any:
    return np.where(np.isnan(a), -1.0, a).tolist()  # NaN != NaN in a list's comparison


def _state(store: WindowStore) -> dict[str, Any]:
    out: dict[str, Any] = {"nodes": list(store.registry.nodes)}
    for scope in (Scope.GPU, Scope.NVLINK):
        w = store[scope]
        n = len(w)
        out[scope.value] = ([e.key for e in w.entities], _plain(w.last_val[:n]),
                            w.last_k[:n].tolist(), w.gpu_of[:n].tolist())
    out["temp"] = _plain(store[Scope.GPU].window("gpu_temp", 4))
    return out


def _round(alone: _Pipeline, co: Coalescer, batches: list[Batch], now: float) -> None:
    """Every request alone on one store, coalesced on the other: the same answers."""
    want = [_answer(alone.ingest(b, now, from_wire=True)) for b in batches]
    items = [Pending(b, *co.plan(b), None) for b in batches]  # type: ignore[arg-type]
    got: list[tuple[int, int, list[tuple[str, str | None]]]] = []
    co.clock = lambda: now
    for group in groups(items):
        got += [_answer(r) for r in co._ingest_group(group)]
    assert got == want


def test_merged_ingests_match_ingests_alone_through_entity_churn() -> None:
    alone, merged = _Pipeline(), _Pipeline()
    co = Coalescer(merged, 0.05, lambda: T0)  # type: ignore[arg-type]
    senders = {name: _Sender(name, 2) for name in ("a", "b", "c", "d", "e")}
    big = _Sender("f", 4)  # more new GPUs than one request may add (3)
    for k in range(3):
        now = T0 + k * STEP
        _round(alone, co, [s.batch(k, now) for s in senders.values()], now)
    assert co.requests == 15 and co.ingests < 15  # rounds 1 and 2 shared ingests
    assert _state(merged.store) == _state(alone.store)
    # "d" and "e" fall silent for a week; the others report on, then the store forgets them.
    later = T0 + 7 * DAY - 100
    _round(alone, co, [senders[n].batch(3, later) for n in "abc"], later)
    horizon = T0 + 7 * DAY + 60
    for p in (alone, merged):
        done = p.store.forget(horizon)
        assert done is not None and len(done.dropped[Scope.GPU]) == 4
    # They come back with the tables the plan cache knew as held, beside a new sender over
    # the per-request limit: each is new again, so each is ingested alone and admitted per
    # request (merged, "d" and "e" would be 4 new GPUs against a limit of 3).
    ingests = co.ingests
    now = horizon + STEP
    batches = [senders[n].batch(4, now) for n in "abcde"] + [big.batch(4, now)]
    _round(alone, co, batches, now)
    assert co.ingests - ingests == 4  # "a"-"c" together, then "d", "e" and "f" alone
    assert _state(merged.store) == _state(alone.store)
    assert len(merged.store[Scope.GPU]) == 6 + 4 + 3
    # Held again: the next round merges all of them, "f" with its turned-away GPU too.
    ingests = co.ingests
    now += STEP
    _round(alone, co, [s.batch(5, now) for s in (*senders.values(), big)], now)
    assert co.ingests - ingests <= 2
    assert _state(merged.store) == _state(alone.store)


def test_a_joined_table_reuses_its_parts_slots() -> None:
    p = _Pipeline()
    a, b = _Sender("a", 2), _Sender("b", 3)
    for s in (a, b):
        p.ingest(s.batch(0, T0), T0, from_wire=True)
    w = p.store[Scope.GPU]
    joined = JoinedTable(Scope.GPU, [b.gpus, a.gpus])
    slots = w.slots_for(joined, p.store.registry)
    assert slots.tolist() == [w.slot(e) for e in joined.entities] == [2, 3, 4, 0, 1]
    assert w._table_cache.get(joined) is None  # met once: never kept


def test_a_shared_table_is_resolved_row_by_row_and_planned_without_its_entities(
        monkeypatch: Any) -> None:
    """A line-protocol mapper keeps one table per scope for all its senders; each request's
    frame names some of its rows. The store resolves only the rows it has not met (never one
    no row asked for: a forgotten entity must not come back), and once it has met them a
    request's plan looks at no entity."""
    p = _Pipeline()
    table = EntityTable(Scope.GPU, [Entity.gpu(n, g) for n in "abc" for g in range(2)])
    w = p.store[Scope.GPU]

    def frame(rows: list[int], k: int) -> Batch:
        r = np.asarray(rows, np.int32)
        v = np.full((len(r), len(CATALOG.columns(Scope.GPU))), np.nan)
        v[:, CATALOG.column(Scope.GPU, "gpu_temp")] = 40.0 + k
        b = Batch()
        b.add(Frame(table, r, np.full(len(r), T0 + STEP * k), v))
        return b

    co = Coalescer(p, 0.05, lambda: T0)  # type: ignore[arg-type]
    assert co.plan(frame([2, 3], 0))[2]  # new entities: alone
    p.ingest(frame([2, 3], 0), T0, from_wire=True)
    assert w.known_slots(table).tolist() == [-1, -1, 0, 1, -1, -1]
    assert [e.key for e in w.entities] == ["b:gpu0", "b:gpu1"]  # no row asked for the others
    p.ingest(frame([0], 1), T0 + STEP, from_wire=True)
    assert w.known_slots(table).tolist() == [2, -1, 0, 1, -1, -1]
    # Held rows: planned from the store's cached slots and the table's keys alone.
    monkeypatch.setattr(type(w), "slot", lambda *a: pytest.fail("an entity looked up"))
    keys, cells, alone = co.plan(frame([3, 0, 2], 2))
    assert (keys, alone) == ({"a:gpu0", "b:gpu0", "b:gpu1"}, False)
    assert cells == 3 * len(CATALOG.columns(Scope.GPU))
    monkeypatch.undo()
    # A row not met yet: its entity is looked at (and is new: the request goes alone).
    assert co.plan(frame([1, 2], 3))[2]


def test_a_new_nodes_table_is_kept_by_the_plan_from_its_first_round(monkeypatch: Any) -> None:
    """A node's first round names new entities (it goes alone); its table's keys are kept
    then, so the next round's plan (the entities held now) builds no key set."""
    p = _Pipeline()
    table = EntityTable(Scope.GPU, [Entity.gpu("n", g) for g in range(3)])

    def frame(k: int) -> Batch:
        v = np.full((3, len(CATALOG.columns(Scope.GPU))), np.nan)
        v[:, CATALOG.column(Scope.GPU, "gpu_temp")] = 40.0 + k
        b = Batch()
        b.add(Frame(table, np.arange(3, dtype=np.int32), np.full(3, T0 + STEP * k), v))
        return b

    co = Coalescer(p, 0.05, lambda: T0)  # type: ignore[arg-type]
    keys, _, alone = co.plan(frame(0))
    assert alone and keys == {"n:gpu0", "n:gpu1", "n:gpu2"}
    assert co.plans._keys.get(table) is not None  # kept while the request goes alone
    p.ingest(frame(0), T0, from_wire=True)
    monkeypatch.setattr(Entity, "key", property(lambda e: pytest.fail("a key spelled")))
    monkeypatch.setattr(type(p.store[Scope.GPU]), "slot",
                        lambda *a: pytest.fail("an entity looked up"))
    again, _, alone = co.plan(frame(1))
    assert not alone and again is keys
