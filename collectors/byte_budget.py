"""A cache bounded by what it holds in bytes, not by its count of entries.

A count bound is no bound when an entry's size is the sender's to choose: 16,384 entity tables
of one key each cost nothing, 16,384 of 500,000 keys each cost gigabytes. Each entry is put
with its cost (an estimate the caller makes, in bytes); past `max_bytes` (or `max_entries`)
the least recently used entries go first, and an entry costing more than the whole budget is
not kept at all. Safe from many threads: a lock is held only around the dictionary's own
operations, never while a caller builds what it puts.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ByteBudgetCache(Generic[K, V]):
    def __init__(self, max_bytes: int, max_entries: int) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.bytes = 0  # the costs of the entries held, summed
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        with self._lock:
            got = self._items.get(key)
            if got is None:
                return None
            self._items.move_to_end(key)
            return got[0]

    def put(self, key: K, value: V, cost: int) -> bool:
        """Keep `value` at `cost` bytes, evicting the least recently used as needed; False
        (nothing kept, nothing evicted) when it alone is over the budget."""
        if cost > self.max_bytes or self.max_entries <= 0:
            return False
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            while self._items and (self.bytes + cost > self.max_bytes
                                   or len(self._items) >= self.max_entries):
                _, (_, gone) = self._items.popitem(last=False)
                self.bytes -= gone
            self._items[key] = (value, cost)
            self.bytes += cost
            return True

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0
