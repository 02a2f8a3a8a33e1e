"""Shared helpers for planners: labels, resets and the random shapes several modes use."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.simulator.config import SimConfig
from models.simulator.config_shapes import Growth
from models.simulator.hardware import GenerationSpec
from models.simulator.plan import ROW, Op, PlanBuilder
from models.simulator.topology import Topology

F64 = npt.NDArray[np.float64]
REBOOT_GAP_S = 180.0  # design choice: a rebooting node reports nothing for 3 min
_CLUSTER_S = 600.0  # design choice: mean spread of a "burst" growth cluster (10 min)


@dataclass
class Ctx:
    cfg: SimConfig
    topo: Topology
    b: PlanBuilder

    @property
    def spec(self) -> GenerationSpec:
        return self.cfg.fleet.spec

    @property
    def start(self) -> float:
        return float(self.cfg.time.start_s)

    @property
    def end(self) -> float:
        return self.cfg.time.end_s

    # ---- labels -------------------------------------------------------------------------

    def failure_label(self, t: float, scope: Scope, ent: int, mode: str,
                      onset: float | None) -> None:
        node = self.topo.node_names[ent if scope is Scope.NODE else self.topo.node_of(scope, ent)]
        label: dict[str, object] = {
            "kind": "failure", "time": t, "node": node, "entity": self.topo.key(scope, ent),
            "scope": scope.value, "mode": mode, "precursor_onset": onset,
        }
        if scope is Scope.NVLINK:  # the far end shows mirror counts and logs the Xid too
            peer = self.topo.peer_link(*divmod(ent, self.topo.links_per_gpu))
            if peer is not None:
                label["peer"] = self.topo.key(Scope.NVLINK, self.topo.nvlink(*peer))
        self.b.labels.append(label)

    def benign_label(self, trap: str, scope: Scope, ent: int, start: float, end: float) -> None:
        node = self.topo.node_names[ent if scope is Scope.NODE else self.topo.node_of(scope, ent)]
        self.b.labels.append({
            "kind": "benign", "trap": str(trap), "node": node, "entity": self.topo.key(scope, ent),
            "scope": scope.value, "start": start, "end": end,
        })

    def repair_label(self, t: float, scope: Scope, ent: int, action: str, mode: str) -> None:
        """Where a device came back and which counters were reset (kind "repair")."""
        node = self.topo.node_names[ent if scope is Scope.NODE else self.topo.node_of(scope, ent)]
        self.b.labels.append({
            "kind": "repair", "time": t, "node": node, "entity": self.topo.key(scope, ent),
            "scope": scope.value, "action": action, "mode": mode,
        })

    # ---- resets -------------------------------------------------------------------------

    def gpu_reset(self, t: float, gpu: int, *, replace: bool = False) -> float:
        """GPU reset (volatile ECC, PCIe and its NVLink counters) or replacement (all)."""
        t = self.b.reset(t, Scope.GPU, (gpu, gpu + 1), persistent=replace)
        self.b.reset(t, Scope.NVLINK, self.topo.gpu_links(gpu), persistent=replace)
        return t

    def node_reboot(self, t: float, node: int, *, ib: bool = True) -> float:
        """Reboot or driver reload: every volatile counter of the node goes to 0."""
        t = self.b.reset(t, Scope.GPU, self.topo.node_slice(Scope.GPU, node))
        self.b.reset(t, Scope.NVLINK, self.topo.node_slice(Scope.NVLINK, node))
        if ib:
            self.b.reset(t, Scope.IB_PORT, self.topo.node_slice(Scope.IB_PORT, node))
            self.b.reset(t, Scope.NODE, (node, node + 1))  # EDAC and machine-check counts
        return t

    def node_missing(self, node: int, t0: float, t1: float) -> None:
        for scope in (Scope.GPU, Scope.NVLINK, Scope.IB_PORT):
            self.b.interval(scope, ROW, self.topo.node_slice(scope, node), t0, t1, Op.NAN, 0.0)

    def gpu_missing(self, gpu: int, t0: float, t1: float) -> None:
        self.b.interval(Scope.GPU, ROW, (gpu, gpu + 1), t0, t1, Op.NAN, 0.0)
        self.b.interval(Scope.NVLINK, ROW, self.topo.gpu_links(gpu), t0, t1, Op.NAN, 0.0)

    # ---- random shapes ------------------------------------------------------------------

    def burst_sizes(self, rng: np.random.Generator, n: int, median: float | None = None,
                    sigma: float | None = None) -> F64:
        bs = self.cfg.failures.shapes.bursts
        med = bs.median if median is None else median
        sig = bs.sigma if sigma is None else sigma
        return np.clip(np.round(med * np.exp(sig * rng.standard_normal(n))), 1.0, bs.max)


def growing_times(rng: np.random.Generator, onset: float, end: float, mean_n: float,
                  doublings: float) -> F64:
    """Burst times: one at onset (the first visible sign), the rest a Poisson process whose
    rate doubles `doublings` times between onset and end (rate rises toward the event;
    design choice, docs/simulator.md)."""
    span = end - onset
    n = int(rng.poisson(max(mean_n - 1.0, 0.0)))
    u = rng.random(n)
    k = doublings * math.log(2.0) / span if span > 0 else 0.0
    x = np.log1p(u * math.expm1(k * span)) / k if k > 0 else u * span
    return np.sort(np.concatenate(([onset], onset + np.minimum(x, span * (1 - 1e-9)))))


def precursor_times(rng: np.random.Generator, onset: float, end: float, mean_n: float,
                    doublings: float, growth: Growth) -> F64:
    """Burst times of a counter precursor, one at onset and the rest shaped by `growth`
    (docs/simulator.md, "Growth shapes"): "native" and "exponential" are `growing_times`;
    "linear" a rate rising linearly from 0; "step" a constant rate from onset on; "burst" a
    few tight clusters (minutes wide) at random points of the lead."""
    if growth in ("native", "exponential"):
        return growing_times(rng, onset, end, mean_n, doublings)
    span = end - onset
    n = int(rng.poisson(max(mean_n - 1.0, 0.0)))
    u = rng.random(n)
    if growth == "linear":  # density proportional to the time since onset
        x = span * np.sqrt(u)
    elif growth == "step":
        x = span * u
    else:  # burst: 1 + Poisson(1) cluster centres, the first at onset
        centres = np.concatenate(([0.0], span * rng.random(int(rng.poisson(1.0)))))
        x = centres[rng.integers(0, len(centres), n)] + rng.exponential(_CLUSTER_S, n)
    return np.sort(np.concatenate(([onset], onset + np.minimum(x, span * (1 - 1e-9)))))


def poisson_times(rng: np.random.Generator, rate_per_s: float, t0: float, t1: float) -> F64:
    n = int(rng.poisson(max(rate_per_s, 0.0) * max(t1 - t0, 0.0)))
    return np.sort(rng.uniform(t0, t1, n))
