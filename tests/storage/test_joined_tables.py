"""Relays' tables met inside coalesced ingests (issue 18): the coalescer joins the bodies of
many relays into one table, met once; the window store and the SQLite sink keep each part's
slots from it, so the next body on a relay's table (alone, or joined with others) looks at no
entity. A table met for the first time finds every entity the store holds, and allocates
only for the rows a frame names."""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np
import pytest

from collectors.catalog import Scope
from collectors.frames import Entity, EntityTable, JoinedTable
from service.stages.windows import WindowStore
from service.storage.samples_sqlite import ScopeState, create_sql


def _table(*nodes: str) -> EntityTable:
    return EntityTable(Scope.GPU, [Entity.gpu(n, g) for n in nodes for g in range(2)])


def _fail(*_: Any) -> None:
    pytest.fail("an entity looked up")


def test_a_joined_tables_parts_are_kept_for_their_next_body(monkeypatch: Any) -> None:
    store = WindowStore()
    w = store[Scope.GPU]
    a, b = _table("a1", "a2"), _table("b1")
    joined = JoinedTable(Scope.GPU, [a, b])
    slots = w.slots_for(joined, store.registry, used=np.arange(6, dtype=np.int32))
    assert slots.tolist() == [w.slot(e) for e in joined.entities]
    assert w._table_cache.get(joined) is None  # met once: never kept
    monkeypatch.setattr(type(w), "slot", _fail)
    monkeypatch.setattr(w, "_slot", {})  # nothing found by entity from here on
    assert w.known_slots(a).tolist() == slots[:4].tolist()
    assert w.known_slots(b).tolist() == slots[4:].tolist()
    # the same parts in another merge: known without a look at an entity
    again = JoinedTable(Scope.GPU, [b, a])
    assert w.slots_for(again, store.registry, used=np.array([0, 3], np.int32)).tolist() == [
        *slots[4:].tolist(), *slots[:4].tolist()]


def test_a_joined_table_with_a_part_not_met_reads_minus_one_there() -> None:
    store = WindowStore()
    w = store[Scope.GPU]
    a, c = _table("a1"), _table("c1")
    w.slots_for(a, store.registry, used=np.arange(2, dtype=np.int32))
    known = w.known_slots(JoinedTable(Scope.GPU, [c, a]))
    assert known is not None and known.tolist() == [-1, -1, 0, 1]
    assert w.known_slots(JoinedTable(Scope.GPU, [c, _table("d1")])) is None


def test_a_new_table_finds_held_entities_and_allocates_only_named_rows() -> None:
    """A relay's table after a node joined its rack lists the rack's other nodes, held
    already: found at once. An entity no row names is not allocated (one the store forgot
    must not come back)."""
    store = WindowStore()
    w = store[Scope.GPU]
    w.slots_for(_table("a1"), store.registry, used=np.arange(2, dtype=np.int32))
    grown = _table("a1", "new", "unnamed")
    slots = w.slots_for(grown, store.registry, used=np.array([2, 3], np.int32))
    assert slots.tolist() == [0, 1, 2, 3, -1, -1]
    assert [e.key for e in w.entities] == ["a1:gpu0", "a1:gpu1", "new:gpu0", "new:gpu1"]


def test_the_sqlite_sink_keeps_a_joined_tables_parts() -> None:
    db = sqlite3.connect(":memory:")
    for sql in create_sql(Scope.GPU):
        db.execute(sql)
    state = ScopeState(Scope.GPU, db)
    a, b = _table("a1", "a2"), _table("b1")
    joined = JoinedTable(Scope.GPU, [a, b])
    slots = state.slots(joined)
    assert [state.keys[s] for s in slots.tolist()] == [e.key for e in joined.entities]
    state.slot.clear()  # nothing found by key from here on: only the parts' kept slots
    assert state.slots(JoinedTable(Scope.GPU, [b, a])).tolist() == [
        *slots[4:].tolist(), *slots[:4].tolist()]
