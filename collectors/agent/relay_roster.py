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

Bounded, as names come from the wire (issue 29: one agent naming 50,000 names made every body
of its rack 417x larger for 15 minutes):
- a name joins the shared table at the second flush that names it: one named once (a typo,
  a flood of made-up names) travels only in its own flush's bodies, listed after the shared
  table's (so a cold start's first body lists what its second will share, in that order);
- one push may name at most `nodes_per_push` nodes, `names_per_node` names of one node and
  `names_per_push` in all (an agent names its own node: ~170 names for 8 GPUs); past them
  its lines are refused (bound_push, at the relay's answer);
- the shared table holds at most `max_entities` per scope; names past it stay per body.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from collectors.compat import dataclass, zip_strict
from collectors.frames import Batch, Entity, EntityTable, EventFrame, Frame, Rejection

I32 = npt.NDArray[np.int32]
IDLE_S = 900.0  # an entity no body named for this long leaves the roster
LISTED = 100  # refused names listed one by one in an answer; the rest counted


@dataclass(frozen=True, slots=True)
class RosterLimits:
    nodes_per_push: int = 64
    names_per_node: int = 4_096  # in one push (a DGX node: 8 GPUs, 144 links, ~12 ports)
    names_per_push: int = 16_384
    max_entities: int = 400_000  # in the shared table, per scope


def bound_push(batch: Batch, limits: RosterLimits) -> list[Rejection]:
    """Refuse (in place) the rows, events and identities naming more than one push may: nodes past
    `nodes_per_push`, names of a node past `names_per_node`, names past `names_per_push`.
    The rejections, the first LISTED by name."""
    per_node: dict[str, int] = {}
    total = 0
    refused: list[Rejection] = []
    n_refused = 0

    def take(e: Entity | str) -> bool:
        nonlocal total, n_refused
        node = e.node if isinstance(e, Entity) else e.split(":", 1)[0]
        n = per_node.get(node)
        why = None
        if n is None and len(per_node) >= limits.nodes_per_push:
            why = f"more than {limits.nodes_per_push} nodes in one push"
        elif (n or 0) >= limits.names_per_node:
            why = f"more than {limits.names_per_node} names of node {node[:64]} in one push"
        elif total >= limits.names_per_push:
            why = f"more than {limits.names_per_push} names in one push"
        if why is None:
            per_node[node] = (n or 0) + 1
            total += 1
            return True
        n_refused += 1
        if len(refused) < LISTED:
            key = e.key if isinstance(e, Entity) else e
            refused.append(Rejection(f"name refused: {why}", entity=key))
        return False

    gpus: set[str] = set()  # GPU keys taken: their identities are no further names
    for scope, f in list(batch.frames.items()):
        used = np.unique(f.rows).tolist()
        ents = f.entities.entities
        ok = np.ones(len(ents), bool)
        for i in used:
            ok[i] = take(ents[i])
            if ok[i] and scope is Scope.GPU:
                gpus.add(ents[i].key)
        if not ok.all():
            keep = ok[f.rows]
            batch.frames[scope] = Frame(f.entities, f.rows[keep], f.ts[keep], f.values[keep])
    if batch.identity:  # a GPU named by its identity alone is a name like any other
        batch.identity = {k: v for k, v in batch.identity.items() if k in gpus or take(k)}
    ev = batch.events
    if len(ev):
        seen: dict[str, bool] = {}
        kept = EventFrame()
        for key, ts, metric, value in zip_strict(ev.keys, ev.ts, ev.metrics, ev.values):
            if key not in seen:
                seen[key] = take(key)
            if seen[key]:
                kept.add(key, ts, metric, value)
        batch.events = kept
    if n_refused > len(refused):
        refused.append(Rejection(f"name refused: and {n_refused - len(refused)} more names "
                                 "past the relay's bounds for one push"))
    return refused


class _Scope:
    """One scope's roster: its shared entities, their table, when each was last named, and
    the names met in one flush only so far (with that flush's number and time)."""

    def __init__(self, scope: Scope, max_entities: int) -> None:
        self.scope, self.max_entities = scope, max_entities
        self.entities: list[Entity] = []
        self.index: dict[Entity, int] = {}
        self.last = np.zeros(0)
        self.table = EntityTable(scope, ())
        self.changed = False
        self.seen: dict[Entity, tuple[int, float]] = {}  # on probation: (flush, time)
        # this flush's names outside the shared table, listed after it in its bodies
        self.tail: list[Entity] = []
        self.tail_index: dict[Entity, int] = {}
        self._with_tail: EntityTable | None = None
        # per pushed table (by identity: the relay's Decoder and mappers keep one per node
        # layout), the shared-table row of each of its entities (-1: not shared)
        self.of_table: dict[int, tuple[EntityTable, I32]] = {}

    def rows_of(self, table: EntityTable, used: I32, flush: int, now: float) -> I32:
        """Per entity of `table`, its row in this body's table: the shared table's, or (as
        -1 - k) the k-th of this flush's tail; only the rows `used` are placed (a table may
        list names no row of the push refers to: those go nowhere)."""
        got = self.of_table.get(id(table))
        if got is None or got[0] is not table:
            got = (table, np.fromiter((self.index.get(e, -1) for e in table.entities),
                                      np.int32, len(table)))
            if len(self.of_table) >= 65_536:
                self.of_table.clear()
            self.of_table[id(table)] = got
        out = got[1]
        if not (out < 0).any():
            return out
        missing = used[out[used] < 0]
        if not len(missing):
            return out
        out = out.copy()
        for i in missing.tolist():
            e = table.entities[i]
            j = self.index.get(e)
            if j is None:
                j = self._promoted(e, flush, now)
            if j is None:
                k = self.tail_index.get(e)
                if k is None:
                    k = self.tail_index[e] = len(self.tail)
                    self.tail.append(e)
                j = -1 - k
            out[i] = j
        return out

    def _promoted(self, e: Entity, flush: int, now: float) -> int | None:
        """The entity's shared row if this flush makes it shared (its second), else None."""
        first = self.seen.get(e)
        if first is None or first[0] == flush or len(self.entities) >= self.max_entities:
            if first is None:
                if len(self.seen) >= self.max_entities:
                    self.seen.clear()  # a flood of one-off names: forget them all
                self.seen[e] = (flush, now)
            return None
        del self.seen[e]
        j = self.index[e] = len(self.entities)
        self.entities.append(e)
        self.changed = True
        self.of_table.clear()
        return j

    def settle(self, rows: I32) -> tuple[EntityTable, I32]:
        """This body's table (the shared one, then its tail) and `rows` on it."""
        if self.changed:
            self.table = EntityTable(self.scope, tuple(self.entities))
            if len(self.last) < len(self.entities):
                self.last = np.concatenate([self.last, np.full(len(self.entities)
                                                                - len(self.last), np.nan)])
            self.changed = False
        if not self.tail:
            return self.table, rows
        if self._with_tail is None or len(self._with_tail) != len(self.entities) + len(
                self.tail):  # the bodies of one flush share it too
            self._with_tail = EntityTable(self.scope, (*self.entities, *self.tail))
        rows = np.where(rows < 0, len(self.entities) - 1 - rows, rows).astype(np.int32)
        return self._with_tail, rows

    def prune(self, now: float, idle_s: float) -> bool:
        """At a flush's start: drop the entities no body named for `idle_s` (True when any
        went); this flush's bodies start without a tail."""
        self.tail, self.tail_index, self._with_tail = [], {}, None
        if self.seen:
            self.seen = {e: v for e, v in self.seen.items() if v[1] >= now - idle_s}
        n = len(self.entities)
        last = self.last[:n]
        stale = last < now - idle_s
        if not stale.any():
            return False
        keep = np.flatnonzero(~stale).tolist()
        self.entities = [self.entities[i] for i in keep]
        self.index = {e: i for i, e in enumerate(self.entities)}
        self.last = last[keep] if keep else np.zeros(0)
        self.of_table.clear()
        self.changed = True
        return True


class Roster:
    """Per scope, the table the relay's bodies share (see the module's doc). Used from the
    relay's flush only (one thread)."""

    def __init__(self, idle_s: float = IDLE_S, clock: Callable[[], float] = time.monotonic,
                 limits: RosterLimits = RosterLimits()) -> None:
        self.idle_s, self.clock, self.limits = idle_s, clock, limits
        self._scopes: dict[Scope, _Scope] = {}
        self.tables_made = 0  # distinct shared tables written (each one the service meets)
        self.flushes = 0

    def rows(self, scope: Scope, table: EntityTable, rows: I32) -> I32:
        """A pushed frame's rows as rows of this body's table for `scope` (see settle)."""
        s = self._scopes.get(scope)
        if s is None:
            s = self._scopes[scope] = _Scope(scope, self.limits.max_entities)
        return s.rows_of(table, np.unique(rows), self.flushes, self.clock())[rows]

    def table(self, scope: Scope, rows: I32) -> tuple[EntityTable, I32]:
        """This body's table for `scope` once its rows are all placed, and the rows on it;
        the shared rows named are stamped as named now."""
        s = self._scopes[scope]
        changed = s.changed
        out = s.settle(rows)
        named = np.unique(rows[rows >= 0])
        s.last[named] = self.clock()
        self.tables_made += changed
        return out

    def shared(self, scope: Scope) -> int:
        """Names in the shared table of `scope`."""
        s = self._scopes.get(scope)
        return 0 if s is None else len(s.entities)

    def prune(self) -> None:
        """At a flush's start: drop what no body named for idle_s; a new flush begins."""
        self.flushes += 1
        now = self.clock()
        for s in self._scopes.values():
            s.prune(now, self.idle_s)
