"""A lookup kept per entity table, by the table's identity, for as long as the table lives.

A line-protocol mapper hands out a new, longer table each time a body names an entity it has
not met. A cache that held its tables kept every superseded snapshot: under a flood of new
names, hundreds of tables of tens of thousands of entities each (about 1 GB), and a full
garbage collection walked every reference they held for a second while every thread waited
(`python -m bench.fuzz`). Here an entry holds its table by a weak reference and leaves when
the table's maker lets it go, so the cache adds no table to what the makers (a mapper, an
Arrow decoder) hold themselves. It is bounded besides, least recently used out first, by
tables and by the entities they name, for a maker that keeps many.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from collectors.frames import EntityTable

V = TypeVar("V")
# Entities cached tables may name beyond `per_entity` times what the store holds: room for a
# mapper's own table (up to twice what the store holds plus its slack) and the senders' tables.
SLACK_ENTITIES = 65_536


def entity_budget(max_entities: int, per_entity: int = 4) -> int:
    """The entities the tables of one store scope may name together: every sender's table
    (about what the store holds), a mapper's (up to twice that, plus slack) and room to spare."""
    return per_entity * max_entities + SLACK_ENTITIES


class TableCache(Generic[V]):
    """`value` per live table by identity; least recently used out first past `max_tables`
    tables or `max_entities` entities named by them all (the newest is always kept). Safe
    from several threads: parsers look up while an ingest stores, and a table's last
    reference may go in any thread (the lock is reentrant for that thread's own removal)."""

    def __init__(self, max_tables: int, max_entities: int | None = None) -> None:
        """`max_entities` None: bounded by tables alone (each held only while it lives)."""
        self.max_tables = max_tables
        self.max_entities = max_entities
        self.entities = 0  # named by the tables held
        self._items: OrderedDict[int, tuple[weakref.ref[EntityTable], int, V]] = OrderedDict()
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, table: EntityTable) -> V | None:
        key = id(table)
        with self._lock:
            got = self._items.get(key)
            if got is None or got[0]() is not table:  # absent, or another table's id
                return None
            self._items.move_to_end(key)
            return got[2]

    def put(self, table: EntityTable, value: V) -> None:
        key = id(table)
        with self._lock:
            self._drop(key)
            self._items[key] = (weakref.ref(table, self._gone(key)), len(table), value)
            self.entities += len(table)
            while len(self._items) > 1 and self._over():
                self.entities -= self._items.popitem(last=False)[1][1]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.entities = 0

    def _over(self) -> bool:
        return len(self._items) > self.max_tables or (
            self.max_entities is not None and self.entities > self.max_entities)

    def _drop(self, key: int) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self.entities -= old[1]

    def _gone(self, key: int) -> Callable[[weakref.ref[EntityTable]], None]:
        """The callback that removes a table's entry when it is freed (never a newer table's
        under the same id: an id is reused only after its object's callbacks ran)."""

        def gone(ref: weakref.ref[EntityTable]) -> None:
            with self._lock:
                got = self._items.get(key)
                if got is not None and got[0] is ref:
                    self._drop(key)

        return gone
