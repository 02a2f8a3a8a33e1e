"""Column operations shared by the scope renderers.

A chunk's values are one (columns, T*E) float64 buffer per scope, so each column is a
contiguous [T, E] block (time-major, entities minor): every operation here writes a column
sequentially, and the Frame gets the transposed view (column-major values; row i is entity
i % E at time i // E).

Sample k stands for the window (t_k - step, t_k]: gauges are its mean, counters and states are
read at t_k. Interval effects follow the same rule (see plan.Op).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.simulator.config import FleetConfig
from models.simulator.plan import Intervals, Op, ScopePlan
from models.simulator.segments import Segment

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(slots=True)
class Window:
    """The sample times of one chunk and what came before them."""

    index: int  # chunk number
    times: F64  # sample times t_k
    step: float
    prev: float  # the previous chunk's last sample time (-inf for the first chunk)

    @property
    def t_last(self) -> float:
        return float(self.times[-1])

    @property
    def edges(self) -> F64:
        """Window edges: t_0 - step, t_0, ..., t_last."""
        return np.concatenate(([self.times[0] - self.step], self.times))


def overlap(win: Window, t0: float, t1: float, ka: int, kb: int) -> F64:
    """Share of each window ka..kb-1 that lies inside [t0, t1)."""
    t = win.times[ka:kb]
    inside = np.clip(np.minimum(t1, t) - np.maximum(t0, t - win.step), 0.0, win.step)
    return np.asarray(inside / win.step, dtype=np.float64)


def apply_intervals(view: F64, ivs: Intervals | None, win: Window) -> None:
    """Apply every interval of one column to its [T, E] view."""
    if ivs is None:
        return
    times, step = win.times, win.step
    for i in ivs.active(float(times[0]) - step, win.t_last):
        op, t0, t1 = int(ivs.op[i]), float(ivs.t0[i]), float(ivs.t1[i])
        e0, e1, v0 = int(ivs.e0[i]), int(ivs.e1[i]), float(ivs.v0[i])
        if op in (Op.SET, Op.NAN):
            ka = int(np.searchsorted(times, t0, "left"))
            kb = int(np.searchsorted(times, t1, "left"))
            if kb > ka:
                view[ka:kb, e0:e1] = v0 if op == Op.SET else np.nan
            continue
        ka = int(np.searchsorted(times, t0, "right"))
        kb = int(np.searchsorted(times, t1 + step, "left"))
        if kb <= ka:
            continue
        f = overlap(win, t0, t1, ka, kb)
        if op == Op.ADD:
            view[ka:kb, e0:e1] += (v0 * f)[:, None]
        elif op == Op.SCALE:
            view[ka:kb, e0:e1] *= (1.0 - f * (1.0 - v0))[:, None]
        else:  # RAMP: the line's value at the middle of the overlap, times the overlap
            t = win.times[ka:kb]
            mid = (np.maximum(t0, t - step) + np.minimum(t1, t)) / 2
            line = v0 + (float(ivs.v1[i]) - v0) * (mid - t0) / (t1 - t0)
            view[ka:kb, e0:e1] += (line * f)[:, None]


def row_nan(buf3: F64, ivs: Intervals | None, win: Window) -> None:
    """Whole-row gaps on a (C, T, E) buffer."""
    if ivs is None:
        return
    times = win.times
    for i in ivs.active(float(times[0]), win.t_last):
        ka = int(np.searchsorted(times, ivs.t0[i], "left"))
        kb = int(np.searchsorted(times, ivs.t1[i], "left"))
        if kb > ka:
            buf3[:, ka:kb, int(ivs.e0[i]):int(ivs.e1[i])] = np.nan


def stepped_counters(buf3: F64, sp: ScopePlan, counter_cols: list[int], state: dict[int, F64],
                     win: Window) -> None:
    """Counters = carried value + the steps that fall in this chunk, cumulated over time."""
    lo = int(np.searchsorted(sp.steps_t, win.prev, "right"))
    hi = int(np.searchsorted(sp.steps_t, win.t_last, "right"))
    st_c = sp.steps_c[lo:hi]
    for j in counter_cols:
        view = buf3[j]
        cur = state[j]
        view[:] = cur
        sel = np.flatnonzero(st_c == j) + lo
        if len(sel) == 0:
            continue
        k = np.searchsorted(win.times, sp.steps_t[sel], "left")
        ents, inv = np.unique(sp.steps_e[sel], return_inverse=True)
        d = np.zeros((len(win.times), len(ents)))
        np.add.at(d, (k, inv), sp.steps_d[sel])
        np.cumsum(d, axis=0, out=d)
        view[:, ents] += d
        cur[ents] += d[-1]


def segment_counters(buf3: F64, segs: list[Segment], col_of: dict[str, int], seed: int,
                     win: Window) -> None:
    """Add each rate segment's reset-aware contribution to its counter."""
    times = win.times
    for seg in segs:
        view = buf3[col_of[seg.column]]
        for p in seg.pieces:
            if p.hold <= win.prev or p.start > win.t_last:
                continue
            if p.c_start is None:
                p.c_start = float(seg.cum(seed, np.array([p.start]))[0])
            if p.c_until is None and p.until <= win.t_last:
                p.c_until = float(seg.cum(seed, np.array([p.until]))[0])
            ka = int(np.searchsorted(times, p.start, "left"))
            kb = int(np.searchsorted(times, p.hold, "left"))
            if kb <= ka:
                continue
            t = times[ka:kb]
            vals = np.empty(len(t))
            run = t < p.until
            vals[run] = seg.cum(seed, t[run])
            if not run.all():
                if p.c_until is None:
                    p.c_until = float(seg.cum(seed, np.array([p.until]))[0])
                vals[~run] = p.c_until
            view[ka:kb, seg.ent] += vals - p.c_start
        seg.forget_before(win.prev)


def drop_random(buf3: F64, frac: float, rng: np.random.Generator) -> None:
    """Telemetry loss: a random share of samples (entity x time) is missing (docs/simulator.md)."""
    if frac <= 0:
        return
    _, t, e = buf3.shape
    n = int(rng.binomial(t * e, frac))
    if n:
        flat = buf3.reshape(buf3.shape[0], t * e)
        flat[:, rng.integers(0, t * e, n)] = np.nan


def fleet_limits(buf3: F64, fleet: FleetConfig, col_of: dict[str, int],
                 error_cols: list[int]) -> None:
    """What the hardware cannot report: error counters that stick at or wrap past
    `fleet.counter_max`, and columns the fleet never reports (`fleet.missing_fields`)."""
    top = fleet.counter_max
    if top is not None:
        for j in error_cols:
            view = buf3[j]
            if fleet.counter_overflow == "stick":
                np.minimum(view, top, out=view)
            else:  # a wrapping counter reads its count modulo max + 1
                np.mod(view, top + 1.0, out=view)
    for name in fleet.missing_fields:
        if name in col_of:
            buf3[col_of[name]] = np.nan
