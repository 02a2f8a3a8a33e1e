"""Which NVLink rows the sink writes (docs/influxdb.md, "NVLink: written when it moves").

A GPU has 18 links whose counters are almost always still; writing every link every round was
most of what InfluxDB stored. A link's `nvlink` (and `nvlink_rate`) point is written when its
values differ from the last point written for it, together with the round before the change
(so a panel's min / max over an interval, and a derivative, see the old value up to the
change), and at least every `HEARTBEAT_S`, so every interval of a minute holds a point of
every reporting link. Readers carry a link's last written point forward (service.history.influx.
links); the GPU's `nvlink_mask` field says which links reported in each round, so a carried
value is only ever filled in for a round in which the link really reported."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from collectors.frames import Entity, EntityTable, Frame
from collectors.table_cache import TableCache

HEARTBEAT_S = 55.0  # with rounds 5 s apart, points of a quiet link are 55 s apart: one per minute
MASK_FIELD = "nvlink_mask"  # on the `gpu` measurement: bit k set = link k reported this round
MASK_BITS = 63  # links numbered at or above this are always written (no bit for them)


def link_bit(e: Entity) -> int | None:
    """The link's bit in its GPU's mask; None for a link number the mask cannot hold."""
    return int(e.sub) if (e.sub.isascii() and e.sub.isdigit()) and int(e.sub) < MASK_BITS else None


@dataclass
class _State:
    """Per link (index into these arrays): the last written row and the previous row seen."""

    width: int
    written: np.ndarray = field(init=False)  # values of the last written point
    written_ts: np.ndarray = field(init=False)  # its time; NaN: never written
    prev: np.ndarray = field(init=False)  # the last row seen
    prev_ts: np.ndarray = field(init=False)
    prev_out: np.ndarray = field(init=False)  # whether that row was written

    def __post_init__(self) -> None:
        self.written = np.empty((0, self.width))
        self.written_ts = self.prev_ts = np.empty(0)
        self.prev = np.empty((0, self.width))
        self.prev_out = np.empty(0, bool)

    def grow(self, n: int) -> None:
        k = n - len(self.written_ts)
        if k > 0:
            self.written = np.vstack([self.written, np.full((k, self.width), np.nan)])
            self.prev = np.vstack([self.prev, np.full((k, self.width), np.nan)])
            self.written_ts = np.concatenate([self.written_ts, np.full(k, np.nan)])
            self.prev_ts = np.concatenate([self.prev_ts, np.full(k, np.nan)])
            self.prev_out = np.concatenate([self.prev_out, np.zeros(k, bool)])


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise equality where NaN equals NaN (a field not reported is a value too)."""
    same: np.ndarray = np.all((a == b) | (np.isnan(a) & np.isnan(b)), axis=1)
    return same


class LinkGate:
    """Chooses the rows of one measurement's frames to write; one gate per measurement."""

    def __init__(self, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.heartbeat_s = heartbeat_s
        self._index: dict[Entity, int] = {}
        # table -> (the table, link index per slot, whether a slot has no mask bit)
        self._tables: TableCache[tuple[np.ndarray, np.ndarray]] = TableCache(64)
        self._state: _State | None = None

    def _indices(self, table: EntityTable) -> tuple[np.ndarray, np.ndarray]:
        hit = self._tables.get(table)  # tables are reused while the topology holds
        if hit is not None:
            return hit
        if len(self._index) > 2_000_000:
            self._index.clear()
            self._state = None
            self._tables.clear()
        idx = np.array([self._index.setdefault(e, len(self._index)) for e in table.entities],
                       dtype=np.int64)
        unmasked = np.array([link_bit(e) is None for e in table.entities], dtype=bool)
        self._tables.put(table, (idx, unmasked))
        return idx, unmasked

    def select(self, frame: Frame) -> Frame:
        """The rows to write, in frame order: changed rows, the row before each change that
        was not written, and heartbeats. Updates what was written."""
        if self._state is None or self._state.width != frame.values.shape[1]:
            self._state = _State(frame.values.shape[1])
            self._index.clear()
            self._tables.clear()
        idx, unmasked = self._indices(frame.entities)
        links, always = idx[frame.rows], unmasked[frame.rows]
        st = self._state
        st.grow(len(self._index))
        order = np.argsort(frame.ts, kind="stable")
        rows: list[tuple[int, float, np.ndarray]] = []  # (slot, ts, values)
        # One pass per round a frame holds (a frame normally is one round: a single pass).
        remaining = order
        while len(remaining):
            ix = links[remaining]
            _, first = np.unique(ix, return_index=True)
            take, remaining = remaining[np.sort(first)], np.delete(remaining, first)
            rows += self._step(st, links[take], frame.rows[take], frame.ts[take],
                               frame.values[take], always[take])
        if not rows:
            return Frame(frame.entities, frame.rows[:0], frame.ts[:0], frame.values[:0])
        rows.sort(key=lambda r: r[1])
        return Frame(frame.entities, np.array([r[0] for r in rows], np.int32),
                     np.array([r[1] for r in rows]), np.array([r[2] for r in rows]))

    def _step(self, st: _State, ix: np.ndarray, slots: np.ndarray, ts: np.ndarray,
              vals: np.ndarray, always: np.ndarray) -> list[tuple[int, float, np.ndarray]]:
        moved = ~_same(vals, st.written[ix])
        never = np.isnan(st.written_ts[ix])
        due = ~(ts - st.written_ts[ix] < self.heartbeat_s)  # NaN (never written): due
        out = moved | never | due | always  # no mask bit: readers could not fill it in
        # The round before a change, unless written already: its value held until the change.
        pre = moved & ~never & ~st.prev_out[ix] & ~np.isnan(st.prev_ts[ix]) & (
            st.prev_ts[ix] > st.written_ts[ix])
        got: list[tuple[int, float, np.ndarray]] = []
        for i in np.flatnonzero(pre).tolist():
            got.append((int(slots[i]), float(st.prev_ts[ix[i]]), st.prev[ix[i]].copy()))
        for i in np.flatnonzero(out).tolist():
            got.append((int(slots[i]), float(ts[i]), vals[i]))
        w = ix[out]
        st.written[w] = vals[out]
        st.written_ts[w] = ts[out]
        st.prev[ix] = vals
        st.prev_ts[ix] = ts
        st.prev_out[ix] = out
        return got


def masks(frame: Frame) -> dict[tuple[Entity, float], int]:
    """Per (GPU, time): the bits of the links a clean NVLink frame holds at that time."""
    out: dict[tuple[Entity, float], int] = {}
    ents = frame.entities
    gpus: dict[Entity, tuple[Entity, int | None]] = {}
    for slot, ts in zip(frame.rows.tolist(), frame.ts.tolist(), strict=True):
        e = ents[slot]
        g = gpus.get(e)
        if g is None:
            g = gpus[e] = (Entity.parse(e.gpu_key) if e.gpu_key else e, link_bit(e))
        if g[1] is not None:
            k = (g[0], ts)
            out[k] = out.get(k, 0) | (1 << g[1])
    return out
