"""Failure planning: when, where and whether with a precursor (docs/simulator.md, `failures`).

Counts per mode are Poisson(rate x GPU-years); times are uniform over the trace. Devices are
drawn uniformly except that lemon nodes weigh 3-5x for M1-M3 (docs/simulator.md, `benign`), so
the fleet-wide rate stays the configured one. A failure may not land on a node that is down for
another failure; such a draw is moved to another device (time, precursor and lead are kept, so
their laws stay exact).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.simulator.config import SECONDS_PER_YEAR, ScriptedFailure, SimConfig
from models.simulator.config_shapes import Growth
from models.simulator.modes import ACTIVE_ONLY, LEMON_MODES, MODE_SCOPE, NODE_WIDE, Mode
from models.simulator.topology import Topology, rng_for

F64 = npt.NDArray[np.float64]
STREAM_LEMON = 100
STREAM_MODE = 110  # + mode index
STREAM_MOVE = 130
_MAX_MOVES = 50


@dataclass(slots=True)
class Failure:
    mode: Mode
    time: float  # terminal event, epoch s
    node: int
    unit: int  # GPU index in node, IB port (M4, M11), supply (M8) or fan (M9)
    link: int  # NVLink index for M3
    onset: float | None  # precursor onset, None when the event is sudden
    repair: float  # when the device is back
    growth: Growth = "native"  # how the precursor grows (failures.shapes.growth)

    def entity(self, topo: Topology) -> int:
        scope = MODE_SCOPE[self.mode]
        if scope is Scope.NODE:
            return self.node
        if scope is Scope.IB_PORT:
            return topo.ib_port(self.node, self.unit)
        if scope is Scope.PSU:
            return topo.psu(self.node, self.unit)
        if scope is Scope.FAN:
            return topo.fan(self.node, self.unit)
        gpu = topo.gpu(self.node, self.unit)
        return topo.nvlink(gpu, self.link) if scope is Scope.NVLINK else gpu


def lemon_nodes(cfg: SimConfig) -> dict[int, float]:
    """Lemon node index -> its M1-M3 rate multiplier."""
    b = cfg.benign
    if not b.enabled or b.lemon_node_frac <= 0:
        return {}
    rng = rng_for(cfg.seed, STREAM_LEMON)
    pick = np.flatnonzero(rng.random(cfg.fleet.nodes) < b.lemon_node_frac)
    mult = rng.uniform(b.lemon_multiplier_min, b.lemon_multiplier_max, len(pick))
    return {int(n): float(m) for n, m in zip(pick, mult, strict=True)}


def sample_failures(cfg: SimConfig, topo: Topology) -> list[Failure]:
    """M1-M7, then the node-wide modes placed around them with a move stream of their own (so
    the node-wide modes move none of the GPU modes' failures). The active-only modes are latent
    faults, not failures of the trace (latent.py)."""
    lemons = lemon_nodes(cfg)
    weights = np.ones(topo.nodes)
    for n, m in lemons.items():
        weights[n] = m
    busy: dict[int, list[Failure]] = {}
    gpu_modes = [m for m in Mode if m not in NODE_WIDE and m not in ACTIVE_ONLY]
    gpu = _place(_draw(gpu_modes, cfg, topo, weights), cfg, topo, weights, STREAM_MOVE, busy)
    wide = _place(_draw(list(NODE_WIDE), cfg, topo, weights), cfg, topo, weights,
                  STREAM_MOVE + 1, busy)
    order = {m: i for i, m in enumerate(Mode)}
    return sorted(gpu + wide, key=lambda f: (f.time, order[f.mode]))


def _draw(modes: list[Mode], cfg: SimConfig, topo: Topology, weights: F64) -> list[Failure]:
    f = cfg.failures
    rates = f.effective_rates(cfg.fleet.spec)
    start, end = float(cfg.time.start_s), cfg.time.end_s
    years = cfg.fleet.gpus * (end - start) / SECONDS_PER_YEAR
    drawn: list[tuple[float, int, Failure]] = []
    for mode in modes:
        i = list(Mode).index(mode)
        rng = rng_for(cfg.seed, STREAM_MODE + i)
        n = int(rng.poisson(rates[mode] * years))
        times = rng.uniform(start, end, n)
        has = rng.random(n) < f.precursor_fraction.of(mode)
        lead_s = f.lead_time.of(mode).sample_h(rng, n) * 3600.0
        rep = f.shapes.repair
        repair_s = rep.median_h * 3600.0 * np.exp(rep.sigma * rng.standard_normal(n))
        if mode is Mode.M7_UNOBSERVABLE:
            repair_s = rng.uniform(rep.restart_min_s, rep.restart_max_s, n)
        p = weights if mode in LEMON_MODES else np.ones(topo.nodes)
        nodes = rng.choice(topo.nodes, n, p=p / p.sum())
        units, links = _units(rng, mode, topo, n)
        for k in range(n):
            t = float(np.round(times[k]))
            fail = Failure(mode, t, int(nodes[k]), int(units[k]), int(links[k]),
                           float(np.round(t - lead_s[k])) if has[k] else None,
                           float(np.round(t + repair_s[k])))
            drawn.append((t, i, fail))
    drawn.sort(key=lambda x: (x[0], x[1]))
    return [d[2] for d in drawn]


def _units(rng: np.random.Generator, mode: Mode, topo: Topology,
           n: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    per = {Mode.M4_IB_LINK: topo.ports_per_node, Mode.M11_NIC_SPEED: topo.ports_per_node,
           Mode.M8_PSU: topo.psus_per_node, Mode.M9_FAN: topo.fans_per_node,
           Mode.M13_HOST_HW: 1}.get(mode, topo.gpus_per_node)
    return rng.integers(0, per, n), rng.integers(0, topo.links_per_gpu, n)


def _place(fails: list[Failure], cfg: SimConfig, topo: Topology, weights: F64, stream: int,
           busy: dict[int, list[Failure]]) -> list[Failure]:
    """Keep each failure off nodes that are down for an earlier one (in `busy`, which it
    extends), and keep one device from having two overlapping failures."""
    rng = rng_for(cfg.seed, stream)
    out: list[Failure] = []
    for fail in fails:
        for _ in range(_MAX_MOVES):
            if not any(_clash(fail, o, topo) for o in busy.get(fail.node, ())):
                break
            p = weights if fail.mode in LEMON_MODES else np.ones(topo.nodes)
            fail.node = int(rng.choice(topo.nodes, p=p / p.sum()))
            u, k = _units(rng, fail.mode, topo, 1)
            fail.unit, fail.link = int(u[0]), int(k[0])
        else:
            continue  # a fleet too small to hold it; dropped
        busy.setdefault(fail.node, []).append(fail)
        out.append(fail)
    return out


def _clash(a: Failure, b: Failure, topo: Topology) -> bool:
    if b.time <= a.time < b.repair or a.time <= b.time < a.repair:
        return True
    same = MODE_SCOPE[a.mode] is MODE_SCOPE[b.mode] and a.entity(topo) == b.entity(topo)
    a0 = a.time if a.onset is None else a.onset
    b0 = b.time if b.onset is None else b.onset
    return same and a0 < b.repair and b0 < a.repair


def scripted_failure(cfg: SimConfig, s: ScriptedFailure) -> Failure:
    t = float(cfg.time.start_s + round(s.at_h * 3600.0))
    onset = None if s.lead_h is None else float(t - round(s.lead_h * 3600.0))
    return Failure(s.mode, t, s.node, s.unit, s.link, onset, t + round(s.repair_h * 3600.0))
