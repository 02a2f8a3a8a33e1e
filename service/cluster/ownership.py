"""Which nodes this shard owns, enforced where data enters the window store and where alerts
and remediation act, whatever a sender says (a write's `X-Gpuhealth-Node` header is only a
routing hint, service.api.shard_route).

One process without a map owns every node. A static map (`cluster.shards`) or the live one
(service.cluster.members) gives each node one owner; the rows and events of any other node
are taken out of a batch before ingest and refused by entity, naming the owner, so a shard
never stores, scores, alerts on or drains another shard's node, and fleet totals count
each node once (on its owner). Another node's GPU identities are taken out silently: they
are no samples, and that node's samples, refused with the reason, tell the sender."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.frames import Batch, EntityTable, JoinedTable
from service.cluster.shard_map import Shard, ShardMap

CACHED_TABLES = 64  # entity tables whose owned mask is remembered (senders reuse theirs)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Samples of one entity (or one event) another shard owns."""

    n: int
    reason: str
    entity: str
    metric: str | None = None


class Ownership:
    """`owns(node)` under the map in force: the static one, the live one (read per call: one
    reference), or none (every node is this process's)."""

    def __init__(self, static: ShardMap | None,
                 live: Callable[[], ShardMap | None] | None = None) -> None:
        self._static, self._live = static, live
        self._known: tuple[ShardMap | None, dict[str, Shard | None]] = (None, {})
        self._tables: dict[int, tuple[EntityTable, ShardMap, npt.NDArray[np.bool_]]] = {}

    @property
    def sharded(self) -> bool:
        return self._static is not None or self._live is not None

    def map(self) -> ShardMap | None:
        return self._live() if self._live is not None else self._static

    def owner(self, node: str) -> Shard | None:
        """The node's owner; None for a name no shard can own (ingest refuses it anyway) or,
        under live membership, while this shard is in no map."""
        smap = self.map()
        if smap is None:
            return None
        seen, known = self._known
        if seen is not smap:
            known = {}
            self._known = (smap, known)
        if node not in known:
            if len(known) > 1_000_000:  # names come from the wire
                known.clear()
            try:
                known[node] = smap.owner(node)
            except ValueError:
                known[node] = None
        return known[node]

    def owns(self, node: str) -> bool:
        """Whether this shard owns `node`; always without a map. A name no shard can own is
        left to ingest, which refuses it by its own rules."""
        if not self.sharded:
            return True
        smap = self.map()
        if smap is None:  # live membership, not in the published map: it owns nothing
            return False
        got = self.owner(node)
        return got is None or got.id == smap.local.id

    def keep_owned(self, batch: Batch) -> tuple[Batch, list[Refusal]]:
        """`batch` less every row, event and GPU identity of a node another shard owns, and
        what was taken out (one refusal per entity, or per event; none for an identity). The
        batch itself when all is owned."""
        if not self.sharded:
            return batch, []
        smap = self.map()
        out = Batch(rejected=batch.rejected, identity=batch.identity)
        refused: list[Refusal] = []
        changed = False
        if batch.identity:  # a few per node every few minutes: by key, no table to cache
            owned = {k: v for k, v in batch.identity.items() if self.owns(k.split(":", 1)[0])}
            if len(owned) < len(batch.identity):
                out.identity, changed = owned, True
        for scope, frame in batch.frames.items():
            mine = self._owned_rows(frame.entities, smap)
            keep = mine[frame.rows]
            if keep.all():
                out.frames[scope] = frame
                continue
            changed = True
            gone = ~keep
            cells = np.count_nonzero(~np.isnan(frame.values[gone]), axis=1)
            per = np.bincount(frame.rows[gone], weights=cells, minlength=len(frame.entities))
            for i in np.unique(frame.rows[gone]).tolist():
                e = frame.entities[i]
                refused.append(Refusal(int(per[i]), self.reason(e.node, smap), e.key))
            out.frames[scope] = frame.take(keep)
        ev = batch.events
        if len(ev):
            keep_ev = [self.owns(k.split(":", 1)[0]) for k in ev.keys]
            if not all(keep_ev):
                changed = True
                for key, ts, metric, value, ok in zip(ev.keys, ev.ts, ev.metrics, ev.values,
                                                      keep_ev, strict=True):
                    if ok:
                        out.events.add(key, ts, metric, value)
                    else:
                        refused.append(Refusal(1, self.reason(key.split(":", 1)[0], smap),
                                               key, metric))
            else:
                out.events = ev
        return (out, refused) if changed else (batch, [])

    def reason(self, node: str, smap: ShardMap | None) -> str:
        owner = self.owner(node)
        if smap is None or owner is None:
            return (f"node {node} is not this shard's: it is in no shard map yet, and no "
                    "shard stores or scores what it does not own; resend shortly")
        return (f"node {node} belongs to shard {owner.id} ({owner.url}), not to shard "
                f"{smap.local.id}: not stored or scored here; write it to its owner")

    def _owned_rows(self, table: EntityTable, smap: ShardMap | None) -> npt.NDArray[np.bool_]:
        got = self._tables.get(id(table))
        if got is not None and got[0] is table and got[1] is smap:
            return got[2]
        if isinstance(table, JoinedTable):  # a coalesced ingest: its parts are cached
            return np.concatenate([self._owned_rows(t, smap) for t in table.parts]
                                  or [np.zeros(0, bool)])
        mine = np.fromiter((self.owns(e.node) for e in table.entities), bool, len(table))
        if smap is not None:
            if len(self._tables) >= CACHED_TABLES:
                self._tables.pop(next(iter(self._tables)))
            self._tables[id(table)] = (table, smap, mine)
        return mine
