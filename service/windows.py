"""The window store: per scope, per metric ring buffers indexed [time, entity slot].

Three resolutions (DESIGN.md decision 2): raw samples at the base step for the last minutes, and
rollup tiers (1 min, 1 h by default) for hours to days. Counters are stored as the increase over
each step (reset-corrected by ingest), gauges as values, states as values. A rollup bucket holds
`agg` (gauge mean, counter sum, state max) plus `hi`/`lo` (max/min) for every column. Missing
data stays NaN all the way up.

Layout is [metric, time, slot] so a detector's read of one metric over a window is a gather of a
few contiguous rows, vectorised over every entity at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.catalog import CATALOG, Kind, Metric, Scope
from collectors.frames import Entity, EntityTable

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class TierSpec:
    name: str
    step_s: float
    length: int


@dataclass(frozen=True, slots=True)
class WindowConfig:
    step_s: float = 5.0
    raw_length: int = 120  # 10 min of 5-s samples: reactive rules and hysteresis
    tiers: tuple[TierSpec, ...] = (TierSpec("1m", 60.0, 120), TierSpec("1h", 3600.0, 168))
    # NVLink has 12-18 links per GPU, so its windows are kept shorter to hold memory per GPU
    # under budget; link rules look at minutes to a day.
    nvlink_raw_length: int = 60
    nvlink_tiers: tuple[TierSpec, ...] = (TierSpec("1m", 60.0, 60), TierSpec("1h", 3600.0, 72))

    def for_scope(self, scope: Scope) -> tuple[int, tuple[TierSpec, ...]]:
        if scope is Scope.NVLINK:
            return self.nvlink_raw_length, self.nvlink_tiers
        return self.raw_length, self.tiers


class _Ring:
    """One resolution: data[metric, row, slot], with the absolute bucket index held per row."""

    def __init__(self, n_metrics: int, length: int, capacity: int, n_range: int) -> None:
        """n_range: how many (gauge) columns also keep max and min; 0 for the raw ring."""
        self.length = length
        self.agg: F32 = np.full((n_metrics, length, capacity), np.nan, np.float32)
        self.hi: F32 | None = None
        self.lo: F32 | None = None
        if n_range:
            self.hi = np.full((n_range, length, capacity), np.nan, np.float32)
            self.lo = np.full((n_range, length, capacity), np.nan, np.float32)
        self.held: I64 = np.full(length, -1, np.int64)  # which bucket index each row holds

    def grow(self, capacity: int) -> None:
        def widen(a: F32) -> F32:
            b = np.full((*a.shape[:2], capacity), np.nan, np.float32)
            b[:, :, : a.shape[2]] = a
            return b

        self.agg = widen(self.agg)
        if self.hi is not None and self.lo is not None:
            self.hi, self.lo = widen(self.hi), widen(self.lo)

    def open(self, bucket: int) -> int:
        """Claim the row for `bucket`, clearing what it held before."""
        row = bucket % self.length
        if self.held[row] != bucket:
            self.agg[:, row, :] = np.nan
            if self.hi is not None and self.lo is not None:
                self.hi[:, row, :] = np.nan
                self.lo[:, row, :] = np.nan
            self.held[row] = bucket
        return row

    def rows(self, last: int, n: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
        """Rows of buckets last-n+1 .. last (oldest first) and which of them are really held."""
        want = np.arange(last - n + 1, last + 1, dtype=np.int64)
        rows = (want % self.length).astype(np.intp)
        return rows, self.held[rows] == want

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.agg, self.hi, self.lo) if a is not None)


class ScopeWindows:
    """Windows of one scope: entity slots, latest values, raw ring and rollup tiers."""

    def __init__(self, scope: Scope, config: WindowConfig, capacity: int = 64) -> None:
        self.scope = scope
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
        # Only gauges keep max/min in rollups: a counter's bucket is its sum, a state's its max.
        self.gauge_cols: npt.NDArray[np.intp] = np.flatnonzero(
            [k is Kind.GAUGE for k in kinds]).astype(np.intp)
        self._range_of = {int(c): i for i, c in enumerate(self.gauge_cols)}
        self.resets = np.array([m.resets for m in self.metrics])
        self.capacity = capacity
        self.entities: list[Entity] = []
        self._slot: dict[Entity, int] = {}
        self._table_cache: dict[int, tuple[EntityTable, I32]] = {}
        self.node_of: I32 = np.full(capacity, -1, np.int32)
        self.gpu_of: I32 = np.full(capacity, -1, np.int32)
        m = len(self.metrics)
        self.last_val: F64 = np.full((capacity, m), np.nan)
        self.last_ts: F64 = np.full((capacity, m), np.nan)
        self.last_k: I64 = np.full(capacity, -1, np.int64)
        # Consecutive refused decreases of a persistent counter, per entity and metric.
        self.drop_streak = np.zeros((capacity, m), np.int16)
        raw_len, tier_specs = config.for_scope(scope)
        self.raw = _Ring(m, raw_len, capacity, n_range=0)
        self.tier_specs = tier_specs
        self.tiers = [_Ring(m, t.length, capacity, len(self.gauge_cols)) for t in tier_specs]
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

    @property
    def raw_length(self) -> int:
        return self.raw.length

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

    def slots_for_entity(self, entity: Entity, registry: EntityRegistry) -> int:
        s = self._slot.get(entity)
        return self._add(entity, registry) if s is None else s

    def slots_for(self, table: EntityTable, registry: EntityRegistry) -> I32:
        """Slot per table row, allocating new entities; cached by table identity."""
        cached = self._table_cache.get(id(table))
        if cached is not None and cached[0] is table:
            return cached[1]
        out = np.empty(len(table), np.int32)
        new = sum(1 for e in table.entities if e not in self._slot)
        if len(self.entities) + new > self.capacity:  # one exact growth for a whole new table
            self._grow(len(self.entities) + new)
        for i, e in enumerate(table.entities):
            s = self._slot.get(e)
            if s is None:
                s = self._add(e, registry)
            out[i] = s
        if len(self._table_cache) > 64:
            self._table_cache.clear()
        self._table_cache[id(table)] = (table, out)
        return out

    def _add(self, e: Entity, registry: EntityRegistry) -> int:
        s = len(self.entities)
        if s == self.capacity:
            self._grow(self.capacity + max(64, self.capacity // 4))
        self.entities.append(e)
        self._slot[e] = s
        self.node_of[s] = registry.node_slot(e.node)
        if e.scope is Scope.GPU:
            self.gpu_of[s] = s
        elif e.scope is Scope.NVLINK:
            self.gpu_of[s] = registry.gpu_slot(e)
        return s

    def _grow(self, capacity: int) -> None:
        def pad(a: npt.NDArray[np.generic], fill: float) -> npt.NDArray[np.generic]:
            b = np.full((capacity, *a.shape[1:]), fill, a.dtype)
            b[: a.shape[0]] = a
            return b

        self.node_of = pad(self.node_of, -1)  # type: ignore[assignment]
        self.gpu_of = pad(self.gpu_of, -1)  # type: ignore[assignment]
        self.last_val = pad(self.last_val, np.nan)  # type: ignore[assignment]
        self.last_ts = pad(self.last_ts, np.nan)  # type: ignore[assignment]
        self.last_k = pad(self.last_k, -1)  # type: ignore[assignment]
        self.drop_streak = pad(self.drop_streak, 0)  # type: ignore[assignment]
        self.raw.grow(capacity)
        for t in self.tiers:
            t.grow(capacity)
        self.capacity = capacity

    # ---- writing ----------------------------------------------------------------------------
    def advance(self, k: int) -> None:
        """Move the clock to raw step k, closing every rollup bucket that ended before it."""
        if k <= self.head:
            return
        if self.head < 0 or k - self.head >= self.raw.length:
            first = k - self.raw.length + 1
        else:
            first = self.head + 1
        for step in range(max(first, self.head + 1), k + 1):
            self.raw.open(step)
        self.head = k
        self._roll()

    def write(self, slots: I32, ks: I64, values: F32) -> None:
        """Write rows (values[metric, row]) already validated by ingest."""
        rows = (ks % self.raw.length).astype(np.intp)
        self.raw.agg[:, rows, slots] = values

    def _roll(self) -> None:
        # A bucket is finished once the raw clock is a full step past its end, so one late
        # sample of the previous step still lands in it.
        parent_last = self.head - 1
        parent = self.raw
        for i, (tier, ratio) in enumerate(zip(self.tiers, self.ratios, strict=True)):
            done = (parent_last + 1) // ratio - 1  # newest bucket whose parent rows all closed
            start = max(self._rolled[i] + 1, done - tier.length + 1)
            for b in range(start, done + 1):
                self._rollup(parent, tier, b, ratio)
            if done > self._rolled[i]:
                self._rolled[i] = done
            parent, parent_last = tier, self._rolled[i]

    def _rollup(self, parent: _Ring, tier: _Ring, bucket: int, ratio: int) -> None:
        row = tier.open(bucket)
        rows, held = parent.rows(bucket * ratio + ratio - 1, ratio)
        if not held.any():
            return
        rows = rows[held]
        agg = parent.agg[:, rows, :]
        g = self.gauge_cols
        hi = parent.hi[:, rows, :] if parent.hi is not None else agg[g]
        lo = parent.lo[:, rows, :] if parent.lo is not None else agg[g]
        present = ~np.isnan(agg)
        cnt = present.sum(axis=1)
        total = np.where(present, agg, 0).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = total / cnt
        mean[cnt == 0] = np.nan
        total[cnt == 0] = np.nan
        mx = np.fmax.reduce(agg, axis=1)
        res = np.where(self.is_counter[:, None], total, np.where(self.is_state[:, None], mx, mean))
        tier.agg[:, row, :] = res
        if tier.hi is not None and tier.lo is not None:
            tier.hi[:, row, :] = np.fmax.reduce(hi, axis=1)
            tier.lo[:, row, :] = np.fmin.reduce(lo, axis=1)

    # ---- reading -----------------------------------------------------------------------------
    def window(self, metric: str, n: int, tier: str | None = None, stat: str = "agg") -> F32:
        """[entity, time] for the last n buckets (oldest first) of the raw ring or a tier;
        NaN where nothing was held. Raw windows end at the newest step, tier windows at the
        newest finished bucket."""
        c = self.col(metric)
        if tier is None:
            ring, last = self.raw, self.head
        else:
            i = [t.name for t in self.tier_specs].index(tier)
            ring, last = self.tiers[i], self._rolled[i]
        n_used = len(self.entities)
        if last < 0 or n_used == 0:
            return np.full((n_used, n), np.nan, np.float32)
        if stat not in ("agg", "hi", "lo"):
            raise ValueError(f"unknown stat {stat!r}")
        source = ring.agg
        rc = self._range_of.get(c)
        if stat != "agg" and rc is not None and ring.hi is not None and ring.lo is not None:
            source, c = (ring.hi if stat == "hi" else ring.lo), rc
        rows, held = ring.rows(last, n)
        out = source[c, rows, :n_used].T.copy()
        out[:, ~held] = np.nan
        return out

    def finished(self, tier: str) -> int:
        return self._rolled[[t.name for t in self.tier_specs].index(tier)]

    def latest(self, metric: str) -> F64:
        return self.last_val[: len(self.entities), self.col(metric)]

    def nbytes(self) -> int:
        arrays = (self.node_of, self.gpu_of, self.last_val, self.last_ts, self.last_k)
        return (
            self.raw.nbytes() + sum(t.nbytes() for t in self.tiers) + sum(a.nbytes for a in arrays)
        )


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

    def gpu_slot(self, link: Entity) -> int:
        assert self.store is not None
        gpus = self.store.scopes[Scope.GPU]
        return gpus.slots_for_entity(Entity(Scope.GPU, link.node, link.unit), self)


class WindowStore:
    """All scopes' windows plus the shared entity registry."""

    def __init__(self, config: WindowConfig | None = None) -> None:
        self.config = config or WindowConfig()
        self.registry = EntityRegistry()
        self.scopes: dict[Scope, ScopeWindows] = {
            s: ScopeWindows(s, self.config) for s in (Scope.GPU, Scope.NVLINK, Scope.IB_PORT)
        }
        self.registry.store = self

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
