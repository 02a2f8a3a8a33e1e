"""M1 (HBM) and M6 (SRAM): what their precursors and terminal events write (docs/simulator.md,
`failures.shapes`).

Xid codes follow the NVIDIA Xid catalog: 48 DBE, 63 row remap recorded, 64 remap failed,
94 contained, 95 uncontained. Xids of one incident are a few milliseconds apart.
"""

from __future__ import annotations

import numpy as np

from collectors.catalog import Scope
from models.simulator.context import Ctx, precursor_times
from models.simulator.failures import Failure

_G = Scope.GPU
_XID_GAP_S = 0.01


def _sbe(ctx: Ctx, t: float, gpu: int, n: float) -> None:
    ctx.b.step(t, _G, gpu, "ecc_sbe_volatile", n)
    ctx.b.step(t, _G, gpu, "ecc_sbe_aggregate", n)


def _dbe(ctx: Ctx, t: float, gpu: int) -> None:
    ctx.b.step(t, _G, gpu, "ecc_dbe_volatile", 1.0)
    ctx.b.step(t, _G, gpu, "ecc_dbe_aggregate", 1.0)


def _remap(ctx: Ctx, t: float, gpu: int, rows: float, *, correctable: bool) -> None:
    col = "remapped_rows_correctable" if correctable else "remapped_rows_uncorrectable"
    ctx.b.step(t, _G, gpu, col, rows)
    ctx.b.flag(_G, gpu, "remapped_rows_pending", t)  # pending until the next GPU reset
    if ctx.cfg.fleet.page_retirement:
        ctx.b.step(t, _G, gpu, "retired_pages_sbe" if correctable else "retired_pages_dbe", rows)
        ctx.b.flag(_G, gpu, "retired_pages_pending", t)
    ctx.b.xid(t + _XID_GAP_S, gpu, 63)


def hbm(ctx: Ctx, fail: Failure, rng: np.random.Generator) -> None:
    sh = ctx.cfg.failures.shapes.hbm
    gpu = fail.entity(ctx.topo)
    t = fail.time
    if fail.onset is not None:
        lead = t - fail.onset
        times = precursor_times(rng, fail.onset, t,
                                sh.bursts_base + sh.bursts_per_h * lead / 3600,
                                rng.uniform(sh.doublings_min, sh.doublings_max), fail.growth)
        sizes = ctx.burst_sizes(rng, len(times))
        remaps = rng.random(len(times)) < sh.remap_prob_per_burst
        rows = rng.integers(1, sh.remap_rows_max + 1, len(times))
        for tb, size, remap, r in zip(times, sizes, remaps, rows, strict=True):
            tb = float(np.round(tb))
            _sbe(ctx, tb, gpu, float(size))
            if remap:
                _remap(ctx, tb, gpu, float(r), correctable=True)
        early_s = sh.early_dbe_min_h * 3600
        if lead > early_s and rng.random() < sh.early_dbe_prob:
            te = float(np.round(rng.uniform(fail.onset, t - early_s)))
            _dbe(ctx, te, gpu)
            ctx.b.xid(te, gpu, 48)
            _remap(ctx, te, gpu, 1.0, correctable=False)
            ctx.b.xid(te + 2 * _XID_GAP_S, gpu, 94)
    kind = int(rng.choice(4, p=np.asarray(sh.terminal_weights) / sum(sh.terminal_weights)))
    _dbe(ctx, t, gpu)
    ctx.b.xid(t, gpu, 48)
    if kind == 2:  # spare rows exhausted: the GPU must be replaced
        ctx.b.xid(t + _XID_GAP_S, gpu, 64)
        ctx.b.flag(_G, gpu, "remapped_rows_failure", t, until_replace=True)
    else:
        _remap(ctx, t, gpu, 1.0, correctable=False)
        if kind in (0, 1):
            ctx.b.xid(t + 2 * _XID_GAP_S, gpu, 94 if kind == 0 else 95)
    replace = kind == 2
    ctx.b.node_down(fail.node, t, fail.repair)
    back = ctx.gpu_reset(fail.repair, gpu, replace=replace)
    ctx.repair_label(back, _G, gpu, "gpu_replace" if replace else "gpu_reset", fail.mode.value)


def sram(ctx: Ctx, fail: Failure, rng: np.random.Generator) -> None:
    sh = ctx.cfg.failures.shapes.sram
    gpu = fail.entity(ctx.topo)
    t = fail.time
    if fail.onset is not None:
        n = int(rng.integers(sh.increments_min, sh.increments_max + 1))
        times = np.sort(rng.uniform(fail.onset, t, n - 1))
        for tb in np.concatenate(([fail.onset], times)):
            ctx.b.step(float(np.round(tb)), _G, gpu, "ecc_sram_correctable",
                       float(rng.integers(1, 3)))
    # An uncorrectable SRAM error counts in the volatile/aggregate uncorrectable totals but
    # has no HBM row to remap.
    _dbe(ctx, t, gpu)
    ctx.b.xid(t, gpu, 48)
    ctx.b.node_down(fail.node, t, fail.repair)
    back = ctx.gpu_reset(fail.repair, gpu)
    ctx.repair_label(back, _G, gpu, "gpu_reset", fail.mode.value)
