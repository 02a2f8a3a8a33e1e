"""The chunk loop: sample times, node load, the scope frames, Xid events, one Batch each.

Memory is bounded by `time.chunk_mb`: one chunk holds T steps of every entity, with T chosen so
the values of its frames fit; nothing else grows with the trace length.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, EventFrame, Frame
from models.simulator.config import SimConfig
from models.simulator.jobs import Jobs
from models.simulator.plan import SCOPES, Plan
from models.simulator.render_chassis import ChassisRenderer
from models.simulator.render_common import F64, Window
from models.simulator.render_gpu import GpuRenderer, NoisePool
from models.simulator.render_links import IbRenderer, NvlinkRenderer
from models.simulator.topology import Topology, rng_for

STREAM_RENDER = 600


def chunk_steps(cfg: SimConfig, topo: Topology) -> int:
    """Steps per Batch: values, rows and ts of all frames within chunk_mb, at most a day."""
    per_step = sum(topo.size(s) * (len(CATALOG.columns(s)) + 1.5) * 8 for s in SCOPES)
    fit = int(cfg.time.chunk_mb * 2**20 // per_step)
    return max(1, min(fit, 86400 // cfg.time.step_s, max(cfg.time.steps, 1)))


class Renderer:
    def __init__(self, cfg: SimConfig, topo: Topology, plan: Plan, jobs: Jobs) -> None:
        self.cfg, self.topo, self.plan, self.jobs = cfg, topo, plan, jobs
        for sp in plan.scopes.values():
            for seg in sp.segments:  # a fresh run starts from clean segment caches
                seg.clear_cache()
        noise = NoisePool(cfg.seed)
        self.gpu = GpuRenderer(cfg, topo, plan.scopes[Scope.GPU], noise)
        self.nvl = NvlinkRenderer(cfg, topo, plan.scopes[Scope.NVLINK])
        self.ib = IbRenderer(cfg, topo, plan.scopes[Scope.IB_PORT], jobs)
        self.chassis = ChassisRenderer(cfg, topo, plan.scopes, self.gpu.inlet_off)
        self.node_int = np.zeros(topo.nodes)
        sk = plan.skews
        self.skew = (np.array([s[0] for s in sk], dtype=np.int64),
                     np.array([s[1] for s in sk]), np.array([s[2] for s in sk]),
                     np.array([s[3] for s in sk]))

    def batches(self) -> Iterator[Batch]:
        cfg = self.cfg
        total, per = cfg.time.steps, chunk_steps(cfg, self.topo)
        step = float(cfg.time.step_s)
        prev = -np.inf
        for ci, k0 in enumerate(range(0, total, per)):
            times = cfg.time.start_s + step * np.arange(k0, min(k0 + per, total), dtype=np.float64)
            win = Window(ci, times, step, prev)
            yield self._chunk(win)
            prev = float(times[-1])

    def _chunk(self, win: Window) -> Batch:
        rng = rng_for(self.cfg.seed, STREAM_RENDER, win.index)
        t_n, topo = len(win.times), self.topo
        edges = win.edges
        active = self.jobs.active(float(edges[0]), float(edges[-1]))
        load = np.zeros((t_n, topo.nodes))
        for j in active:
            w = np.diff(self.jobs.integral(int(j), edges)) / win.step
            load[:, self.jobs.nodes[j]] += w[:, None]
        if win.index == 0:  # load integrals count from the first sample time, at any step
            self.node_int = -load[0] * win.step
        node_int = np.vstack([self.node_int, self.node_int + np.cumsum(load * win.step, axis=0)])
        self.node_int = node_int[-1].copy()

        bufs = {s: np.empty((len(CATALOG.columns(s)), t_n * topo.size(s))) for s in SCOPES}
        self.gpu.render(bufs[Scope.GPU], load, win, rng)
        self.nvl.render(bufs[Scope.NVLINK], win, rng)
        self.ib.render(bufs[Scope.IB_PORT], win, node_int, active, rng)
        self.chassis.render(bufs, load, self.gpu.last_inlet, win, rng)
        batch = Batch()
        for s in SCOPES:
            e = topo.size(s)
            ts = np.repeat(win.times, e)
            self._skew(ts.reshape(t_n, e), s, win)
            rows = np.tile(np.arange(e, dtype=np.int32), t_n)
            batch.add(Frame(topo.tables[s], rows, ts, bufs[s].T))
        batch.events = self._xids(win)
        return batch

    def _skew(self, ts: F64, scope: Scope, win: Window) -> None:
        nodes, t0, t1, off = self.skew
        for i in np.flatnonzero((t0 <= win.t_last) & (t1 > win.times[0])):
            ka = int(np.searchsorted(win.times, t0[i], "left"))
            kb = int(np.searchsorted(win.times, t1[i], "left"))
            e0, e1 = self.topo.node_slice(scope, int(nodes[i]))
            ts[ka:kb, e0:e1] += off[i]

    def _offset(self, node: int, t: float) -> float:
        nodes, t0, t1, off = self.skew
        hit = np.flatnonzero((nodes == node) & (t0 <= t) & (t1 > t))
        return float(off[hit[0]]) if len(hit) else 0.0

    def _xids(self, win: Window) -> EventFrame:
        p = self.plan
        # Events planned before the run starts (precursors of early failures) have no round.
        lo = int(np.searchsorted(p.xid_t, max(win.prev, self.cfg.time.start_s - 1e-9), "right"))
        hi = int(np.searchsorted(p.xid_t, win.t_last, "right"))
        ev = EventFrame()
        table = self.topo.tables[Scope.GPU]
        for t, e, code in zip(p.xid_t[lo:hi], p.xid_e[lo:hi], p.xid_code[lo:hi], strict=True):
            node = self.topo.node_of(Scope.GPU, int(e))
            ev.add(table[int(e)].key, float(t) + self._offset(node, float(t)), "xid", float(code))
        return ev
