"""The window store: per scope, per metric ring buffers indexed [time, entity slot].

Three resolutions (docs/design.md, "Columnar hot path"): raw samples at the base step for the last
minutes, and rollup tiers (1 min, 1 h by default) for hours to days. Counters are stored as the
increase over each step (reset-corrected by ingest), gauges as values, states as values. A rollup
bucket holds `agg` (gauge mean, counter sum, state max), plus the max (`hi`) or min (`lo`) of the
gauges some reader asks for (`WindowConfig.ranges`). Missing data stays NaN all the way up.

Layout is [metric, time, slot] so a detector's read of one metric over a window is a gather of a
few contiguous rows, vectorised over every entity at once.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.catalog import CATALOG, Kind, Metric, Scope
from collectors.frames import Entity, EntityTable, JoinedTable
from collectors.table_cache import TableCache, entity_budget
from models.detectors.view import time_total
from service.stages.counters import CounterState
from service.stages.rollup import FOLD_LAG, RunningBucket, reduce_rows
from service.stages.tier_sums import WindowSum

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class TierSpec:
    name: str
    step_s: float
    length: int


# The gauge maxima and minima the rollup tiers keep, as (metric, stat): what some reader asks a
# tier for with stat="hi"/"lo". Only the predictor's hourly inputs do (models/predictor/
# features.py: the hour's GPU and HBM temperature peaks, its least thermal margin); no rule,
# API route or sink reads a tier's max or min. Keeping both for every gauge cost 22 KB a GPU
# (about 224 MB at 10,000 GPUs) that nothing read. A read of a range not kept raises, so a
# reader added later fails its tests until its range is listed here.
RANGES: tuple[tuple[str, str], ...] = (
    ("gpu_temp", "hi"), ("mem_temp", "hi"), ("gpu_temp_margin", "lo"))


@dataclass(frozen=True, slots=True)
class WindowConfig:
    step_s: float = 5.0
    raw_length: int = 120  # 10 min of 5-s samples: reactive rules and hysteresis
    # Days: the predictor's long memory reads each entity's last 5 finished days before the
    # hour's day from a window of 48 hours (models/predictor/long_memory.py).
    tiers: tuple[TierSpec, ...] = (TierSpec("1m", 60.0, 120), TierSpec("1h", 3600.0, 168),
                                   TierSpec("1d", 86400.0, 7))
    # NVLink has 12-18 links per GPU, so its windows are kept shorter to hold memory per GPU
    # under budget; link rules look at minutes to a day.
    nvlink_raw_length: int = 60
    nvlink_tiers: tuple[TierSpec, ...] = (TierSpec("1m", 60.0, 60), TierSpec("1h", 3600.0, 72))
    # None: every gauge keeps both max and min in every tier (the layout before; the memory
    # benchmark measures both).
    ranges: tuple[tuple[str, str], ...] | None = RANGES

    def __post_init__(self) -> None:
        gauges = {m.name for m in CATALOG if m.kind is Kind.GAUGE}
        for metric, stat in self.ranges or ():
            if metric not in gauges or stat not in ("hi", "lo"):
                raise ValueError(f"window ranges: ({metric!r}, {stat!r}) is not a gauge "
                                 "metric with stat 'hi' or 'lo'")

    def range_cols(self, metrics: tuple[Metric, ...], stat: str) -> npt.NDArray[np.intp]:
        """Columns of `metrics` whose `stat` ("hi" or "lo") the tiers keep, ascending."""
        if self.ranges is None:
            return np.flatnonzero([m.kind is Kind.GAUGE for m in metrics]).astype(np.intp)
        want = {m for m, s in self.ranges if s == stat}
        return np.flatnonzero([m.name in want for m in metrics]).astype(np.intp)

    def for_scope(self, scope: Scope) -> tuple[int, tuple[TierSpec, ...]]:
        if scope is Scope.NVLINK:
            return self.nvlink_raw_length, self.nvlink_tiers
        return self.raw_length, self.tiers


# An entity whose reports span less than this many steps is on probation: forgotten after the
# raw window of silence, not the longest window (a flood of one-line names frees its room).
PROBATION_STEPS = 3
# Tables whose slots are cached per scope (by identity): a mapper keeps one per sender layout,
# so one per node agent; a coalesced ingest joins them and reuses each one's slots. Bounded by
# the entities they name too (collectors.table_cache): a name flood's superseded tables go.
TABLE_CACHE = 32_768
PRESSED = 0.9  # share of the entity limit from which entities on probation are forgotten


class _Ring:
    """One resolution: data[metric, row, slot], with the absolute bucket index held per row."""

    def __init__(self, n_metrics: int, length: int, capacity: int, n_hi: int = 0,
                 n_lo: int = 0) -> None:
        """n_hi, n_lo: how many (gauge) columns also keep their max, their min; 0 for the raw
        ring."""
        self.length = length
        self.agg: F32 = np.full((n_metrics, length, capacity), np.nan, np.float32)
        self.hi: F32 | None = None
        self.lo: F32 | None = None
        if n_hi:
            self.hi = np.full((n_hi, length, capacity), np.nan, np.float32)
        if n_lo:
            self.lo = np.full((n_lo, length, capacity), np.nan, np.float32)
        self.held: I64 = np.full(length, -1, np.int64)  # which bucket index each row holds

    def grow(self, capacity: int) -> None:
        self.agg = _widened(self.agg, capacity)
        if self.hi is not None:
            self.hi = _widened(self.hi, capacity)
        if self.lo is not None:
            self.lo = _widened(self.lo, capacity)

    def open(self, bucket: int) -> int:
        """Claim the row for `bucket`, clearing what it held before."""
        row = bucket % self.length
        if self.held[row] != bucket:
            for a in (self.agg, self.hi, self.lo):
                if a is not None:
                    a[:, row, :] = np.nan
            self.held[row] = bucket
        return row

    def rows(self, last: int, n: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
        """Rows of buckets last-n+1 .. last (oldest first) and which of them are really held."""
        want = np.arange(last - n + 1, last + 1, dtype=np.int64)
        rows = (want % self.length).astype(np.intp)
        return rows, self.held[rows] == want

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.agg, self.hi, self.lo) if a is not None)

    def take(self, keep: npt.NDArray[np.intp], n_old: int) -> None:
        """Keep only the slots `keep`, moved down in place (see `_squeeze`)."""
        for a in (self.agg, self.hi, self.lo):
            if a is not None:
                _squeeze(a, keep, n_old, np.nan, axis=2)


SQUEEZE_CHUNK = 256  # slots moved at once: bounds the copy a compaction makes
ROLLUP_CHUNK = 16_384  # slots a bucket's close re-reads at once: bounds its temporaries
# ... and at most about this many bytes of parent rows at once: an hour's close of the GPU scope
# (60 rows of some 40 metrics) gathered 10,000 GPUs' rows in one chunk, 140 MB of temporaries and
# the process's peak once the NVLink rules were sliced.
ROLLUP_BYTES = 16 << 20


def _widened(a: F32, capacity: int) -> F32:
    """`a` with its slot axis (the last) widened to `capacity`, NaN-filled, copied one metric
    plane at a time with a pause between planes: numpy holds the GIL while it copies, and a
    ring of a 10,000-GPU fleet is hundreds of MB, so one copy would stall every other thread
    (the API's event loop, /healthz) for a second when a node joins."""
    b = np.empty((*a.shape[:2], capacity), np.float32)
    have = a.shape[2]
    for i in range(a.shape[0]):
        b[i, :, :have] = a[i]
        b[i, :, have:] = np.nan
        time.sleep(0)  # releases the GIL: the event loop runs between planes
    return b


def _widened_last(a: npt.NDArray[np.generic], capacity: int,
                  fill: float) -> npt.NDArray[np.generic]:
    """`a` with its last (slot) axis widened to `capacity`, filled with `fill`."""
    b = np.full((*a.shape[:-1], capacity), fill, a.dtype)
    b[..., : a.shape[-1]] = a
    return b


def _squeeze(a: npt.NDArray[np.generic], keep: npt.NDArray[np.intp], n_old: int, fill: float,
             axis: int) -> None:
    """Move slots keep[i] to i along `axis`, in place, and clear slots len(keep)..n_old.
    keep is ascending, so keep[i] >= i: a chunk never overwrites a source a later chunk still
    reads. Slots before the first forgotten one do not move (phantoms are mostly the newest)."""
    k = len(keep)
    moved = np.flatnonzero(keep != np.arange(k))
    lead = (slice(None),) * axis
    for c0 in range(int(moved[0]) if len(moved) else k, k, SQUEEZE_CHUNK):
        idx = keep[c0:c0 + SQUEEZE_CHUNK]
        a[(*lead, slice(c0, c0 + len(idx)))] = np.take(a, idx, axis=axis)
        time.sleep(0)  # as in _widened: other threads run between chunks
    a[(*lead, slice(k, n_old))] = fill


@dataclass(frozen=True, slots=True)
class EntityLimits:
    """How many entities the store takes: window memory is fixed per entity (about 45 KB a
    GPU, 4 KB an NVLink link, 22 KB an IB port, a few KB a supply, fan or node), so names from
    the wire must not allocate it without bound. Limits are given in GPUs; links, ports,
    supplies, fans and nodes scale with them."""

    max_gpus: int = 20_000  # held at once (about 3.2 GB of windows with links and ports)
    max_new_gpus_per_batch: int = 1_024  # taken from one request; the rest in later ones
    # Every writer holds a write token (ingest.tokens set): a known sender's request is
    # admitted in full (max_gpus bounds it); the per-request cap stays for anonymous writes.
    trusted: bool = False
    links_per_gpu: int = 18  # NVSwitch systems (H100/H200: 18 NVLink links per GPU)
    ports_per_gpu: int = 2  # DGX: 8 compute + up to 4 storage ports per 8 GPUs
    # Chassis parts per GPU: a DGX H100 has 6 supplies and 12 fans (plus the supplies' own)
    # per 8 GPUs; a node of fewer GPUs has as many, so room for two nodes' worth.
    psus_per_gpu: int = 1
    fans_per_gpu: int = 4

    def _per_gpu(self, scope: Scope) -> int:
        return {Scope.NVLINK: self.links_per_gpu, Scope.IB_PORT: self.ports_per_gpu,
                Scope.PSU: self.psus_per_gpu, Scope.FAN: self.fans_per_gpu}.get(scope, 1)

    def total(self, scope: Scope) -> int:
        return self.max_gpus * self._per_gpu(scope)

    def per_batch(self, scope: Scope) -> int:
        return self.max_new_gpus_per_batch * self._per_gpu(scope)


# The scopes the store keeps windows for, in the order every per-scope loop takes them: the
# node's own sensors (inlet temperature, redundancy, host errors) are a scope like a GPU's.
STORED = (Scope.GPU, Scope.NVLINK, Scope.IB_PORT, Scope.PSU, Scope.FAN, Scope.NODE)
MAX_PENDING_NODES = 10_000  # nodes an answer names as pending; past it, "resend it all"


class Admission:
    """New entities one batch may still add, per scope, and why any were turned away.
    `pending`: the nodes some of whose new entities the per-request budget held back (not
    refused: the same body sent again takes the next share; service.api.write answers 503
    with Retry-After); `pending_more` when there were more than MAX_PENDING_NODES of them."""

    def __init__(self, limits: EntityLimits, per_batch: bool = True) -> None:
        self.limits = limits
        capped = per_batch and not limits.trusted
        self.left = {s: limits.per_batch(s) if capped else limits.total(s) for s in Scope}
        self.refused: dict[Scope, str] = {}  # scope -> the reason of its first refusal
        self.pending: set[str] = set()
        self.pending_more = False

    def defer(self, node: str) -> None:
        if len(self.pending) < MAX_PENDING_NODES:
            self.pending.add(node)
        elif node not in self.pending:
            self.pending_more = True

    def reason(self, scope: Scope) -> str:
        return self.refused.get(scope, f"no {scope} entity can be added")


@dataclass(frozen=True, slots=True)
class Compaction:
    """Entities forgotten at once: `keep[scope]` are the old slots that remain, in their new
    order (slot i now holds what slot keep[i] held). Everything indexed by slot follows it."""

    generation: int
    keep: dict[Scope, npt.NDArray[np.intp]]
    dropped: dict[Scope, list[Entity]]
    nodes_dropped: list[str]
    # Handed to another shard (service.cluster.members), not silent: their open alerts stay
    # open, the new owner continues them.
    handed: bool = False


class ScopeWindows:
    """Windows of one scope: entity slots, latest values, raw ring and rollup tiers."""

    def __init__(self, scope: Scope, config: WindowConfig, capacity: int = 64,
                 limits: EntityLimits | None = None) -> None:
        self.scope = scope
        self.max_entities = (limits or EntityLimits()).total(scope)
        self.step_s = config.step_s
        self.metrics: tuple[Metric, ...] = tuple(
            m for m in CATALOG if m.scope is scope and m.kind is not Kind.EVENT
        )
        self._col = {m.name: i for i, m in enumerate(self.metrics)}
        # Frame column j (ingested metrics only) lands in store column frame_cols[j].
        self.frame_cols: npt.NDArray[np.intp] = np.array(
            [self._col[m.name] for m in CATALOG.columns(scope)], np.intp
        )
        # Metrics ingest computes (the IB bit-error rate); stored, never sent by collectors.
        self.derived_cols: npt.NDArray[np.intp] = np.array(
            [i for i, m in enumerate(self.metrics) if m.derived], np.intp)
        kinds = [m.kind for m in self.metrics]
        self.is_counter = np.array([k is Kind.COUNTER for k in kinds])
        self.is_state = np.array([k is Kind.STATE for k in kinds])
        # Only gauges keep max/min in rollups: a counter's bucket is its sum, a state's its max;
        # and of those, only the ones a reader asks for (WindowConfig.ranges).
        self.is_gauge = np.array([k is Kind.GAUGE for k in kinds])
        self.gauge_cols: npt.NDArray[np.intp] = np.flatnonzero(self.is_gauge).astype(np.intp)
        self.hi_cols = config.range_cols(self.metrics, "hi")
        self.lo_cols = config.range_cols(self.metrics, "lo")
        self._hi_of = {int(c): i for i, c in enumerate(self.hi_cols)}
        self._lo_of = {int(c): i for i, c in enumerate(self.lo_cols)}
        self.resets = np.array([m.resets for m in self.metrics])
        self.capacity = capacity
        self.entities: list[Entity] = []
        self._slot: dict[Entity, int] = {}
        self._table_cache: TableCache[I32] = TableCache(TABLE_CACHE,
                                                        entity_budget(self.max_entities))
        self.node_of: I32 = np.full(capacity, -1, np.int32)
        self.gpu_of: I32 = np.full(capacity, -1, np.int32)
        m = len(self.metrics)
        # What ingest last read per slot (last value, time, step, counter drop streaks): its
        # owner alone writes it; last_val, last_ts and last_k below are read-only views.
        self.counters = CounterState(capacity, m)
        # When anything first and last arrived for the entity, by the service's clock (never a
        # sender's): an entity silent past its longest window is forgotten, and one that never
        # reported beyond one moment (a phantom name) once it is silent for the raw window.
        self.touched: F64 = np.full(capacity, np.nan)
        self.born: F64 = np.full(capacity, np.nan)
        # When a sample row (events aside) last arrived, by the service's clock: an entity
        # whose rows arrive behind the live edge (a backfill, a spool drain) is not silent,
        # while one whose only news is a late Xid still is (service.stages.fleet_alerts).
        self.heard: F64 = np.full(capacity, np.nan)
        self.refused_total = 0  # new entities turned away by the limits
        self._refused_seen = 0  # ... as of the last look for entities to forget
        self.forgotten_total = 0
        raw_len, tier_specs = config.for_scope(scope)
        self.raw = _Ring(m, raw_len, capacity)  # no ranges: a sample is its own max and min
        self.tier_specs = tier_specs
        self.tiers = [_Ring(m, t.length, capacity, len(self.hi_cols), len(self.lo_cols))
                      for t in tier_specs]
        self.ratios: list[int] = []
        parent = config.step_s
        for t in tier_specs:
            ratio = round(t.step_s / parent)
            if ratio < 1 or abs(ratio * parent - t.step_s) > 1e-9:
                raise ValueError(f"tier {t.name}: {t.step_s}s is not a multiple of {parent}s")
            self.ratios.append(ratio)
            parent = t.step_s
        self.head = -1  # newest raw step index seen
        self._rolled = [-1] * len(self.tiers)  # newest finished bucket per tier
        # Per tier, how many times what its windows read changed (a bucket closed, slots
        # renumbered): a reader may keep what it made of a slow tier until this moves.
        self._versions = [0] * len(self.tiers)
        # The first tier's open bucket as running sums (service/stages/rollup.py); None when
        # its bucket spans more steps than the raw ring holds.
        self.running: RunningBucket | None = None
        if self.tiers and self.ratios[0] <= raw_len:
            self.running = RunningBucket(m, self.hi_cols, self.lo_cols, capacity)
        # True: close every bucket by re-reading its rows, as before the running sums (the
        # pipeline benchmark times both in one run).
        self.reread_rollups = False
        # Sums over the last n buckets of a tier, per (tier, n, column), made on first read and
        # kept as buckets close (service/stages/tier_sums.py). False: every read re-sums the
        # window (the pipeline benchmark times both in one run).
        self._sums: dict[tuple[int, int, int], WindowSum] = {}
        self.running_sums = True

    @property
    def last_val(self) -> F64:
        """[slot, metric] the last value ingest read (read-only; NaN: none yet)."""
        return self.counters.last_val

    @property
    def last_ts(self) -> F64:
        """[slot, metric] the sender's time of that value (read-only)."""
        return self.counters.last_ts

    @property
    def last_k(self) -> I64:
        """[slot] the raw step the slot last wrote (read-only; -1: never)."""
        return self.counters.last_k

    @property
    def raw_length(self) -> int:
        return self.raw.length

    @property
    def horizon_s(self) -> float:
        """The longest window this scope keeps: what an entity silent longer no longer has."""
        return max([self.raw.length * self.step_s,
                    *(t.step_s * t.length for t in self.tier_specs)])

    # ---- entities -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.entities)

    def col(self, metric: str) -> int:
        try:
            return self._col[metric]
        except KeyError:
            raise KeyError(f"{metric!r} is not a {self.scope} metric") from None

    def slot(self, entity: Entity) -> int | None:
        return self._slot.get(entity)

    def slots_for_entity(self, entity: Entity, registry: EntityRegistry, now: float = np.nan,
                         admit: Admission | None = None) -> int:
        """The entity's slot, allocated if new; -1 when the limits turn it away."""
        s = self._slot.get(entity)
        if s is None:
            s = self._add(entity, registry, admit)
        if s >= 0 and now == now:
            self.arrived(np.array([s], np.int32), now)
        return s

    def arrived(self, slots: I32, now: float) -> None:
        """Something for these entities arrived now (by the service's clock)."""
        self.touched[slots] = now
        new = slots[np.isnan(self.born[slots])]
        self.born[new] = now

    def slots_for(self, table: EntityTable, registry: EntityRegistry,
                  admit: Admission | None = None, used: I32 | None = None) -> I32:
        """Slot per table row, allocating the new entities among rows `used` (all when None):
        a table may list entities no row of the frame refers to, and those must not come
        back after they were forgotten. -1 where the limits turn one away or none was ever
        asked. Cached by table identity, row by row: a table that many senders' frames share
        (a line-protocol mapper's, each request naming some of its rows) resolves only the
        rows it has not met; -1 rows are looked at again when asked."""
        known = self.known_slots(table)
        if known is not None and _all_held(known, used):
            return known
        ents = table.entities
        if known is None and used is not None:
            # A table met for the first time: every entity the store holds already is found
            # now (no slot is allocated for one no row names), so a sender's next table that
            # lists the same entities (a relay's, when a node joins its rack) costs its rows
            # one look each, not one per body until each row was named.
            get = self._slot.get
            out = np.fromiter((get(e, -1) for e in ents), np.int32, len(ents))
        else:
            out = np.full(len(table), -1, np.int32) if known is None else known.copy()
        asked = range(len(table)) if used is None else np.unique(used).tolist()
        rows = [i for i in asked if out[i] < 0]
        new = sum(1 for i in rows if ents[i] not in self._slot)
        if admit is not None:
            new = min(new, admit.left[self.scope])
        want = len(self.entities) + new
        if want > self.capacity:  # one growth for a whole new table, by a quarter at least
            grown = min(max(want, self.capacity + self.capacity // 4), self.max_entities)
            if grown > self.capacity:
                self._grow(grown)
        for i in rows:
            s = self._slot.get(ents[i])
            out[i] = self._add(ents[i], registry, admit) if s is None else s
        # A coalesced ingest's joined table is met once: its parts are kept instead (a relay's
        # table is only ever met joined with others when the coalescer merges relays' bodies).
        at = 0
        for part in table.parts if isinstance(table, JoinedTable) else (table,):
            self._table_cache.put(part, out if part is table else out[at:at + len(part)].copy())
            at += len(part)
        return out

    def known_slots(self, table: EntityTable) -> I32 | None:
        """The slots `slots_for` found for the table's rows (-1: not found yet), without
        looking at any entity; None when the table was not met (since the last compaction).
        A joined table (a coalesced ingest) is known by its parts: a part not met yet reads
        -1 throughout (None when no part was met)."""
        cached = self._table_cache.get(table)
        if cached is not None:
            return cached
        if isinstance(table, JoinedTable):  # a coalesced ingest: its parts met before
            hits = [self._table_cache.get(t) for t in table.parts]
            if any(h is not None for h in hits):  # a part not met yet: -1, looked at when asked
                return np.concatenate([np.full(len(t), -1, np.int32) if h is None else h
                                       for h, t in zip(hits, table.parts, strict=True)])
        return None

    def _add(self, e: Entity, registry: EntityRegistry, admit: Admission | None = None) -> int:
        if len(self.entities) >= self.max_entities:
            return self._refuse(admit, f"this service holds at most {self.max_entities} "
                                f"{self.scope} entities (ingest.max_gpus); one silent for "
                                f"{self.horizon_s / 86400:g} days is forgotten")
        if admit is not None and admit.left[self.scope] <= 0:
            admit.defer(e.node)
            return self._refuse(admit, f"more than {admit.limits.per_batch(self.scope)} new "
                                f"{self.scope} entities in one request "
                                "(ingest.max_new_gpus_per_batch); send the body again")
        gpu = -1
        if e.scope is Scope.NVLINK:
            gpu = registry.gpu_slot(e, admit)
            if gpu < 0:
                return self._refuse(admit, f"its GPU {e.node}/gpu{e.unit} was turned away")
        if admit is not None:
            admit.left[self.scope] -= 1
        s = len(self.entities)
        if s == self.capacity:
            self._grow(min(self.capacity + max(64, self.capacity // 4), self.max_entities))
        self.entities.append(e)
        self._slot[e] = s
        self.node_of[s] = registry.node_slot(e.node)
        self.gpu_of[s] = s if e.scope is Scope.GPU else gpu
        return s

    def _refuse(self, admit: Admission | None, reason: str) -> int:
        self.refused_total += 1
        if admit is not None:
            admit.refused.setdefault(self.scope, f"new {self.scope} entity refused: {reason}")
        return -1

    def _grow(self, capacity: int) -> None:
        def pad(a: npt.NDArray[np.generic], fill: float) -> npt.NDArray[np.generic]:
            b = np.full((capacity, *a.shape[1:]), fill, a.dtype)
            b[: a.shape[0]] = a
            return b

        self.node_of = pad(self.node_of, -1)  # type: ignore[assignment]
        self.gpu_of = pad(self.gpu_of, -1)  # type: ignore[assignment]
        self.counters.grow(pad)
        self.touched = pad(self.touched, np.nan)  # type: ignore[assignment]
        self.born = pad(self.born, np.nan)  # type: ignore[assignment]
        self.heard = pad(self.heard, np.nan)  # type: ignore[assignment]
        self.raw.grow(capacity)
        for t in self.tiers:
            t.grow(capacity)
        if self.running is not None:
            self.running.grow(lambda a, fill: _widened_last(a, capacity, fill))
        for s in self._sums.values():
            s.resize(lambda a, fill: _widened_last(a, capacity, fill))
        self.capacity = capacity

    def silent(self, now: float) -> npt.NDArray[np.bool_]:
        """Entities to forget: nothing arrived for over the longest window. Under pressure
        (the limit turned an entity away since the last look, or the store is nearly full),
        also one that never reported beyond a moment (a flood of one-line names) once it has
        been silent for the raw window; otherwise such a one stays, so a node that reported
        once and died keeps its no-data alert."""
        n = len(self.entities)
        t, born = self.touched[:n], self.born[:n]
        out = t < now - self.horizon_s
        pressed = self.refused_total > self._refused_seen or n >= PRESSED * self.max_entities
        self._refused_seen = self.refused_total
        if pressed:
            once = t - born < PROBATION_STEPS * self.step_s
            out |= once & (t < now - self.raw.length * self.step_s)
        return out

    def compact(self, keep: npt.NDArray[np.intp], node_map: I64, gpu_map: I64) -> None:
        """Keep only slots `keep` (ascending), moved down in place, renumbering nodes and GPUs
        by the old-to-new maps (-1: dropped; their extra last entry maps -1 to -1)."""
        k, n_old = len(keep), len(self.entities)
        self.forgotten_total += n_old - k
        self.entities = [self.entities[i] for i in keep.tolist()]
        self._slot = {e: i for i, e in enumerate(self.entities)}
        self._table_cache.clear()
        node_of = node_map[self.node_of[keep]]
        gpu_of = np.arange(k) if self.scope is Scope.GPU else gpu_map[self.gpu_of[keep]]
        self.node_of[:k], self.node_of[k:n_old] = node_of, -1
        self.gpu_of[:k], self.gpu_of[k:n_old] = gpu_of, -1
        for a, fill in ((self.touched, np.nan), (self.born, np.nan), (self.heard, np.nan)):
            _squeeze(a, keep, n_old, fill, axis=0)
        self.counters.take(lambda a, fill: _squeeze(a, keep, n_old, fill, axis=0))
        for ring in (self.raw, *self.tiers):
            ring.take(keep, n_old)
        self._versions = [v + 1 for v in self._versions]
        if self.running is not None:
            self.running.take(lambda a, fill: _squeeze(a, keep, n_old, fill, axis=a.ndim - 1))
        for s in self._sums.values():
            s.resize(lambda a, fill: _squeeze(a, keep, n_old, fill, axis=0))

    # ---- writing ----------------------------------------------------------------------------
    def advance(self, k: int) -> None:
        """Move the clock to raw step k, closing every rollup bucket that ended before it."""
        if k <= self.head:
            return
        if self.head >= 0 and k - self.head >= self.raw.length:
            # A gap longer than the raw ring reuses every row: first close what the rows hold
            # into the tiers, and each tier's buckets the gap finishes into the next tier.
            self._roll(k - 1, held_to=self.head)
            first = k - self.raw.length + 1
        elif self.head < 0:
            first = k - self.raw.length + 1
        else:
            first = self.head + 1
        opened = max(first, self.head + 1)
        run = self._running()
        if run is not None and opened <= k:
            # A jump that reuses rows of the open minute drops what they held from the minute,
            # as the re-read does (it finds those rows holding newer steps): what was folded
            # from them is read again at the close.
            start, length = run.bucket * self.ratios[0], self.raw.length
            if max(start, opened - length) <= min(run.folded, k - length):
                run.dirty[:] = True
        for step in range(opened, k + 1):
            self.raw.open(step)
        self.head = k
        self._roll(self.head - 1)
        run = self._running()
        if run is not None:
            if run.bucket != self.head // self.ratios[0]:
                run.start(self.head // self.ratios[0], self.ratios[0])
            self._fold(self.head - FOLD_LAG - 1)

    def write(self, slots: I32, ks: I64, values: F32) -> None:
        """Write rows (values[metric, row]) already validated by ingest."""
        rows = (ks % self.raw.length).astype(np.intp)
        self.raw.agg[:, rows, slots] = values
        run = self._running()
        if run is not None:
            run.touched(slots, ks, self.ratios[0])

    def _running(self) -> RunningBucket | None:
        return None if self.reread_rollups else self.running

    def _fold(self, upto: int) -> None:
        """Fold the raw steps of the running bucket up to `upto` (at most its last)."""
        run, ratio = self.running, self.ratios[0]
        assert run is not None
        end = min(upto, run.bucket * ratio + ratio - 1)
        while run.folded < end:
            step = run.folded + 1
            row = step % self.raw.length
            if self.raw.held[row] == step:
                run.fold(self.raw.agg[:, row, :])
            else:
                run.skip()

    def _roll(self, raw_last: int, held_to: int | None = None) -> None:
        """Roll every bucket whose parent rows all closed by raw step raw_last. A bucket is
        finished once the raw clock is a full step past its end, so one late sample of the
        previous step still lands in it. `held_to`: the newest raw step holding data; only
        buckets up to it are rolled (before a gap reuses the rows)."""
        parent_last, parent, data_last = raw_last, self.raw, held_to
        for i, (tier, ratio) in enumerate(zip(self.tiers, self.ratios, strict=True)):
            done = (parent_last + 1) // ratio - 1  # newest bucket whose parent rows all closed
            if data_last is not None:
                data_last //= ratio
                done = min(done, data_last)
            start = max(self._rolled[i] + 1, done - tier.length + 1)
            if start <= done:
                self._versions[i] += 1
            sums = [s for (t, _, _), s in self._sums.items() if t == i]
            for b in range(start, done + 1):
                for s in sums:  # before the row of b, which may hold one of them, is reused
                    s.retire_before(tier.agg, tier.held, b - s.n + 1)
                run = self._running() if i == 0 else None
                if run is not None and run.bucket == b:
                    self._close_running(run, tier, b, ratio)
                else:
                    self._rollup(parent, tier, b, ratio)
                for s in sums:
                    s.add(tier.agg, tier.held, b)
            if done > self._rolled[i]:
                self._rolled[i] = done
            # The next tier is finished by the clock, not by what this one rolled so far.
            parent_last = (parent_last + 1) // ratio - 1 if data_last is not None \
                else self._rolled[i]
            parent = tier

    def _close_running(self, run: RunningBucket, tier: _Ring, bucket: int, ratio: int) -> None:
        """Close the first tier's bucket from its running sums; slots whose rows changed after
        they were folded are reduced from the rows again."""
        self._fold(bucket * ratio + ratio - 1)
        row = tier.open(bucket)
        agg, hi, lo = run.close(self.is_counter, self.is_state)
        tier.agg[:, row, :] = agg
        if tier.hi is not None:
            tier.hi[:, row, :] = hi
        if tier.lo is not None:
            tier.lo[:, row, :] = lo
        dirty = np.flatnonzero(run.dirty)
        if len(dirty):
            self._rollup(self.raw, tier, bucket, ratio, dirty)
        run.start(bucket + 1, ratio)

    def _rollup(self, parent: _Ring, tier: _Ring, bucket: int, ratio: int,
                slots: npt.NDArray[np.intp] | None = None) -> None:
        """Close a bucket by re-reading its parent rows (of `slots` only, when given)."""
        row = tier.open(bucket)
        rows, held = parent.rows(bucket * ratio + ratio - 1, ratio)
        cols = slice(None) if slots is None else slots
        if not held.any():
            for a in (tier.agg, tier.hi, tier.lo):
                if a is not None:
                    a[:, row, cols] = np.nan
            return
        rows = rows[held]
        if slots is not None:  # a dirty slot's re-read costs its own rows
            self._reduce_into(parent, tier, row, rows, slots)
            return
        # A slice of slots at a time: an hour's close re-reads 60 rows of every slot, and at
        # 180,000 NVLink links the whole gather and its temporaries were about 500 MB at once
        # (the process's peak). Each slot is reduced over its own rows alone, so the chunks
        # give the whole's numbers.
        width = max(1, min(ROLLUP_CHUNK, ROLLUP_BYTES // (parent.agg.itemsize * len(rows)
                                                         * len(self.metrics))))
        for c0 in range(0, self.capacity, width):
            self._reduce_into(parent, tier, row, rows, slice(c0, c0 + width))

    def _reduce_into(self, parent: _Ring, tier: _Ring, row: int, rows: npt.NDArray[np.intp],
                     cols: slice | npt.NDArray[np.intp]) -> None:
        """Reduce the parent's `rows` of slots `cols` into the tier's `row`."""
        pick = (slice(None), rows, cols) if isinstance(cols, slice) else \
            (slice(None), rows[:, None], cols[None, :])
        agg = parent.agg[pick]
        # The raw ring keeps no range (a sample is its own max and min); a tier keeps the
        # same columns' ranges as the tiers above it, or none when it keeps no column's.
        hi = parent.hi[pick] if parent.hi is not None else agg[self.hi_cols]
        lo = parent.lo[pick] if parent.lo is not None else agg[self.lo_cols]
        res, hi_b, lo_b = reduce_rows(agg, hi, lo, self.is_counter, self.is_state)
        tier.agg[:, row, cols] = res
        if tier.hi is not None:
            tier.hi[:, row, cols] = hi_b
        if tier.lo is not None:
            tier.lo[:, row, cols] = lo_b

    # ---- reading -----------------------------------------------------------------------------
    def window(self, metric: str, n: int, tier: str | None = None, stat: str = "agg") -> F32:
        """[entity, time] for the last n buckets (oldest first) of the raw ring or a tier;
        NaN where nothing was held. Raw windows end at the newest step, tier windows at the
        newest finished bucket."""
        return self.window_slots(metric, n, slice(0, len(self.entities)), tier, stat)

    def window_slots(self, metric: str, n: int, slots: slice, tier: str | None = None,
                     stat: str = "agg") -> F32:
        """window(...)[slots], reading only those slots: a reader that goes through a large
        scope a slice at a time (the NVLink growth fit, models/detectors/dynamic.py) holds
        one slice's temporaries, not the whole window's."""
        c = self.col(metric)
        if tier is None:
            ring, last = self.raw, self.head
        else:
            i = [t.name for t in self.tier_specs].index(tier)
            ring, last = self.tiers[i], self._rolled[i]
        lo, hi, step = slots.indices(len(self.entities))
        if step != 1:
            raise ValueError("window_slots reads a contiguous range of slots")
        n_used = max(0, hi - lo)
        if last < 0 or n_used == 0:
            return np.full((n_used, n), np.nan, np.float32)
        source = self._source(ring, c, stat, tier)
        if source is not ring.agg:
            c = (self._hi_of if stat == "hi" else self._lo_of)[c]
        rows, held = ring.rows(last, n)
        out = source[c, rows, lo:hi].T.copy()
        out[:, ~held] = np.nan
        return out

    def _source(self, ring: _Ring, c: int, stat: str, tier: str | None) -> F32:
        """The array a window of column c with `stat` reads. A counter or state has no range
        of its own (its bucket is its sum, its max) and a raw sample is its own max and min:
        those read agg. A gauge's range in a tier is there only where WindowConfig.ranges
        keeps it; asking for another is an error, never a silent mean."""
        if stat not in ("agg", "hi", "lo"):
            raise ValueError(f"unknown stat {stat!r}")
        if stat == "agg" or tier is None or not self.is_gauge[c]:
            return ring.agg
        source = ring.hi if stat == "hi" else ring.lo
        if c not in (self._hi_of if stat == "hi" else self._lo_of) or source is None:
            raise KeyError(f"{self.metrics[c].name}: the {tier} tier keeps no {stat!r} "
                           "(add it to WindowConfig.ranges)")
        return source

    def window_sum(self, metric: str, n: int, tier: str) -> F64:
        """[entity] time_total(window(metric, n, tier)): the sum over the last n finished
        buckets, NaN where all were missing, from running sums kept as the tier closes
        buckets (the first read of a (metric, n, tier) sums the window once and starts them)."""
        c = self.col(metric)
        i = [t.name for t in self.tier_specs].index(tier)
        ring, last, n_used = self.tiers[i], self._rolled[i], len(self.entities)
        if not self.running_sums or n > ring.length:
            return time_total(self.window(metric, n, tier))
        s = self._sums.get((i, n, c))
        if s is None:
            s = self._sums[(i, n, c)] = WindowSum(c, n, self.capacity)
            if last >= 0:
                held = ring.rows(last, n)[1]
                for b in np.arange(last - n + 1, last + 1)[held].tolist():
                    s.add(ring.agg, ring.held, b)
        if last < 0 or n_used == 0:
            return np.full(n_used, np.nan)
        return s.read(ring.agg, ring.held, last, n_used)

    def finished(self, tier: str) -> int:
        return self._rolled[[t.name for t in self.tier_specs].index(tier)]

    def tier_version(self, tier: str) -> int:
        """Moves whenever a window of `tier` could read differently (besides entities added,
        which change the store's length)."""
        return self._versions[[t.name for t in self.tier_specs].index(tier)]

    def latest(self, metric: str) -> F64:
        return self.last_val[: len(self.entities), self.col(metric)]

    def nbytes(self) -> int:
        arrays = (self.node_of, self.gpu_of, self.touched, self.born, self.heard)
        running = self.running.nbytes() if self.running is not None else 0
        return (self.raw.nbytes() + sum(t.nbytes() for t in self.tiers)
                + sum(a.nbytes for a in arrays) + self.counters.nbytes() + running
                + sum(s.nbytes() for s in self._sums.values()))


class EntityRegistry:
    """Node names and GPU slots shared across scopes, so links and ports find their GPU/node."""

    def __init__(self) -> None:
        self.nodes: list[str] = []
        self._node: dict[str, int] = {}
        self.store: WindowStore | None = None

    def node_slot(self, node: str) -> int:
        s = self._node.get(node)
        if s is None:
            s = len(self.nodes)
            self.nodes.append(node)
            self._node[node] = s
        return s

    def gpu_slot(self, link: Entity, admit: Admission | None = None) -> int:
        assert self.store is not None
        gpus = self.store.scopes[Scope.GPU]
        return gpus.slots_for_entity(Entity(Scope.GPU, link.node, link.unit), self, admit=admit)

    def keep(self, keep: npt.NDArray[np.bool_]) -> I64:
        """Keep only the nodes marked; the old-to-new node map (-1: dropped)."""
        new = np.full(len(self.nodes) + 1, -1, np.int64)  # the extra entry maps slot -1 to -1
        idx = np.flatnonzero(keep)
        new[idx] = np.arange(len(idx))
        self.nodes = [self.nodes[i] for i in idx.tolist()]
        self._node = {n: i for i, n in enumerate(self.nodes)}
        return new


class WindowStore:
    """All scopes' windows plus the shared entity registry."""

    def __init__(self, config: WindowConfig | None = None,
                 limits: EntityLimits | None = None) -> None:
        self.config = config or WindowConfig()
        self.limits = limits or EntityLimits()
        self.registry = EntityRegistry()
        self.scopes: dict[Scope, ScopeWindows] = {
            s: ScopeWindows(s, self.config, limits=self.limits) for s in STORED
        }
        self.registry.store = self
        # Every forgetting so far (the newest few): pipelines reading this store bring their
        # own slot-indexed state along by generation (service.pipeline).
        self.generation = 0
        self.compactions: list[Compaction] = []

    def admission(self, per_batch: bool = True) -> Admission:
        """The budget of new entities for one batch; per_batch=False for the service's own
        sources (a replay, its collectors), which only the total bounds."""
        return Admission(self.limits, per_batch)

    def forget(self, now: float) -> Compaction | None:
        """Drop every entity nothing arrived for over its scope's longest window (a GPU stays
        while a link of it stays), and every node left without entities. None: nothing to
        forget."""
        drop = {sc: w.silent(now) for sc, w in self.scopes.items()}
        links = self.scopes[Scope.NVLINK]
        held = links.gpu_of[: len(links)][~drop[Scope.NVLINK]]
        drop[Scope.GPU][held[held >= 0]] = False
        return self._drop(drop, handed=False)

    def forget_nodes(self, nodes: Collection[str]) -> Compaction | None:
        """Drop every entity of `nodes` (handed to another shard), as `forget` drops silent
        ones: pipelines follow it by generation. None: none of them is here."""
        idx = [i for i, n in enumerate(self.registry.nodes) if n in nodes]
        if not idx:
            return None
        gone = np.zeros(len(self.registry.nodes) + 1, bool)  # the extra entry: node slot -1
        gone[idx] = True
        drop = {sc: gone[w.node_of[: len(w)]] for sc, w in self.scopes.items()}
        return self._drop(drop, handed=True)

    def _drop(self, drop: dict[Scope, npt.NDArray[np.bool_]], *,
              handed: bool) -> Compaction | None:
        if not any(d.any() for d in drop.values()):
            return None
        keep = {sc: np.flatnonzero(~d) for sc, d in drop.items()}
        used = np.zeros(len(self.registry.nodes), bool)
        for sc, w in self.scopes.items():
            nodes = w.node_of[keep[sc]]
            used[nodes[nodes >= 0]] = True
        dropped_nodes = [n for n, u in zip(self.registry.nodes, used, strict=True) if not u]
        node_map = self.registry.keep(used)
        gpus = len(self.scopes[Scope.GPU])
        gpu_map = np.full(gpus + 1, -1, np.int64)
        gpu_map[keep[Scope.GPU]] = np.arange(len(keep[Scope.GPU]))
        dropped = {sc: [w.entities[i] for i in np.flatnonzero(drop[sc]).tolist()]
                   for sc, w in self.scopes.items()}
        for sc, w in self.scopes.items():
            w.compact(keep[sc], node_map, gpu_map)
        self.generation += 1
        done = Compaction(self.generation, keep, dropped, dropped_nodes, handed)
        self.compactions = [*self.compactions[-7:], done]
        return done

    def compactions_since(self, generation: int) -> list[Compaction]:
        return [c for c in self.compactions if c.generation > generation]

    def __getitem__(self, scope: Scope) -> ScopeWindows:
        return self.scopes[scope]

    def step_of(self, ts: F64) -> I64:
        return np.floor(ts / self.config.step_s + 0.5).astype(np.int64)

    @property
    def head(self) -> int:
        return max(s.head for s in self.scopes.values())

    def advance(self, k: int) -> None:
        """Keep every scope's clock together, so windows of a quiet scope still age."""
        for s in self.scopes.values():
            s.advance(k)

    def nbytes(self) -> int:
        return sum(s.nbytes() for s in self.scopes.values())


def window_config_for(step_s: float) -> WindowConfig:
    """Windows for a trace sampled every step_s seconds: the default at 5 s; for coarse
    fleet-scale traces (minutes to an hour per sample) a raw ring of about half a day to a week
    and only the rollup tiers that are coarser than the step."""
    if step_s <= 5.0:
        return WindowConfig()
    raw = max(24, min(2016, round(12 * 3600 / step_s)))
    tiers = tuple(t for t in (TierSpec("1m", 60.0, 120), TierSpec("1h", 3600.0, 168),
                              TierSpec("1d", 86400.0, 30))
                  if t.step_s > step_s and (t.step_s / step_s).is_integer())
    if step_s >= 3600:
        raw = max(raw, 168)
    nvl = tuple(TierSpec(t.name, t.step_s, max(1, t.length // 2)) for t in tiers)
    return WindowConfig(step_s=step_s, raw_length=raw, tiers=tiers,
                        nvlink_raw_length=max(12, raw // 2), nvlink_tiers=nvl)


def _all_held(slots: I32, used: I32 | None) -> bool:
    """Every row asked for (all when `used` is None) has its slot."""
    return bool((slots >= 0).all() if used is None else (slots[used] >= 0).all())
