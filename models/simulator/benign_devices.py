"""Benign traps on single devices (docs/simulator.md, `benign`): signals that look like
precursors but are followed by no failure. Each function places one trap and its label."""

from __future__ import annotations

import numpy as np

from collectors.catalog import Scope
from models.simulator.config import Trap
from models.simulator.context import Ctx, poisson_times
from models.simulator.plan import LOAD, Op

_G = Scope.GPU
# Xids that user code provokes (Delta, Cui et al., SC'25, excluded 13 and 43 as software):
# design-choice mix.
SOFTWARE_XIDS = (13, 31, 43)
SOFTWARE_XID_WEIGHTS = (0.5, 0.3, 0.2)
HISTORY_SBE_MEDIAN = 200.0  # design choice: lifetime SBEs of GPUs that had some before the trace


def sbe_carrier(ctx: Ctx, rng: np.random.Generator, gpu: int, t0: float, t1: float,
                per_day: float) -> None:
    """Background SBE bursts that never lead to a failure (Zhu, Titan)."""
    a, z = max(t0, ctx.start), min(t1, ctx.end)
    if z <= a:
        return
    times = poisson_times(rng, per_day / 86400.0, a, z)
    for t, n in zip(times, ctx.burst_sizes(rng, len(times)), strict=True):
        t = float(np.round(t))
        ctx.b.step(t, _G, gpu, "ecc_sbe_volatile", float(n))
        ctx.b.step(t, _G, gpu, "ecc_sbe_aggregate", float(n))
    ctx.benign_label(Trap.SBE_CARRIER, _G, gpu, a, z)


def history(ctx: Ctx, rng: np.random.Generator, gpu: int) -> None:
    """Lifetime SBEs from before the trace: aggregate > 0 with a volatile count of 0."""
    n = float(np.round(HISTORY_SBE_MEDIAN * np.exp(1.5 * rng.standard_normal())))
    ctx.b.step(ctx.start - 1.0, _G, gpu, "ecc_sbe_aggregate", max(n, 1.0))


def benign_remap(ctx: Ctx, gpu: int, t: float, reset_at: float) -> None:
    """One correctable-cause remap, pending until an operator resets the GPU (NVML
    nvmlDeviceGetRemappedRows)."""
    ctx.b.step(t, _G, gpu, "remapped_rows_correctable", 1.0)
    ctx.b.flag(_G, gpu, "remapped_rows_pending", t)
    ctx.b.xid(t, gpu, 63)
    node = ctx.topo.node_of(_G, gpu)
    back = ctx.gpu_reset(reset_at, gpu)
    ctx.b.node_down(node, back - 60.0, back + 60.0)  # drained for the reset
    ctx.benign_label(Trap.BENIGN_REMAP, _G, gpu, t, back)


def nvlink_blip(ctx: Ctx, rng: np.random.Generator, link: int, t: float) -> None:
    """A few CRC errors survived by replay, no trend (Delta, Cui et al., SC'25)."""
    mx = ctx.cfg.benign.nvlink_blip_max
    n = float(rng.integers(1, mx + 1))
    ctx.b.step(t, Scope.NVLINK, link, "nvlink_crc_flit", n)
    ctx.b.step(t, Scope.NVLINK, link, "nvlink_replay", float(rng.integers(1, int(n) + 1)))
    ctx.benign_label(Trap.NVLINK_BLIP, Scope.NVLINK, link, t, t)


def ib_corruption(ctx: Ctx, rng: np.random.Generator, port: int, t0: float, t1: float) -> None:
    """A stable low symbol-error rate for months, never failing (CorrOpt, Zhuo et al.,
    SIGCOMM 2017)."""
    b = ctx.cfg.benign
    ber = 10 ** rng.uniform(np.log10(b.ib_corrupt_ber_min), np.log10(b.ib_corrupt_ber_max))
    ctx.b.segment(Scope.IB_PORT, port, "ib_symbol_error", t0, t1,
                  ber * ctx.spec.ib_rate_gbps * 1e9)
    ctx.benign_label(Trap.IB_CORRUPTION, Scope.IB_PORT, port, t0, t1)


def software_xid(ctx: Ctx, rng: np.random.Generator, gpu: int, t: float) -> None:
    code = int(rng.choice(SOFTWARE_XIDS, p=SOFTWARE_XID_WEIGHTS))
    ctx.b.xid(t, gpu, code)
    ctx.benign_label(Trap.SOFTWARE_XID, _G, gpu, t, t)


def straggler_compute(ctx: Ctx, rng: np.random.Generator, gpu: int, t0: float,
                      t1: float) -> None:
    """A slow GPU with no hardware fault: lower utilization and power (Falcon,
    Wu et al., arXiv 2410.12588)."""
    b = ctx.cfg.benign
    scale = rng.uniform(b.straggler_scale_min, b.straggler_scale_max)
    ctx.b.interval(_G, LOAD, (gpu, gpu + 1), t0, t1, Op.SCALE, scale)
    ctx.benign_label(Trap.STRAGGLER_COMPUTE, _G, gpu, t0, t1)
