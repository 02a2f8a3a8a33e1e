"""Ingest: validate a columnar Batch, normalise it and write it into the window store.

Every bad item is refused with a reason and every valid sample beside it is kept (docs/design.md,
"The seams"). Every value is checked against its metric's valid range (collectors/catalog.py)
at one point, `Ingestor._in_range`, which every source passes through. Counters become
per-step increases with reset detection: a volatile counter that drops was reset (driver
reload, GPU reset, reboot) and its increase is the new value, as Prometheus treats resets; a
persistent counter that drops is stored but held out of the window until it proves a new
device (a swapped GPU) after REBASE_AFTER readings. The last readings and drop counts it goes by
are kept by their one owner, `CounterState` (service/stages/counters.py).
"""

from __future__ import annotations

import bisect
import functools
import logging
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from collectors.catalog import CATALOG, Kind, Scope
from collectors.frames import Batch, Entity, EntityTable, EventFrame, Frame, Rejection
from service.stages.counters import Previous
from service.stages.windows import Admission, ScopeWindows, WindowStore

log = logging.getLogger(__name__)

MAX_DETAILED_REJECTIONS = 200  # per batch; the rest are summarised so a flood stays cheap
# A persistent counter that reads lower this many times in a row is a new device (a GPU swapped
# under the same index, an InfoROM reset), not a glitch: it is taken as the new baseline.
REBASE_AFTER = 3


@dataclass(frozen=True, slots=True)
class Event:
    ts: float
    entity: str
    metric: str
    value: float


class EventLog:
    """Recent discrete events (Xids), in event-time order. Events arrive late (an agent
    draining its spool after an outage) and twice (a resend): a late one is placed where its
    time says, so a look back from `now` never stops at it, and an exact repeat is kept once.
    Rare enough for a plain list; the oldest go first past `maxlen`."""

    def __init__(self, maxlen: int = 100_000) -> None:
        self.maxlen = maxlen
        self.events: list[Event] = []
        self._keys: set[Event] = set()

    def add(self, event: Event) -> bool:
        """False for an exact repeat of an event already held."""
        if event in self._keys:
            return False
        ev = self.events
        if not ev or ev[-1].ts <= event.ts:
            ev.append(event)
        else:
            ev.insert(bisect.bisect_right(ev, event.ts, key=lambda e: e.ts), event)
        self._keys.add(event)
        if len(ev) > self.maxlen:
            for old in ev[: len(ev) - self.maxlen]:
                self._keys.discard(old)
            del ev[: len(ev) - self.maxlen]
        return True

    def since(self, ts: float) -> list[Event]:
        return self.events[bisect.bisect_left(self.events, ts, key=lambda e: e.ts):]


@dataclass(frozen=True, slots=True)
class Derived:
    """Derived metric values for rows of a clean frame: values[i, j] is metric names[j] of
    entity `entities[rows[i]]` at ts[i], NaN where it could not be derived."""

    entities: EntityTable
    rows: npt.NDArray[np.int32]
    ts: npt.NDArray[np.float64]
    names: tuple[str, ...]
    values: npt.NDArray[np.float64]


@dataclass(slots=True)
class IngestResult:
    accepted: int = 0  # samples (cells and events) written
    rejected: int = 0
    resets: int = 0  # counter resets detected
    rebased: int = 0  # persistent counters that restarted lower (device replaced)
    swapped: dict[str, float] = field(default_factory=dict)  # entity -> when it proved new
    # Persistent counters read lower than before, not yet taken as a new device: stored to
    # the sinks, left out of the window (a glitch, or the first readings of a swapped GPU).
    counter_drops: int = 0
    ahead: dict[str, float] = field(default_factory=dict)  # node -> seconds its clock runs fast
    # Rows stored to the sinks but not scored: older than the entity's last sample (a retried
    # flush behind a newer one) or than the raw window (a spool drained after a long outage).
    late: int = 0
    rejections: list[Rejection] = field(default_factory=list)
    clean: Batch = field(default_factory=Batch)  # what was accepted, for the sinks
    # Per-second rates of the accepted counters (reset-aware), same columns as `clean`; NaN
    # where a counter had no earlier reading to difference against.
    rates: Batch = field(default_factory=Batch)
    # Metrics ingest derives (the IB bit-error rate), per accepted row of `clean`.
    derived: list[Derived] = field(default_factory=list)
    # Rejections listed in detail; a coalesced ingest of many requests (service.api.coalesce)
    # lists every one, so each request's own can be told apart and counted (`refused_n`).
    detail_limit: int = MAX_DETAILED_REJECTIONS
    refused_n: list[int] = field(default_factory=list)  # samples each listed rejection refused
    # Nodes whose new entities this request's budget held back (ingest.max_new_gpus_per_batch):
    # not refused for good, the same body sent again takes them (service.api.write: 503).
    pending_nodes: set[str] = field(default_factory=set)
    pending_more: bool = False  # more pending nodes than listed: send the whole body again

    def refuse(self, n: int, reason: str, entity: str | None = None, metric: str | None = None,
               line: int | None = None) -> None:
        self.rejected += n
        if len(self.rejections) < self.detail_limit:
            self.rejections.append(Rejection(reason, line=line, entity=entity, metric=metric))
            self.refused_n.append(n)


@functools.cache
def _bounds(scope: Scope) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Lower and upper valid bounds of a scope's frame columns (collectors/catalog.py)."""
    b = np.array([m.bounds for m in CATALOG.columns(scope)], np.float64).reshape(-1, 2)
    return b[:, 0], b[:, 1]


class Ingestor:
    def __init__(self, store: WindowStore, events: EventLog, *, max_future_s: float = 300.0,
                 max_samples: int = 5_000_000) -> None:
        self.store = store
        self.events = events
        self.max_future_s = max_future_s
        self.max_samples = max_samples

    def new_device(self, gpu: str) -> None:
        """A GPU slot holds another board (service.stages.gpu_identity): its counters and its
        links' start again from their next reading instead of reading as a drop that the
        counter rule would take three readings to prove."""
        e = Entity.parse(gpu)
        gw = self.store[Scope.GPU]
        slot = gw.slot(e)
        if slot is None:
            return
        gw.counters.forget_values(np.array([slot], np.intp))
        lw = self.store[Scope.NVLINK]
        links = np.flatnonzero(lw.gpu_of[: len(lw)] == slot)
        if len(links):
            lw.counters.forget_values(links)

    def ingest(self, batch: Batch, now: float, *, from_wire: bool = False,
               detail_limit: int = MAX_DETAILED_REJECTIONS) -> IngestResult:
        """`from_wire`: a request from a sender (the write API), whose new entities are
        capped per request as well as in total. `detail_limit`: rejections listed one by one
        (the rest summarised)."""
        res = IngestResult(detail_limit=detail_limit)
        res.rejected = len(batch.rejected)
        res.rejections.extend(batch.rejected[:detail_limit])
        res.refused_n.extend([1] * len(res.rejections))
        budget = self.max_samples
        admit = self.store.admission(per_batch=from_wire)
        frames = list(batch.frames.values())
        # Advance the clock once to the newest acceptable step so every scope ages together,
        # never past the service's own clock: a sender whose clock runs ahead (within
        # max_future_s) must not age every other entity's data (docs/design.md, "The seams").
        now_k = self._step(now)
        newest = -1
        for f in frames:
            ok = np.isfinite(f.ts) & (f.ts <= now + self.max_future_s)
            if ok.any():
                newest = max(newest, min(int(self.store.step_of(f.ts[ok]).max()), now_k))
        if newest >= 0:
            self.store.advance(newest)
        for frame in frames:
            if len(frame) == 0:
                continue
            width = frame.values.shape[1]
            if len(frame) * width > budget:
                keep = max(budget // max(width, 1), 0)
                res.refuse(len(frame) - keep,
                           f"batch too large: more than {self.max_samples} samples; "
                           f"{len(frame) - keep} {frame.scope} rows refused")
                frame = Frame(frame.entities, frame.rows[:keep], frame.ts[:keep],
                              frame.values[:keep])
            budget -= len(frame) * width
            clean, rates, derived = self._frame(frame, now, res, admit)
            if len(clean):
                res.clean.add(clean)
                res.rates.add(rates)
                if derived is not None:
                    res.derived.append(derived)
        self._events(batch.events, now, res, admit)
        res.pending_nodes, res.pending_more = admit.pending, admit.pending_more
        return res

    def _step(self, ts: float) -> int:
        return int(self.store.step_of(np.asarray([ts], np.float64))[0])

    # ---- frames -----------------------------------------------------------------------------
    def _frame(self, frame: Frame, now: float, res: IngestResult,
               admit: Admission) -> tuple[Frame, Frame, Derived | None]:
        w = self.store[frame.scope]
        slots = w.slots_for(frame.entities, self.store.registry, admit, frame.rows)[frame.rows]
        if (slots < 0).any():
            frame, slots = self._unadmitted(frame, slots, admit, res)
        w.arrived(slots, now)  # by the service's clock: what forgetting goes by
        ts = frame.ts
        ok = np.isfinite(ts)
        self._refuse_rows(~ok, frame, slots, w, res, "timestamp is not a finite number")
        future = ok & (ts > now + self.max_future_s)
        self._refuse_rows(future, frame, slots, w, res,
                          f"timestamp more than {self.max_future_s:g}s in the future")
        ok &= ~future
        # What silence goes by: a sample row with a usable time, however old (a backfill, a
        # spool drain), never an event alone or a row whose time is refused.
        w.heard[slots[ok]] = now
        frame = self._in_range(frame, ok, slots, w, res)
        ks = np.zeros(len(ts), np.int64)
        # A point ahead of the service clock (but within max_future_s) is kept at the
        # present step; its own timestamp still goes to the sinks.
        ks[ok] = np.minimum(self.store.step_of(ts[ok]), self._step(now))
        self._note_skew(ts, ok, now, slots, w, res)
        # Too old for the window, but valid data: the sinks keep it (InfluxDB would), the
        # window store cannot place it, so it is not scored.
        old = ok & (ks <= w.head - w.raw.length)
        ok &= ~old
        idx = np.flatnonzero(ok)
        # Order rows by slot then arrival; a row must not be older than anything before it for
        # the same entity (stored or earlier in this batch). A row of the same step as the
        # entity's last one (a resend, or two points less than a step apart) is merged into
        # that step, last write winning, as InfluxDB overwrites a point it already holds.
        order = idx[np.lexsort((idx, slots[idx]))]
        s_sorted, k_sorted = slots[order], ks[order]
        new_seg = np.ones(len(order), bool)
        new_seg[1:] = s_sorted[1:] != s_sorted[:-1]
        seg_id = np.cumsum(new_seg) - 1
        seg_start = np.flatnonzero(new_seg)
        rank = np.arange(len(order)) - seg_start[seg_id]
        span = np.int64(1) << 40
        shifted = k_sorted + seg_id.astype(np.int64) * span
        run_max = np.maximum.accumulate(shifted) - seg_id.astype(np.int64) * span
        prev_max = np.empty_like(run_max)
        prev_max[1:] = run_max[:-1]
        prev_max[new_seg] = -1
        prev = np.maximum(prev_max, w.counters.steps(s_sorted))
        late = k_sorted < prev
        stored_only = old.copy()
        stored_only[order[late]] = True
        good = ~late
        order, rank = order[good], rank[good]
        # Ranks are processed in turn so counter deltas chain through several rows per entity.
        kept: list[npt.NDArray[np.intp]] = []
        values_out = np.full(frame.values.shape, np.nan)
        rates_out = np.full(frame.values.shape, np.nan)
        derived_out = np.full((len(ts), len(w.derived_cols)), np.nan)
        for r in range(int(rank.max()) + 1 if len(rank) else 0):
            sel = order[rank == r]
            values_out[sel], rates_out[sel], derived_out[sel] = self._rows(
                w, frame, sel, slots[sel], ks[sel], res)
            kept.append(sel)
        if stored_only.any():
            kept.append(self._stored_only(w, frame, stored_only, values_out, res))
        if not kept:
            return Frame.empty(frame.entities), Frame.empty(frame.entities), None
        sel_all = np.sort(np.concatenate(kept))
        rows, kept_ts = frame.rows[sel_all], ts[sel_all]
        derived = None
        if len(w.derived_cols):
            derived = Derived(frame.entities, rows, kept_ts,
                              tuple(w.metrics[j].name for j in w.derived_cols),
                              derived_out[sel_all])
        return (Frame(frame.entities, rows, kept_ts, values_out[sel_all]),
                Frame(frame.entities, rows, kept_ts, rates_out[sel_all]), derived)

    def _rows(self, w: ScopeWindows, frame: Frame, sel: npt.NDArray[np.intp],
              slots: npt.NDArray[np.int32], ks: npt.NDArray[np.int64],
              res: IngestResult) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64],
                                          npt.NDArray[np.float64]]:
        n, m = len(sel), len(w.metrics)
        v = np.full((n, m), np.nan)
        v[:, w.frame_cols] = frame.values[sel]
        ts = frame.ts[sel]
        before = w.counters.previous(slots)
        prev = before.values
        # Rows of the step the entity last wrote merge into it (see _frame).
        same = ks == before.steps
        delta = v - prev
        drop = (delta < 0) & w.is_counter
        bad_drop = drop & ~w.resets
        rebase = w.counters.count_drops(slots, bad_drop, np.isnan(v), REBASE_AFTER)
        if rebase.any():
            res.rebased += int(rebase.sum())
            for i in np.flatnonzero(rebase.any(axis=1)).tolist():
                res.swapped[w.entities[slots[i]].key] = float(ts[i])
            delta[rebase] = np.nan  # what happened between the devices is unknown
            bad_drop &= ~rebase
        # What the device said goes to the sinks as it is (InfluxDB stores it too); only the
        # window holds back until the drop proves a new device or a glitch.
        sink_v = v
        if bad_drop.any():
            res.counter_drops += int(bad_drop.sum())
            for i, j in zip(*np.nonzero(bad_drop), strict=True):
                log.debug("%s %s: persistent counter decreased from %g to %g (a new device "
                          "after %d such readings)", w.entities[slots[i]].key,
                          w.metrics[j].name, prev[i, j], v[i, j], REBASE_AFTER)
            sink_v = v.copy()
            v[bad_drop] = np.nan
            delta[bad_drop] = np.nan
        reset = drop & w.resets
        res.resets += int(reset.sum())
        delta[reset] = v[reset]
        if w.scope is Scope.IB_PORT:
            self._ber(w, v, delta, ts, before)
        present = ~np.isnan(v)
        stored = np.where(w.is_counter, delta, v)
        dt = ts[:, None] - before.ts
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = np.where(w.is_counter & (dt > 0), delta / dt, np.nan)
        if same.any():
            stored[same] = self._merge(w, slots[same], ks[same], stored[same], present[same])
        w.counters.record(slots, ks, ts, v, present, before)
        w.write(slots, ks, stored.T.astype(np.float32))
        res.accepted += int((~np.isnan(sink_v[:, w.frame_cols])).sum())
        return sink_v[:, w.frame_cols], rate[:, w.frame_cols], v[:, w.derived_cols]

    def _note_skew(self, ts: npt.NDArray[np.float64], ok: npt.NDArray[np.bool_], now: float,
                   slots: npt.NDArray[np.int32], w: ScopeWindows, res: IngestResult) -> None:
        """Nodes whose points are stamped ahead of the service's clock by more than two steps
        (a clock running fast): reported, never trusted to move anyone's time."""
        ahead = ts - now
        fast = np.flatnonzero(ok & (ahead > 2 * self.store.config.step_s))
        for i in fast.tolist():
            node = w.entities[slots[i]].node
            res.ahead[node] = max(res.ahead.get(node, 0.0), float(ahead[i]))

    @staticmethod
    def _stored_only(w: ScopeWindows, frame: Frame, mask: npt.NDArray[np.bool_],
                     values_out: npt.NDArray[np.float64],
                     res: IngestResult) -> npt.NDArray[np.intp]:
        """Late rows go to the sinks as read (their counters as the cumulative readings they
        are; out-of-range values were refused before); the window is not touched."""
        sel = np.flatnonzero(mask)
        v = frame.values[sel].astype(np.float64)
        values_out[sel] = v
        res.late += len(sel)
        res.accepted += int(np.count_nonzero(~np.isnan(v)))
        return sel

    @staticmethod
    def _merge(w: ScopeWindows, slots: npt.NDArray[np.int32], ks: npt.NDArray[np.int64],
               stored: npt.NDArray[np.float64],
               present: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
        """What a step holds once rows of it arrive again: each reported gauge or state
        replaces the held value; a counter's increase adds to the step's (its delta is taken
        from the step's own last reading, so an identical resend adds nothing); whatever the
        row does not report keeps the held value."""
        held = w.raw.agg[:, (ks % w.raw.length).astype(np.intp), slots].T.astype(np.float64)
        add = np.where(np.isnan(held), 0.0, held) + np.where(np.isnan(stored), 0.0, stored)
        add = np.where(np.isnan(held) & np.isnan(stored), np.nan, add)
        merged = np.where(w.is_counter, add, stored)
        return np.where(present | (~np.isnan(stored)), merged, held)

    @staticmethod
    def _ber(w: ScopeWindows, v: npt.NDArray[np.float64], delta: npt.NDArray[np.float64],
             ts: npt.NDArray[np.float64], before: Previous) -> None:
        """Bit-error rate over the last step: symbol errors / bits carried at the link rate
        (`before`: what the rows' slots held before them)."""
        sym, rate, ber = w.col("ib_symbol_error"), w.col("ib_rate"), w.col("ib_ber")
        gbps = np.where(np.isnan(v[:, rate]), before.values[:, rate], v[:, rate])
        dt = ts - before.ts[:, sym]
        with np.errstate(invalid="ignore", divide="ignore"):
            est = delta[:, sym] / (gbps * 1e9 * dt)
        v[:, ber] = np.where((dt > 0) & (gbps > 0), est, np.nan)
        delta[:, ber] = v[:, ber]

    @staticmethod
    def _unadmitted(frame: Frame, slots: npt.NDArray[np.int32], admit: Admission,
                    res: IngestResult) -> tuple[Frame, npt.NDArray[np.int32]]:
        """Refuse the rows of entities the limits turned away; the frame of the others."""
        out = slots < 0
        reason = admit.reason(frame.scope)
        ents = frame.entities.entities
        for i in np.flatnonzero(out)[:res.detail_limit].tolist():
            res.refuse(int(np.count_nonzero(~np.isnan(frame.values[i]))) or 1, reason,
                       entity=ents[frame.rows[i]].key)
        extra = int(out.sum()) - res.detail_limit
        if extra > 0:
            res.refuse(extra, f"{reason}: {extra} more rows")
        ok = ~out
        return Frame(frame.entities, frame.rows[ok], frame.ts[ok], frame.values[ok]), slots[ok]

    def _refuse_rows(self, mask: npt.NDArray[np.bool_], frame: Frame,
                     slots: npt.NDArray[np.int32], w: ScopeWindows, res: IngestResult,
                     reason: str) -> None:
        if not mask.any():
            return
        for i in np.flatnonzero(mask)[:res.detail_limit]:
            res.refuse(int(np.count_nonzero(~np.isnan(frame.values[i]))) or 1,
                       f"{reason}: ts={float(frame.ts[i])!r}", entity=w.entities[slots[i]].key)
        extra = int(mask.sum()) - res.detail_limit
        if extra > 0:
            res.refuse(extra, f"{reason}: {extra} more rows")

    @staticmethod
    def _in_range(frame: Frame, rows_ok: npt.NDArray[np.bool_], slots: npt.NDArray[np.int32],
                  w: ScopeWindows, res: IngestResult) -> Frame:
        """The frame with every value outside its metric's valid range refused, cell by cell
        (an infinity, a negative counter, a state off its enumeration, a 1e308 temperature):
        such a value is no reading, and it must fire no hard rule nor reach a sink. Rows
        already refused whole are not looked at again; NaN is missing, never out of range."""
        lo, hi = _bounds(frame.scope)
        v = frame.values
        with np.errstate(invalid="ignore"):
            bad = ~np.isnan(v) & ~((v >= lo) & (v <= hi)) & rows_ok[:, None]
        if not bad.any():
            return frame
        metrics = CATALOG.columns(frame.scope)
        rows, cols = np.nonzero(bad)
        for i, j in zip(rows[:res.detail_limit], cols[:res.detail_limit],
                        strict=True):
            m = metrics[j]
            res.refuse(1, m.out_of_range(float(v[i, j])) or f"{m.name} is out of range",
                       entity=w.entities[slots[i]].key, metric=m.name)
        extra = len(rows) - res.detail_limit
        if extra > 0:
            res.refuse(extra, f"value outside its metric's valid range: {extra} more values")
        v = v.copy()
        v[bad] = np.nan
        return Frame(frame.entities, frame.rows, frame.ts, v)

    # ---- events -------------------------------------------------------------------------------
    def _events(self, events: EventFrame, now: float, res: IngestResult,
                admit: Admission) -> None:
        for key, ts, metric, value in zip(events.keys, events.ts, events.metrics, events.values,
                                          strict=True):
            why = self._event_problem(key, ts, metric, value, now)
            if why is not None:
                res.refuse(1, why, entity=key, metric=metric)
                continue
            entity = Entity.parse(key)
            if self.store[entity.scope].slots_for_entity(entity, self.store.registry, now,
                                                         admit) < 0:
                res.refuse(1, admit.reason(entity.scope), entity=key, metric=metric)
                continue
            if self.events.add(Event(ts, key, metric, value)):  # a resend is stored once
                res.clean.events.add(key, ts, metric, value)
            res.accepted += 1

    def _event_problem(self, key: str, ts: float, metric: str, value: float,
                       now: float) -> str | None:
        if metric not in CATALOG or CATALOG[metric].kind is not Kind.EVENT:
            return f"unknown event metric {metric!r}"
        try:
            entity = Entity.parse(key)
        except ValueError as e:
            return str(e)
        if entity.scope is not CATALOG[metric].scope:
            return f"{metric} events belong to {CATALOG[metric].scope} entities, not {key!r}"
        if not np.isfinite(ts) or ts > now + self.max_future_s:
            return f"bad event timestamp {ts!r}"
        if not np.isfinite(value) or value != int(value) or value < 0:
            return f"event code must be a non-negative integer, got {value!r}"
        return CATALOG[metric].out_of_range(value)
