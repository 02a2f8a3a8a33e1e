"""Coalesced ingest: many senders' small writes through one window-store ingest.

Every node agent posts a few hundred rows every round; the window store and the sinks cost
about the same per call whatever its size (`python -m bench.collectors`, section 3), so 1,250
agents' calls cost a core where one call of their rows costs a tenth of it. Each request is
still inflated, parsed and validated on its own (its parse rejections keep their line
numbers); its Batch then waits up to `window_s` and goes with the others that arrived
meanwhile through ONE `Pipeline.ingest` (the same lock, the same thread pool, the sinks see
one merged result). Each request is answered with what its own ingest would have answered:
the ingest-stage rejections name an entity, and an entity belongs to exactly one request of a
merged ingest, so each is handed back to its sender with the samples it refused, and the
samples each request got kept are counted from the accepted rows of its own entities.

Order and limits, as for requests ingested one by one:
- Requests are merged only in arrival order, and a request that shares an entity with one
  already in the merged ingest starts the next one: a resend or a duplicate is ingested after
  what came before it, as today.
- A request naming an entity the store does not hold yet (new entities are admitted per
  request: `ingest.max_new_gpus_per_batch`), or one larger than `ALONE_CELLS` (a relay's
  batch, already one large call, and whose `max_samples_per_batch` applies to itself), is
  ingested alone, exactly as without coalescing. So a merged ingest only meets entities the
  store holds, and no merged ingest exceeds `max_samples_per_batch`.
- A merged ingest lists every rejection (detail_limit), so a request's own are all found; its
  answer lists the first 200 as always. Only the wording of what is past those 200 differs
  (a count of how many more, never the per-site summary of one large call); the counts are
  exact.
- GPU identities (Batch.identity) are joined field by field, newer on top by the sender's
  round time (collectors.identity.merge_into), so they order nothing: a request that carries
  only identities joins any group.
- A sender that goes away while it waits changes nothing: its batch was parsed and is
  ingested once with the others (as a request already in its worker thread is today).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from anyio.to_thread import run_sync

from collectors import identity
from collectors.catalog import CATALOG, Kind, Scope
from collectors.frames import Batch, Entity, EntityTable, EventFrame, Frame, JoinedTable
from collectors.table_cache import TableCache, entity_budget
from service.pipeline import Pipeline
from service.stages.ingest import MAX_DETAILED_REJECTIONS, IngestResult

log = logging.getLogger(__name__)

ALONE_CELLS = 50_000  # a request with more values than this is one large call already
GROUP_CELLS = 1_000_000  # values in one merged ingest at most


@dataclass(slots=True)
class Pending:
    """One request's parsed batch, waiting: the entity keys it names (rows and events), its
    values, whether it must be ingested alone, and where its answer goes."""

    batch: Batch
    keys: frozenset[str]
    cells: int
    alone: bool
    done: asyncio.Future[IngestResult] = field(repr=False)


def plan(pipeline: Pipeline, batch: Batch, cache: PlanCache | None = None
         ) -> tuple[frozenset[str], int, bool]:
    """The entity keys a batch names, its values, and whether it must go alone (it names an
    entity the store does not hold, or it is large). Run beside parsing. A frame whose table
    the store has met (its slot lookup cached by table identity) costs no per-entity work:
    the store tells which of its rows hold a slot, and `cache` keeps the table's keys."""
    store = pipeline.store
    keys: set[str] = set()
    cached: list[frozenset[str]] = []  # the cache's sets, joined once at the end
    cells = 0
    new = False
    for frame in batch.frames.values():
        if not len(frame):
            continue
        cells += frame.values.size
        w = store[frame.scope]
        known = w.known_slots(frame.entities)
        if cache is not None:
            # Kept from a table's first request on (a node's first round, which goes alone
            # as it names new entities), so its second round costs no per-entity work.
            cached.append(cache.keys(frame.entities, frame.rows))
            if new or (known is not None and bool((known[frame.rows] >= 0).all())):
                continue
            ents = frame.entities.entities
            new = any(w.slot(ents[i]) is None for i in np.unique(frame.rows).tolist())
            continue
        ents = frame.entities.entities
        for i in np.unique(frame.rows).tolist():
            e = ents[i]
            keys.add(e.key)
            new = new or w.slot(e) is None
    for key in set(batch.events.keys):
        keys.add(key)
        cells += 1
        try:
            e = Entity.parse(key)
        except ValueError:
            continue  # refused by ingest, naming this key
        new = new or store[e.scope].slot(e) is None
    if keys:
        cached.append(frozenset(keys))
    # A node agent's body names a few tables' keys: one union, no copy of a set into a set.
    joined = cached[0] if len(cached) == 1 else frozenset().union(*cached)
    return joined, cells, new or cells > ALONE_CELLS


class PlanCache:
    """Per entity table (by identity: a mapper or decoder keeps one per sender layout), its
    entity keys: all of them as one set (a node agent's own table, every row named each
    round) and one by one (a mapper's table that many senders' frames share). Tables never
    change, so nothing here goes stale. Bounded by tables and by the keys they hold
    (collectors.table_cache): an Arrow sender chooses its tables' sizes, so a count alone
    bounds nothing; and a mapper's superseded tables leave, its current one stays."""

    def __init__(self, max_tables: int = 32_768, max_entities: int = 1_000_000) -> None:
        self._keys: TableCache[tuple[frozenset[str], npt.NDArray[np.object_]]] = TableCache(
            max_tables, max_entities)

    def keys(self, table: EntityTable, rows: npt.NDArray[np.int32]) -> frozenset[str]:
        """The keys of the table's entities that `rows` name."""
        got = self._keys.get(table)
        if got is None:
            names = [e.key for e in table.entities]
            arr = np.empty(len(names), object)
            arr[:] = names
            got = (frozenset(names), arr)
            self._keys.put(table, got)
        if len(rows) >= len(table) and np.bincount(rows, minlength=len(table)).all():
            return got[0]
        return frozenset(got[1][np.unique(rows)].tolist())


class Coalescer:
    """Collects parsed write batches for `window_s` and ingests them together (see above)."""

    def __init__(self, pipeline: Pipeline, window_s: float, clock: Callable[[], float],
                 observe: Callable[[float], None] | None = None) -> None:
        self.pipeline = pipeline
        self.clock = clock  # the service's time, which each merged ingest runs at
        self.window_s = window_s
        self.observe = observe
        self._pending: list[Pending] = []
        self._flusher: asyncio.Task[None] | None = None
        self.ingests = 0  # pipeline ingests made, and the requests they took (for the bench)
        self.requests = 0

    @functools.cached_property
    def plans(self) -> PlanCache:
        """Bounded by what the store's scopes may hold (made when first asked for)."""
        return PlanCache(max_entities=sum(
            entity_budget(w.max_entities) for w in self.pipeline.store.scopes.values()))

    def plan(self, batch: Batch) -> tuple[frozenset[str], int, bool]:
        """`plan` with this coalescer's cache; in a worker thread, beside parsing."""
        return plan(self.pipeline, batch, self.plans)

    async def ingest(self, batch: Batch, plan_: tuple[frozenset[str], int, bool]
                     ) -> IngestResult:
        """This request's own result, once the ingest that took its batch has run."""
        loop = asyncio.get_running_loop()
        keys, cells, alone = plan_
        item = Pending(batch, keys, cells, alone, loop.create_future())
        self._pending.append(item)
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        # A sender that goes away does not take its batch back: it is ingested with the rest.
        return await asyncio.shield(item.done)

    async def _flush(self) -> None:
        while self._pending:
            await asyncio.sleep(self.window_s)
            items, self._pending = self._pending, []
            loop = asyncio.get_running_loop()
            await run_sync(self._ingest_all, items, loop)

    def _ingest_all(self, items: list[Pending], loop: asyncio.AbstractEventLoop) -> None:
        """In a worker thread: the items' groups in arrival order, each answered when done."""
        # One hand-over to the event loop per group, not per request: each is a wake-up of
        # the loop (a write to its self-pipe), and a merged ingest answers dozens at once.
        for group in groups(items):
            try:
                results = self._ingest_group(group)
            except BaseException as e:  # each waiting request answers its 500
                loop.call_soon_threadsafe(_fail_all, [it.done for it in group], e)
                if not isinstance(e, Exception):
                    raise
                continue
            loop.call_soon_threadsafe(_settle_all, [it.done for it in group], results)

    def _ingest_group(self, group: Sequence[Pending]) -> list[IngestResult]:
        now = self.clock()
        t0 = time.perf_counter()
        self.ingests += 1
        self.requests += len(group)
        if len(group) == 1:
            res = self.pipeline.ingest(group[0].batch, now, from_wire=True)
        else:
            merged = merge([it.batch for it in group])
            limit = sum(it.cells + len(it.batch.rejected) + sum(map(len, it.batch.frames.values()))
                        for it in group) + 1
            res = self.pipeline.ingest(merged.batch, now, from_wire=True, detail_limit=limit)
        if self.observe is not None:
            self.observe(time.perf_counter() - t0)
        return [res] if len(group) == 1 else split(res, group, merged)


def _settle_all(futs: list[asyncio.Future[IngestResult]], results: list[IngestResult]) -> None:
    for fut, res in zip(futs, results, strict=True):
        if not fut.done():
            fut.set_result(res)


def _fail_all(futs: list[asyncio.Future[IngestResult]], e: BaseException) -> None:
    for fut in futs:
        if not fut.done():
            fut.set_exception(e)


def groups(items: Sequence[Pending]) -> list[list[Pending]]:
    """Consecutive runs of items that may share one ingest: none of them alone, no entity
    named twice, at most GROUP_CELLS values. Arrival order is kept within and across runs."""
    out: list[list[Pending]] = []
    cur: list[Pending] = []
    seen: set[str] = set()
    cells = 0
    for it in items:
        if it.alone or (cur and (not seen.isdisjoint(it.keys) or cells + it.cells > GROUP_CELLS)):
            if cur:
                out.append(cur)
            cur, seen, cells = [], set(), 0
            if it.alone:
                out.append([it])
                continue
        cur.append(it)
        seen |= it.keys
        cells += it.cells
    if cur:
        out.append(cur)
    return out


@dataclass(slots=True)
class Merged:
    """Batches joined: per scope, the request each entity-table index belongs to (-1: none;
    within a merged ingest an entity belongs to one request); per request, its events."""

    batch: Batch
    owner: dict[Scope, np.ndarray]
    event_counts: list[int]


def merge(batches: Sequence[Batch]) -> Merged:
    """One Batch of several requests' frames, events, identities and parse rejections (the parse
    rejections first in the result's list, as ingest lists them; the sinks and the service's
    counters see them as before, each request keeps its own). Requests parsed by one mapper
    share its entity table, which is kept (the window store and the sinks resolve a table once
    and cache it by identity); distinct tables are joined with their rows offset."""
    out = Batch()
    owner: dict[Scope, np.ndarray] = {}
    scopes = list(dict.fromkeys(s for b in batches for s in b.frames))
    for scope in scopes:
        parts = [(i, b.frames[scope]) for i, b in enumerate(batches) if scope in b.frames]
        offset: dict[int, int] = {}
        tables: list[EntityTable] = []
        joined = 0  # entities of the tables so far (a running sum: not one per part)
        for _, f in parts:
            if id(f.entities) not in offset:
                offset[id(f.entities)] = joined
                tables.append(f.entities)
                joined += len(f.entities)
        table = tables[0] if len(tables) == 1 else JoinedTable(scope, tables)
        rows = [f.rows + np.int32(offset[id(f.entities)]) for _, f in parts]
        merged_rows = np.concatenate(rows).astype(np.int32, copy=False)
        out.add(Frame(table, merged_rows, np.concatenate([f.ts for _, f in parts]),
                      np.concatenate([f.values for _, f in parts])))
        own = np.full(len(table), -1, np.int64)
        own[merged_rows] = np.repeat([i for i, _ in parts], [len(r) for r in rows])
        owner[scope] = own
    events = EventFrame()
    for b in batches:
        events.extend(b.events)
        if b.identity:  # a GPU's, field by field, newer on top (a resend undoes nothing)
            identity.merge_into(out.identity, b.identity)
    out.events = events
    out.rejected = [r for b in batches for r in b.rejected]
    return Merged(out, owner, [len(b.events) for b in batches])


def _is_event_metric(metric: str | None) -> bool:
    """A rejection with this metric came from the event stage (an event metric, or a name
    that is no catalog metric: only events are refused for an unknown one)."""
    if metric is None:
        return False
    return metric not in CATALOG or CATALOG[metric].kind is Kind.EVENT


def split(res: IngestResult, group: Sequence[Pending], merged: Merged) -> list[IngestResult]:
    """Each request's own result of a merged ingest: its parse rejections first, then the
    ingest rejections of its entities; accepted = its kept values and events."""
    per = []
    for it in group:
        r = IngestResult(rejected=len(it.batch.rejected))
        r.rejections = it.batch.rejected[:MAX_DETAILED_REJECTIONS]
        per.append(r)
    events_refused = [0] * len(group)
    parsed = len(merged.batch.rejected)  # listed first; each request has its own already
    owner = ({key: i for i, it in enumerate(group) for key in it.keys}
             if len(res.rejections) > parsed else {})  # rare: not built for a clean ingest
    for rej, n in zip(res.rejections[parsed:], res.refused_n[parsed:], strict=True):
        i = owner.get(rej.entity) if rej.entity is not None else None
        if i is None:  # every refusal of a merged ingest names one of its entities
            log.error("a coalesced ingest refused what no request named: %s", rej)
            i = 0
        r = per[i]
        r.rejected += n
        if len(r.rejections) < MAX_DETAILED_REJECTIONS:
            r.rejections.append(rej)
        if _is_event_metric(rej.metric):
            events_refused[i] += 1
    for scope, frame in res.clean.frames.items():
        if not len(frame):
            continue
        req = merged.owner[scope][frame.rows]
        kept = np.count_nonzero(~np.isnan(frame.values), axis=1)
        for i, n in enumerate(np.bincount(req, weights=kept, minlength=len(group)).tolist()):
            per[i].accepted += int(n)
    for i, n in enumerate(merged.event_counts):
        per[i].accepted += n - events_refused[i]
    return per
