"""NVLink and InfiniBand frames.

NVLink: four error counters per link (steps only) and the link state. IB: error counters (steps
and rate segments), data counters growing with the node's load at the link rate, port state 4
(ACTIVE) and the link rate. Data counters count IBA words (octets / 4) and are reset with the
other port counters when the node reboots.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from collectors.catalog import CATALOG, Kind, Scope
from models.simulator.config import SimConfig
from models.simulator.jobs import Jobs
from models.simulator.plan import ROW, ScopePlan
from models.simulator.render_common import (
    F64,
    Window,
    apply_intervals,
    drop_random,
    fleet_limits,
    row_nan,
    segment_counters,
    stepped_counters,
)
from models.simulator.topology import Topology, rng_for

STREAM_LINKS = 500
IB_ACTIVE = 4.0
IB_LINK_UP, IB_POLLING = 5.0, 2.0  # physical states
_DATA_INIT_MAX = 1e12  # design choice: words a port carried before the trace began


def _cols(scope: Scope) -> tuple[dict[str, int], list[int]]:
    cols = CATALOG.columns(scope)
    return ({m.name: i for i, m in enumerate(cols)},
            [i for i, m in enumerate(cols) if m.kind is Kind.COUNTER])


class NvlinkRenderer:
    COL, COUNTERS = _cols(Scope.NVLINK)

    def __init__(self, cfg: SimConfig, topo: Topology, sp: ScopePlan) -> None:
        self.cfg, self.topo, self.sp = cfg, topo, sp
        e = topo.size(Scope.NVLINK)
        self.state = {j: np.zeros(e) for j in self.COUNTERS}

    def render(self, buf: F64, win: Window, rng: np.random.Generator) -> None:
        e = self.topo.size(Scope.NVLINK)
        buf3 = buf.reshape(len(CATALOG.columns(Scope.NVLINK)), len(win.times), e)
        stepped_counters(buf3, self.sp, self.COUNTERS, self.state, win)
        st = buf3[self.COL["nvlink_state"]]
        st[:] = 1.0
        apply_intervals(st, self.sp.intervals.get("nvlink_state"), win)
        fleet_limits(buf3, self.cfg.fleet, self.COL, self.COUNTERS)
        row_nan(buf3, self.sp.intervals.get(ROW), win)
        b = self.cfg.benign
        drop_random(buf3, b.missing_sample_frac if b.enabled else 0.0, rng)


class IbRenderer:
    COL, COUNTERS = _cols(Scope.IB_PORT)

    def __init__(self, cfg: SimConfig, topo: Topology, sp: ScopePlan, jobs: Jobs) -> None:
        self.cfg, self.topo, self.sp, self.jobs = cfg, topo, sp, jobs
        e = topo.size(Scope.IB_PORT)
        rng = rng_for(cfg.seed, STREAM_LINKS)
        self.node_of = np.arange(e) // topo.ports_per_node
        words = cfg.fleet.spec.ib_rate_gbps * 1e9 / 32.0 * cfg.workload.ib_traffic_share
        self.rate = {c: words * rng.uniform(0.95, 1.05, e)
                     for c in ("ib_port_rcv_data", "ib_port_xmit_data")}
        self.base = {c: np.floor(rng.uniform(0, _DATA_INIT_MAX, e)) for c in self.rate}
        self.ref = np.zeros(e)  # node load integral at the port's last reset
        self.data_cols = [self.COL[c] for c in self.rate]
        self.stepped = [j for j in self.COUNTERS if j not in self.data_cols]
        self.state = {j: np.zeros(e) for j in self.stepped}

    def render(self, buf: F64, win: Window, node_int: F64, active: npt.NDArray[np.int64],
               rng: np.random.Generator) -> None:
        """node_int: [T + 1, nodes] load integral at the window edges."""
        e = self.topo.size(Scope.IB_PORT)
        buf3 = buf.reshape(len(CATALOG.columns(Scope.IB_PORT)), len(win.times), e)
        stepped_counters(buf3, self.sp, self.stepped, self.state, win)
        segment_counters(buf3, self.sp.segments, self.COL, self.cfg.seed, win)
        self._data(buf3, win, node_int, active)
        st = buf3[self.COL["ib_state"]]
        st[:] = IB_ACTIVE
        apply_intervals(st, self.sp.intervals.get("ib_state"), win)
        # LinkUp while active; a port that went down is Polling for its peer, as a bad cable
        # or a dead far end leaves it.
        buf3[self.COL["ib_phys_state"]] = np.where(st == IB_ACTIVE, IB_LINK_UP, IB_POLLING)
        buf3[self.COL["ib_rate"]] = self.cfg.fleet.spec.ib_rate_gbps
        apply_intervals(buf3[self.COL["ib_rate"]], self.sp.intervals.get("ib_rate"), win)
        # The HCA's PCIe link (catalog, issue 31): x16 of x16 unless an interval narrows it.
        buf3[self.COL["nic_pcie_link_width"]] = buf3[self.COL["nic_pcie_link_width_max"]] = 16.0
        apply_intervals(buf3[self.COL["nic_pcie_link_width"]],
                        self.sp.intervals.get("nic_pcie_link_width"), win)
        # Not rendered: what kind of port it is and its RoCE GID count (issue 31).
        for name in ("ib_link_layer", "ib_hca_model", "ib_gid_roce_v2"):
            buf3[self.COL[name]] = np.nan
        fleet_limits(buf3, self.cfg.fleet, self.COL, self.stepped)
        row_nan(buf3, self.sp.intervals.get(ROW), win)
        b = self.cfg.benign
        drop_random(buf3, b.missing_sample_frac if b.enabled else 0.0, rng)

    def _data(self, buf3: F64, win: Window, node_int: F64, active: npt.NDArray[np.int64]) -> None:
        ports = node_int[1:, self.node_of]  # [T, E]
        lo = int(np.searchsorted(self.sp.reset_t, win.prev, "right"))
        hi = int(np.searchsorted(self.sp.reset_t, win.t_last, "right"))
        resets = list(zip(self.sp.reset_t[lo:hi], self.sp.reset_e[lo:hi], strict=True))
        for c, j in zip(self.rate, self.data_cols, strict=True):
            np.subtract(ports, self.ref, out=buf3[j])
            buf3[j] *= self.rate[c]
            buf3[j] += self.base[c]
        for t_r, port in resets:
            k = int(np.searchsorted(win.times, t_r, "left"))
            ref = self._integral_at(float(t_r), int(self.node_of[port]), k, win, node_int, active)
            self.ref[port] = ref
            for c, j in zip(self.rate, self.data_cols, strict=True):
                self.base[c][port] = 0.0
                buf3[j][k:, port] = (ports[k:, port] - ref) * self.rate[c][port]
        for j in self.data_cols:
            np.floor(buf3[j], out=buf3[j])

    def _integral_at(self, t: float, node: int, k: int, win: Window, node_int: F64,
                     active: npt.NDArray[np.int64]) -> float:
        """Node load integral at an arbitrary time inside window k (edges[k], t]."""
        a = float(win.edges[k])
        out = float(node_int[k, node])
        for j in active:
            if node in self.jobs.nodes[j]:
                v = self.jobs.integral(int(j), np.array([a, t]))
                out += float(v[1] - v[0])
        return out
