"""Benign-trap planning: how many of each trap, where and when (docs/simulator.md, `benign`).

Each trap kind draws from its own random stream, so changing one rate never moves another
trap. Scripted traps (demo scenarios) go through the same placing functions.
"""

from __future__ import annotations

import numpy as np

from collectors.catalog import Scope
from models.simulator import benign_chassis as chassis
from models.simulator import benign_devices as dev
from models.simulator import benign_nodes as nodes
from models.simulator.config import SECONDS_PER_YEAR, ScriptedBenign, Trap
from models.simulator.context import Ctx
from models.simulator.failures import lemon_nodes
from models.simulator.topology import rng_for

STREAM_BENIGN = 200  # + index of the trap kind in Trap
_DAY = 86400.0


def _rng(ctx: Ctx, trap: Trap) -> np.random.Generator:
    return rng_for(ctx.cfg.seed, STREAM_BENIGN + list(Trap).index(trap))


def _draw(rng: np.random.Generator, rate_per_unit_s: float, units: int, t0: float,
          t1: float) -> tuple[np.ndarray, np.ndarray]:
    """Poisson events over units x [t0, t1): (unit, time) sorted by time."""
    n = int(rng.poisson(max(rate_per_unit_s, 0.0) * units * max(t1 - t0, 0.0)))
    times = np.round(rng.uniform(t0, t1, n))
    who = rng.integers(0, max(units, 1), n)
    order = np.argsort(times, kind="stable")
    return who[order], times[order]


def _lognormal_s(rng: np.random.Generator, median_s: float, sigma: float, n: int, lo: float,
                 hi: float) -> np.ndarray:
    return np.clip(median_s * np.exp(sigma * rng.standard_normal(n)), lo, hi)


def plan_benign(ctx: Ctx) -> None:
    b = ctx.cfg.benign
    if not b.enabled:
        return
    topo, t0, t1 = ctx.topo, ctx.start, ctx.end
    gpus, n_nodes, yr = topo.gpus, topo.nodes, SECONDS_PER_YEAR

    rng = _rng(ctx, Trap.SBE_CARRIER)
    lookback = b.carrier_days_max * _DAY
    for g, t in zip(*_draw(rng, b.sbe_carrier_per_gpu_year / yr, gpus, t0 - lookback, t1),
                    strict=True):
        days = rng.uniform(b.carrier_days_min, b.carrier_days_max)
        per_day = b.carrier_bursts_per_day_median * np.exp(b.carrier_bursts_sigma
                                                           * rng.standard_normal())
        dev.sbe_carrier(ctx, rng, int(g), float(t), float(t + days * _DAY), float(per_day))
    for g in np.flatnonzero(rng.random(gpus) < b.history_sbe_frac):
        dev.history(ctx, rng, int(g))

    rng = _rng(ctx, Trap.BENIGN_REMAP)
    for g, t in zip(*_draw(rng, b.benign_remap_per_gpu_year / yr, gpus, t0, t1), strict=True):
        wait = _lognormal_s(rng, b.benign_remap_reset_median_h * 3600, 0.5, 1, 600, 7 * _DAY)
        dev.benign_remap(ctx, int(g), float(t), float(t + wait[0]))

    rng = _rng(ctx, Trap.NVLINK_BLIP)
    rate = b.nvlink_blip_per_gpu_year * ctx.spec.nvlink_blip_scale / yr
    for g, t in zip(*_draw(rng, rate, gpus, t0, t1), strict=True):
        link = topo.nvlink(int(g), int(rng.integers(0, topo.links_per_gpu)))
        dev.nvlink_blip(ctx, rng, link, float(t))

    rng = _rng(ctx, Trap.IB_CORRUPTION)
    for p in np.flatnonzero(rng.random(topo.size(Scope.IB_PORT)) < b.ib_corrupt_port_frac):
        dev.ib_corruption(ctx, rng, int(p), t0, t1)

    rng = _rng(ctx, Trap.SOFTWARE_XID)
    for g, t in zip(*_draw(rng, b.software_xid_per_gpu_year / yr, gpus, t0, t1), strict=True):
        dev.software_xid(ctx, rng, int(g), float(t))

    rng = _rng(ctx, Trap.STRAGGLER_COMPUTE)
    who, times = _draw(rng, b.straggler_compute_per_gpu_day / _DAY, gpus, t0, t1)
    durs = _lognormal_s(rng, b.straggler_compute_median_s, b.straggler_sigma, len(times),
                        b.straggler_min_s, b.straggler_max_s)
    for g, t, d in zip(who, times, durs, strict=True):
        dev.straggler_compute(ctx, rng, int(g), float(t), float(np.round(t + d)))

    rng = _rng(ctx, Trap.STRAGGLER_COMM)
    who, times = _draw(rng, b.straggler_comm_per_node_day / _DAY, n_nodes, t0, t1)
    durs = _lognormal_s(rng, b.straggler_comm_median_s, b.straggler_sigma, len(times),
                        b.straggler_min_s, b.straggler_max_s)
    for n, t, d in zip(who, times, durs, strict=True):
        nodes.straggler_comm(ctx, rng, int(n), float(t), float(np.round(t + d)))

    rng = _rng(ctx, Trap.DRIVER_RELOAD)
    for n, t in zip(*_draw(rng, b.driver_reload_per_node_year / yr, n_nodes, t0, t1), strict=True):
        dur = float(np.round(rng.uniform(b.driver_reload_min_s, b.driver_reload_max_s)))
        nodes.driver_reload(ctx, int(n), float(t), dur)

    rng = _rng(ctx, Trap.PLANNED_MAINTENANCE)
    rate = b.planned_maint_per_16k_gpu_day * topo.gpus_per_node / 16384 / _DAY
    for n, t in zip(*_draw(rng, rate, n_nodes, t0, t1), strict=True):
        dur = float(np.round(rng.uniform(b.maint_min_s, b.maint_max_s)))
        nodes.planned_maintenance(ctx, int(n), float(t), dur)

    rng = _rng(ctx, Trap.TELEMETRY_GAP)
    for n, t in zip(*_draw(rng, b.gap_per_node_day / _DAY, n_nodes, t0, t1), strict=True):
        nodes.telemetry_gap(ctx, int(n), float(t),
                            float(np.round(rng.uniform(b.gap_min_s, b.gap_max_s))))

    rng = _rng(ctx, Trap.CLOCK_SKEW)
    for n, t in zip(*_draw(rng, b.clock_skew_per_node_day / _DAY, n_nodes, t0, t1), strict=True):
        dur = _lognormal_s(rng, b.clock_skew_median_h * 3600, 1.0, 1, 600, 7 * _DAY)[0]
        sign = 1.0 if rng.random() < 0.5 else -1.0
        nodes.clock_skew(ctx, int(n), float(t), float(np.round(dur)), sign * b.clock_skew_s)

    for n in sorted(lemon_nodes(ctx.cfg)):
        nodes.lemon(ctx, n)
    _chassis(ctx)


def _chassis(ctx: Ctx) -> None:
    """The node-wide look-alikes (benign_chassis.py), each kind on its own stream."""
    c, topo, t0, t1 = ctx.cfg.chassis, ctx.topo, ctx.start, ctx.end
    rng = _rng(ctx, Trap.PSU_STANDBY)
    if topo.psus_per_node > 1:
        for n, t in zip(*_draw(rng, c.psu_standby_per_node_year / SECONDS_PER_YEAR, topo.nodes,
                               t0, t1), strict=True):
            days = rng.uniform(c.psu_standby_min_days, c.psu_standby_max_days)
            chassis.psu_standby(ctx, topo.psu(int(n), topo.psus_per_node - 1), float(t),
                                float(np.round(t + days * _DAY)))
    rng = _rng(ctx, Trap.FAN_PROFILE)
    for n, t in zip(*_draw(rng, c.fan_profile_per_node_day / _DAY, topo.nodes, t0, t1),
                    strict=True):
        dur = float(np.round(rng.uniform(c.fan_profile_min_h, c.fan_profile_max_h) * 3600))
        chassis.fan_profile(ctx, rng, int(n), float(t), float(t) + dur)
    rng = _rng(ctx, Trap.PCIE_IDLE_NARROW)
    for g, t in zip(*_draw(rng, c.pcie_idle_narrow_per_gpu_year / SECONDS_PER_YEAR, topo.gpus,
                           t0, t1), strict=True):
        days = rng.uniform(c.pcie_idle_narrow_min_days, c.pcie_idle_narrow_max_days)
        chassis.pcie_idle_narrow(ctx, int(g), float(t), float(np.round(t + days * _DAY)))
    rng = _rng(ctx, Trap.IB_RENEGOTIATE)
    rate = c.ib_renegotiate_per_port_year / SECONDS_PER_YEAR
    for p, t in zip(*_draw(rng, rate, topo.size(Scope.IB_PORT), t0, t1), strict=True):
        dur = float(np.round(rng.uniform(c.ib_renegotiate_min_s, c.ib_renegotiate_max_s)))
        chassis.ib_renegotiate(ctx, int(p), float(t), dur)


def place_scripted(ctx: Ctx, s: ScriptedBenign, index: int) -> None:
    """A hand-placed trap; its random details come from a stream keyed by its position."""
    rng = rng_for(ctx.cfg.seed, STREAM_BENIGN + 50, index)
    topo = ctx.topo
    t = float(ctx.start + round(s.start_h * 3600))
    z = float(t + round(s.duration_h * 3600))
    gpu = topo.gpu(s.node, min(s.unit, topo.gpus_per_node - 1))
    match s.trap:
        case Trap.SBE_CARRIER:
            # A demo carrier is chatty enough to be seen within hours: design choice.
            dev.sbe_carrier(ctx, rng, gpu, t, z, 24.0)
        case Trap.BENIGN_REMAP:
            dev.benign_remap(ctx, gpu, t, z)
        case Trap.NVLINK_BLIP:
            dev.nvlink_blip(ctx, rng, topo.nvlink(gpu, s.link), t)
        case Trap.IB_CORRUPTION:
            dev.ib_corruption(ctx, rng, topo.ib_port(s.node, s.unit), t, z)
        case Trap.SOFTWARE_XID:
            dev.software_xid(ctx, rng, gpu, t)
        case Trap.STRAGGLER_COMPUTE:
            dev.straggler_compute(ctx, rng, gpu, t, z)
        case Trap.STRAGGLER_COMM:
            nodes.straggler_comm(ctx, rng, s.node, t, z)
        case Trap.DRIVER_RELOAD:
            nodes.driver_reload(ctx, s.node, t, z - t)
        case Trap.PLANNED_MAINTENANCE:
            nodes.planned_maintenance(ctx, s.node, t, z - t)
        case Trap.TELEMETRY_GAP:
            nodes.telemetry_gap(ctx, s.node, t, z - t)
        case Trap.CLOCK_SKEW:
            nodes.clock_skew(ctx, s.node, t, z - t, ctx.cfg.benign.clock_skew_s)
        case Trap.LEMON_NODE:
            nodes.lemon(ctx, s.node)
        case Trap.PSU_STANDBY:
            chassis.psu_standby(ctx, topo.psu(s.node, min(s.unit, topo.psus_per_node - 1)), t, z)
        case Trap.FAN_PROFILE:
            chassis.fan_profile(ctx, rng, s.node, t, z)
        case Trap.PCIE_IDLE_NARROW:
            chassis.pcie_idle_narrow(ctx, gpu, t, z)
        case Trap.IB_RENEGOTIATE:
            chassis.ib_renegotiate(ctx, topo.ib_port(s.node, min(s.unit, topo.ports_per_node - 1)),
                                   t, z - t)
