"""The relay's roster: per scope, one entity table that every body it forwards shares.

The service keeps its per-table work for a table it has met (collectors.arrow_batch's Decoder
finds the table by its dictionary's bytes, the window store and the SQLite sink their slots
by the table's identity, the coalescer its keys): a node agent's body names the same table
every round, so only its first round costs Python per entity. A relay's body joins whichever
nodes pushed within one flush interval, a different set each time; with a table of just those
nodes every body was a table the service had never met, and it paid per entity again for
every node of every body (`python -m bench.collectors --profile ... --profile-relays`: the
Decoder's entity parse, the window store's and the coalescer's slot lookups were most of the
service's time). So the relay writes every body against ONE table per scope: every entity it
has forwarded, in first-seen order, the rows naming the ones this body holds. The dictionary's
bytes are the same from body to body, and the service meets a relay's table once, or again
when a node joins the rack (one new table) or the roster is pruned.

An entity no body named for `idle_s` (a node moved, a GPU gone) is dropped at the next flush,
so a body does not carry the keys of a rack's past for ever; the window store only ever
resolves the rows a frame names, so a listed entity no row names is not revived.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from collectors.frames import Entity, EntityTable

I32 = npt.NDArray[np.int32]
IDLE_S = 900.0  # an entity no body named for this long leaves the roster
MAX_ENTITIES = 2_000_000  # per scope; past it the roster starts over


class _Scope:
    """One scope's roster: its entities, their table, when each was last named."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.entities: list[Entity] = []
        self.index: dict[Entity, int] = {}
        self.last = np.zeros(0)
        self.table = EntityTable(scope, ())
        self.changed = False
        # per pushed table (by identity: the relay's Decoder and mappers keep one per node
        # layout), the roster row of each of its entities
        self.of_table: dict[int, tuple[EntityTable, I32]] = {}

    def rows_of(self, table: EntityTable) -> I32:
        got = self.of_table.get(id(table))
        if got is not None and got[0] is table:
            return got[1]
        out = np.empty(len(table), np.int32)
        for i, e in enumerate(table.entities):
            j = self.index.get(e)
            if j is None:
                j = self.index[e] = len(self.entities)
                self.entities.append(e)
                self.changed = True
            out[i] = j
        if len(self.of_table) >= 65_536:
            self.of_table.clear()
        self.of_table[id(table)] = (table, out)
        return out

    def settle(self) -> EntityTable:
        if self.changed:
            self.table = EntityTable(self.scope, tuple(self.entities))
            if len(self.last) < len(self.entities):
                self.last = np.concatenate([self.last, np.full(len(self.entities)
                                                                - len(self.last), np.nan)])
            self.changed = False
        return self.table

    def prune(self, now: float, idle_s: float) -> bool:
        """Drop the entities no body named for `idle_s`; True when any went."""
        n = len(self.entities)
        last = self.last[:n]
        stale = last < now - idle_s
        if n <= MAX_ENTITIES and not stale.any():
            return False
        keep = [] if n > MAX_ENTITIES else np.flatnonzero(~stale).tolist()
        self.entities = [self.entities[i] for i in keep]
        self.index = {e: i for i, e in enumerate(self.entities)}
        self.last = last[keep] if keep else np.zeros(0)
        self.of_table.clear()
        self.changed = True
        return True


class Roster:
    """Per scope, the table the relay's bodies share (see the module's doc). Used from the
    relay's flush only (one thread)."""

    def __init__(self, idle_s: float = IDLE_S, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.idle_s, self.clock = idle_s, clock
        self._scopes: dict[Scope, _Scope] = {}
        self.tables_made = 0  # distinct tables written (each one the service meets anew)

    def rows(self, scope: Scope, table: EntityTable, rows: I32) -> I32:
        """A pushed frame's rows as rows of the roster's table for `scope`."""
        s = self._scopes.get(scope)
        if s is None:
            s = self._scopes[scope] = _Scope(scope)
        return s.rows_of(table)[rows]

    def table(self, scope: Scope, named: I32) -> EntityTable:
        """The roster's table for `scope` once a body's rows are all placed (`named`: the
        rows it holds, stamped as named now)."""
        s = self._scopes[scope]
        changed = s.changed
        out = s.settle()
        s.last[named] = self.clock()
        self.tables_made += changed
        return out

    def prune(self) -> None:
        """At a flush's start: drop what no body named for idle_s."""
        now = self.clock()
        for s in self._scopes.values():
            s.prune(now, self.idle_s)
