"""Benign traps on whole nodes (docs/simulator.md, `benign`): resets, maintenance, telemetry faults,
communication stragglers and lemon nodes."""

from __future__ import annotations

import numpy as np

from collectors.catalog import Scope
from models.simulator.config import Trap
from models.simulator.context import REBOOT_GAP_S, Ctx
from models.simulator.plan import LOAD, ROW, Op

_N = Scope.NODE


def driver_reload(ctx: Ctx, node: int, t: float, dur: float) -> None:
    """Volatile GPU and NVLink counters drop to 0; aggregate and remapped totals persist."""
    ctx.b.node_down(node, t, t + dur)
    reset = ctx.node_reboot(t + dur / 2, node, ib=False)
    for scope in (Scope.GPU, Scope.NVLINK):  # nvidia-smi has nothing while the driver loads
        ctx.b.interval(scope, ROW, ctx.topo.node_slice(scope, node), reset, reset + 30.0,
                       Op.NAN, 0.0)
    ctx.benign_label(Trap.DRIVER_RELOAD, _N, node, t, t + dur)


def planned_maintenance(ctx: Ctx, node: int, t: float, dur: float) -> None:
    """Drain, firmware/kernel update and reboot (Llama 3: at least one a day per 16k GPUs)."""
    ctx.b.node_down(node, t, t + dur)
    reset = ctx.node_reboot(t + dur / 3, node)
    ctx.node_missing(node, reset, reset + REBOOT_GAP_S)
    ctx.benign_label(Trap.PLANNED_MAINTENANCE, _N, node, t, t + dur)


def telemetry_gap(ctx: Ctx, node: int, t: float, dur: float) -> None:
    ctx.node_missing(node, t, t + dur)
    ctx.benign_label(Trap.TELEMETRY_GAP, _N, node, t, t + dur)


def clock_skew(ctx: Ctx, node: int, t: float, dur: float, offset: float) -> None:
    """The node's clock runs a sample ahead or behind: its timestamps shift (design
    choice, docs/simulator.md)."""
    ctx.b.skews.append((node, t, t + dur, offset))
    ctx.benign_label(Trap.CLOCK_SKEW, _N, node, t, t + dur)


def straggler_comm(ctx: Ctx, rng: np.random.Generator, node: int, t0: float, t1: float) -> None:
    """A node whose GPUs all wait on the network for a while (GREYHOUND, Wu et al.,
    ATC 2025)."""
    b = ctx.cfg.benign
    scale = rng.uniform(b.straggler_scale_min, b.straggler_scale_max)
    ctx.b.interval(Scope.GPU, LOAD, ctx.topo.node_slice(Scope.GPU, node), t0, t1, Op.SCALE, scale)
    ctx.benign_label(Trap.STRAGGLER_COMM, _N, node, t0, t1)


def lemon(ctx: Ctx, node: int) -> None:
    ctx.benign_label(Trap.LEMON_NODE, _N, node, ctx.start, ctx.end)
