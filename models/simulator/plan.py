"""The plan: every event of a trace decided up front, as effects on metric columns.

Planners (failures, benign traps) describe what happens through a PlanBuilder; `finalize`
resolves what depends on the whole timeline (counter resets, flags that clear at the next
reset) and freezes everything into time-sorted arrays the renderer slices per chunk.

Effect kinds:
- steps: a counter increases by delta at time t (resets become negative steps here);
- intervals: gauges and states changed over [t0, t1) (see Op);
- segments: counters growing at a rate (segments.py);
- xids: discrete Xid events on a GPU;
- resets: volatile counters (or all, for a replaced GPU) drop to 0 at t.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.catalog import CATALOG, Kind, Scope
from models.simulator.segments import Segment, split_at_resets
from models.simulator.topology import Topology

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
ROW = "*"  # an interval column meaning the whole row (all metrics of the entity)
LOAD = "load"  # a GPU pseudo-column: the job load before util, power and temperature follow it
IDLE_WIDTH = "idle_width"  # a GPU pseudo-column: the PCIe width a board trains to at idle
SCOPES = (Scope.GPU, Scope.NVLINK, Scope.IB_PORT, Scope.PSU, Scope.FAN, Scope.NODE)


class Op(IntEnum):
    SET = 0  # states: samples whose time lies in [t0, t1) read v0
    ADD = 1  # gauges: += v0 times the overlap of the sample's window with [t0, t1)
    RAMP = 2  # gauges: += the window mean of a line from v0 at t0 to v1 at t1
    SCALE = 3  # gauges: *= 1 - overlap * (1 - v0)
    NAN = 4  # samples whose time lies in [t0, t1) are missing


@dataclass(slots=True)
class Intervals:
    t0: F64
    t1: F64
    e0: I64
    e1: I64
    op: I64
    v0: F64
    v1: F64

    def active(self, ta: float, tb: float) -> I64:
        """Indices of intervals overlapping [ta, tb]."""
        return np.flatnonzero((self.t0 <= tb) & (self.t1 > ta))


@dataclass(slots=True)
class ScopePlan:
    steps_t: F64
    steps_e: I64
    steps_c: I64  # column index in CATALOG.columns(scope)
    steps_d: F64
    intervals: dict[str, Intervals]
    segments: list[Segment]
    reset_t: F64  # every reset of any entity of this scope, time-sorted
    reset_e: I64


@dataclass(slots=True)
class Plan:
    scopes: dict[Scope, ScopePlan]
    xid_t: F64
    xid_e: I64
    xid_code: I64
    skews: list[tuple[int, float, float, float]]  # node, t0, t1, offset s
    down: list[list[tuple[float, float]]]  # per node: sorted intervals with no jobs
    labels: list[dict[str, Any]]


@dataclass
class PlanBuilder:
    topo: Topology
    steps: list[tuple[float, Scope, int, str, float]] = field(default_factory=list)
    intervals: list[tuple[Scope, str, int, int, float, float, Op, float, float]] = field(
        default_factory=list)
    flags: list[tuple[Scope, int, str, float, float, bool]] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    xids: list[tuple[float, int, int]] = field(default_factory=list)
    resets: list[tuple[float, Scope, int, int, bool]] = field(default_factory=list)
    skews: list[tuple[int, float, float, float]] = field(default_factory=list)
    down: list[tuple[int, float, float]] = field(default_factory=list)
    labels: list[dict[str, Any]] = field(default_factory=list)

    def step(self, t: float, scope: Scope, ent: int, column: str, delta: float) -> None:
        self.steps.append((t, scope, ent, column, delta))

    def interval(self, scope: Scope, column: str, ents: tuple[int, int], t0: float, t1: float,
                 op: Op, v0: float, v1: float = 0.0) -> None:
        if t1 > t0:
            self.intervals.append((scope, column, ents[0], ents[1], t0, t1, op, v0, v1))

    def flag(self, scope: Scope, ent: int, column: str, t: float, value: float = 1.0,
             *, until_replace: bool = False) -> None:
        """A state set at t until the next reset of the entity (a replacement if asked)."""
        self.flags.append((scope, ent, column, t, value, until_replace))

    def segment(self, scope: Scope, ent: int, column: str, t0: float, t1: float, r0: float,
                t_rise: float | None = None, r1: float | None = None) -> None:
        a, b = _bin(t0), _bin(t1)
        if b > a and r0 > 0:
            rise = b if t_rise is None else min(max(_bin(t_rise), a), b)
            self.segments.append(Segment(len(self.segments), scope, ent, column, a, b, r0,
                                         rise, r0 if r1 is None else max(r1, r0)))

    def xid(self, t: float, gpu: int, code: int) -> None:
        self.xids.append((t, gpu, code))

    def reset(self, t: float, scope: Scope, ents: tuple[int, int], *,
              persistent: bool = False) -> float:
        """Zero the counters of ents at t (rounded to the minute grid); returns that time."""
        t = _bin(t)
        self.resets.append((t, scope, ents[0], ents[1], persistent))
        return t

    def node_down(self, node: int, t0: float, t1: float) -> None:
        self.down.append((node, t0, t1))


def _bin(t: float) -> float:
    return math.floor(t / 60.0) * 60.0


def finalize(b: PlanBuilder) -> Plan:
    resets = _expand_resets(b)
    scopes = {s: _scope_plan(b, s, resets[s]) for s in SCOPES}
    xs = sorted(b.xids)
    down: list[list[tuple[float, float]]] = [[] for _ in range(b.topo.nodes)]
    for node, t0, t1 in b.down:
        down[node].append((t0, t1))
    labels = sorted(b.labels, key=lambda d: (d.get("time", d.get("start", 0.0)), str(d)))
    return Plan(
        scopes=scopes,
        xid_t=np.array([x[0] for x in xs], dtype=np.float64),
        xid_e=np.array([x[1] for x in xs], dtype=np.int64),
        xid_code=np.array([x[2] for x in xs], dtype=np.int64),
        skews=sorted(b.skews),
        down=[merge_intervals(sorted(d)) for d in down],
        labels=labels,
    )


def merge_intervals(ivs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted intervals with the overlapping ones joined."""
    out: list[tuple[float, float]] = []
    for a, z in ivs:
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], z))
        else:
            out.append((a, z))
    return out


# Per scope and entity: sorted (time, persistent) resets.
_Resets = dict[int, list[tuple[float, bool]]]


def _expand_resets(b: PlanBuilder) -> dict[Scope, _Resets]:
    out: dict[Scope, _Resets] = {s: defaultdict(list) for s in SCOPES}
    for t, scope, e0, e1, persistent in b.resets:
        for e in range(e0, e1):
            out[scope][e].append((t, persistent))
    for per in out.values():
        for lst in per.values():
            lst.sort()
    return out


def _scope_plan(b: PlanBuilder, scope: Scope, resets: _Resets) -> ScopePlan:
    cols = {m.name: i for i, m in enumerate(CATALOG.columns(scope))}
    metrics = CATALOG.columns(scope)
    steps = [(t, e, cols[c], d) for t, s, e, c, d in b.steps if s is scope]
    steps += _reset_steps(steps, resets, metrics)
    steps.sort()
    ivs: dict[str, list[tuple[float, float, int, int, int, float, float]]] = defaultdict(list)
    for s, c, e0, e1, t0, t1, op, v0, v1 in b.intervals:
        if s is scope:
            ivs[c].append((t0, t1, e0, e1, int(op), v0, v1))
    for s, e, c, t, v, until_replace in b.flags:
        if s is scope:
            ends = [r for r, pers in resets.get(e, []) if r > t and (pers or not until_replace)]
            ivs[c].append((t, ends[0] if ends else math.inf, e, e + 1, int(Op.SET), v, 0.0))
    segs = [g for g in b.segments if g.scope is scope]
    for g in segs:
        g.pieces = split_at_resets(g, np.array([r for r, _ in resets.get(g.ent, [])]))
    flat = sorted((t, e) for e, lst in resets.items() for t, _ in lst)
    return ScopePlan(
        steps_t=np.array([x[0] for x in steps], dtype=np.float64),
        steps_e=np.array([x[1] for x in steps], dtype=np.int64),
        steps_c=np.array([x[2] for x in steps], dtype=np.int64),
        steps_d=np.array([x[3] for x in steps], dtype=np.float64),
        intervals={c: _intervals(v) for c, v in ivs.items()},
        segments=segs,
        reset_t=np.array([x[0] for x in flat], dtype=np.float64),
        reset_e=np.array([x[1] for x in flat], dtype=np.int64),
    )


def _intervals(rows: list[tuple[float, float, int, int, int, float, float]]) -> Intervals:
    rows.sort()
    a = list(zip(*rows, strict=True))
    return Intervals(np.array(a[0]), np.array(a[1]), np.array(a[2], dtype=np.int64),
                     np.array(a[3], dtype=np.int64), np.array(a[4], dtype=np.int64),
                     np.array(a[5]), np.array(a[6]))


def _reset_steps(steps: list[tuple[float, int, int, float]], resets: _Resets,
                 metrics: tuple[Any, ...]) -> list[tuple[float, int, int, float]]:
    """A reset becomes a negative step that returns the stepped part of a counter to 0 (rate
    segments and load-driven counters reset themselves)."""
    by_key: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for t, e, c, d in steps:
        if metrics[c].kind is Kind.COUNTER:
            by_key[(e, c)].append((t, d))
    out: list[tuple[float, int, int, float]] = []
    for (e, c), lst in by_key.items():
        rs = [r for r, pers in resets.get(e, []) if pers or metrics[c].resets]
        if not rs:
            continue
        lst.sort()
        ts = np.array([t for t, _ in lst])
        run = np.concatenate(([0.0], np.cumsum([d for _, d in lst])))
        before = 0.0
        for r in rs:
            total = run[np.searchsorted(ts, r, side="left")]
            if total - before:
                out.append((r, e, c, -(total - before)))
            before = total
    return out
