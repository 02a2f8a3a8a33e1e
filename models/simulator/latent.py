"""Latent faults: the active-only modes M14-M16 (docs/simulator.md, "Active-only modes").

A latent fault appears at a time uniform over the trace on a node (M14) or one of its GPUs
(M15, M16) and changes no sample: no metric, no Xid, no label. It stays latent until a job has
run on the node for the fault's show time (drawn per fault from its mode's law), when that job
fails on it, unless a diagnostic finds it first (diagnostics.py). Counts are Poisson(rate x
GPU-years) with the failure modes' rate multiplier; each mode draws from a stream of its own,
so they move no failure, trap or sample of the trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collectors.catalog import Scope
from collectors.frames import Entity
from models.simulator.config import SECONDS_PER_YEAR, SimConfig
from models.simulator.modes import ACTIVE_ONLY, MODE_SCOPE, Mode
from models.simulator.topology import Topology, rng_for

STREAM_LATENT = 170  # + index in ACTIVE_ONLY


@dataclass(frozen=True, slots=True)
class LatentFault:
    index: int  # position in the time-sorted list: keys its diagnostics' draws
    mode: Mode
    appear: float  # epoch s
    node: int
    unit: int  # GPU index in node (M15, M16); 0 for M14
    show_load_s: float  # seconds of job load on the node until a job fails on it
    repair_s: float  # from the diagnosis to the node's return (the failures' repair law)

    def entity(self, topo: Topology) -> str:
        name = topo.node_names[self.node]
        if MODE_SCOPE[self.mode] is Scope.NODE:
            return name
        return Entity.gpu(name, self.unit).key


def sample_latent(cfg: SimConfig) -> list[LatentFault]:
    f = cfg.failures
    rates = f.effective_rates(cfg.fleet.spec)
    start, end = float(cfg.time.start_s), cfg.time.end_s
    years = cfg.fleet.gpus * (end - start) / SECONDS_PER_YEAR
    rep = f.shapes.repair
    drawn: list[tuple[float, int, int, int, float, float]] = []
    for i, mode in enumerate(ACTIVE_ONLY):
        rng = rng_for(cfg.seed, STREAM_LATENT + i)
        n = int(rng.poisson(rates[mode] * years))
        times = np.round(rng.uniform(start, end, n))
        nodes = rng.integers(0, cfg.fleet.nodes, n)
        per = 1 if MODE_SCOPE[mode] is Scope.NODE else cfg.fleet.gpus_per_node
        units = rng.integers(0, per, n)
        show = rng.exponential(cfg.active.of(mode).show_load_h * 3600.0, n)
        repair = rep.median_h * 3600.0 * np.exp(rep.sigma * rng.standard_normal(n))
        drawn += [(float(times[k]), i, int(nodes[k]), int(units[k]), float(show[k]),
                   float(repair[k])) for k in range(n)]
    drawn.sort()
    return [LatentFault(k, ACTIVE_ONLY[i], t, node, unit, show, repair)
            for k, (t, i, node, unit, show, repair) in enumerate(drawn)]
