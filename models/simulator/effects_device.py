"""M2 (GPU hard fault), M5 (thermal path) and M7 (unobservable): docs/simulator.md,
`failures.shapes`, gives the sources."""

from __future__ import annotations

import numpy as np

from collectors.catalog import Scope
from models.simulator.config_shapes import Growth
from models.simulator.context import REBOOT_GAP_S, Ctx, precursor_times
from models.simulator.failures import Failure
from models.simulator.plan import Op

_G = Scope.GPU
_NVL = Scope.NVLINK
# Design choice: enough to push a loaded GPU past its slowdown threshold during an excursion,
# and past shutdown in the final minute and a half.
_EXCURSION_C = 30.0
_SHUTDOWN_RAMP_C = 50.0
_SHUTDOWN_RAMP_S = 90.0


def gpu_hard(ctx: Ctx, fail: Failure, rng: np.random.Generator) -> None:
    sh = ctx.cfg.failures.shapes.gpu_hard
    gpu = fail.entity(ctx.topo)
    t = fail.time
    xid = 79 if rng.random() < sh.xid79_frac else 119
    if fail.onset is not None:
        lead = t - fail.onset
        pcie, gaps, nvl = (rng.random(3) < (sh.pcie_prob, sh.gap_prob, sh.nvlink_all_prob))
        if not (pcie or gaps or nvl):
            pcie = True  # a precursor-bearing event shows at least one sign
        if pcie:
            times = precursor_times(rng, fail.onset, t, 3 + lead / 7200, rng.uniform(2, 6),
                                    fail.growth)
            for tb, n in zip(times, ctx.burst_sizes(rng, len(times), sh.pcie_burst_median, 1.0),
                             strict=True):
                ctx.b.step(float(np.round(tb)), _G, gpu, "pcie_replay", float(n))
        if gaps:
            first = True
            for tg in np.sort(rng.uniform(fail.onset, max(fail.onset, t - 60), rng.integers(1, 5))):
                tg = fail.onset if first else float(np.round(tg))
                first = False
                ctx.gpu_missing(gpu, tg, tg + 5.0 * rng.integers(1, 4))
        if nvl:
            l0, l1 = ctx.topo.gpu_links(gpu)
            extra = rng.uniform(fail.onset, t, rng.integers(0, 3))
            for te in np.concatenate(([fail.onset], extra)):
                te = float(np.round(te))
                for link in range(l0, l1):
                    ctx.b.step(te, _NVL, link, "nvlink_replay", float(rng.integers(1, 6)))
                    ctx.b.step(te, _NVL, link, "nvlink_recovery", 1.0)
    elif rng.random() < sh.pcie_prob:
        # Co-occurring PCIe errors (Meta RSC, Kokolis et al., HPCA 2025) seconds before the loss:
        # not a precursor.
        ctx.b.step(t - float(rng.integers(0, 5)), _G, gpu, "pcie_replay",
                   float(ctx.burst_sizes(rng, 1, sh.pcie_burst_median, 1.0)[0]))
    if rng.random() < sh.stale_prob:
        stale = 5.0 * rng.integers(1, 4)
        for col in ("gpu_temp", "mem_temp"):
            ctx.b.interval(_G, col, (gpu, gpu + 1), t - stale, t, Op.NAN, 0.0)
    ctx.b.xid(t, gpu, xid)
    ctx.gpu_missing(gpu, t, fail.repair)
    ctx.b.node_down(fail.node, t, fail.repair)
    if xid == 79:
        back = ctx.gpu_reset(fail.repair, gpu, replace=True)
        ctx.repair_label(back, _G, gpu, "gpu_replace", fail.mode.value)
    else:  # GSP errors need a node reboot (Delta, Cui et al., SC'25)
        back = ctx.node_reboot(fail.repair, fail.node)
        ctx.node_missing(fail.node, back - REBOOT_GAP_S, back)
        ctx.repair_label(back, Scope.NODE, fail.node, "node_reboot", fail.mode.value)


def thermal(ctx: Ctx, fail: Failure, rng: np.random.Generator) -> None:
    sh = ctx.cfg.failures.shapes.thermal
    gpu = fail.entity(ctx.topo)
    ents = (gpu, gpu + 1)
    t = fail.time
    u = rng.random()
    cols = ("mem_temp",) if u < sh.hbm_only_prob else (
        ("gpu_temp",) if u < sh.hbm_only_prob + sh.gpu_only_prob else ("gpu_temp", "mem_temp"))
    if fail.onset is not None:
        lead = t - fail.onset
        drift = rng.uniform(sh.drift_min_c, sh.drift_max_c)
        for col in cols:
            _drift(ctx, col, ents, fail.onset, t, drift, fail.growth, rng)
        if not sh.power_signature:
            _shutdown(ctx, fail, gpu)
            return
        half = fail.onset + lead / 2
        for col in ("power_draw", "sm_clock"):
            ctx.b.interval(_G, col, ents, half, t, Op.SCALE, sh.power_scale)
        n = 1 + int(rng.poisson(sh.excursion_mean))
        for te in rng.uniform(t - lead / 4, t - _SHUTDOWN_RAMP_S, n):
            dur = rng.uniform(sh.excursion_min_s, sh.excursion_max_s)
            for col in cols:
                ctx.b.interval(_G, col, ents, float(np.round(te)), float(np.round(te + dur)),
                               Op.ADD, _EXCURSION_C)
    _shutdown(ctx, fail, gpu)


def _shutdown(ctx: Ctx, fail: Failure, gpu: int) -> None:
    """The last 90 s to the shutdown level, then the GPU is lost until the node reboots."""
    t, ents = fail.time, (gpu, gpu + 1)
    for col in ("gpu_temp", "mem_temp"):
        ctx.b.interval(_G, col, ents, t - _SHUTDOWN_RAMP_S, t, Op.RAMP, 0.0, _SHUTDOWN_RAMP_C)
    ctx.gpu_missing(gpu, t, fail.repair)
    ctx.b.node_down(fail.node, t, fail.repair)
    back = ctx.node_reboot(fail.repair, fail.node)
    ctx.node_missing(fail.node, back - REBOOT_GAP_S, back)
    ctx.repair_label(back, Scope.NODE, fail.node, "node_reboot", fail.mode.value)


def _drift(ctx: Ctx, col: str, ents: tuple[int, int], onset: float, t: float, drift: float,
           growth: Growth, rng: np.random.Generator) -> None:
    """The temperature rise over the lead, shaped by `growth` (native and linear: a straight
    ramp; exponential: a quarter of the rise over the first two thirds, the rest after; step:
    the whole rise from onset; burst: the rise in 1-3 episodes of 10-60 min)."""
    if growth in ("native", "linear"):
        ctx.b.interval(_G, col, ents, onset, t, Op.RAMP, 0.0, drift)
    elif growth == "exponential":
        knee = onset + 2 * (t - onset) / 3
        ctx.b.interval(_G, col, ents, onset, knee, Op.RAMP, 0.0, drift / 4)
        ctx.b.interval(_G, col, ents, knee, t, Op.RAMP, drift / 4, drift)
    elif growth == "step":
        ctx.b.interval(_G, col, ents, onset, t, Op.ADD, drift)
    else:
        starts = np.concatenate(([onset], rng.uniform(onset, t, int(rng.integers(0, 3)))))
        for a in starts:
            a = float(np.round(a))
            ctx.b.interval(_G, col, ents, a, min(t, a + float(rng.uniform(600, 3600))),
                           Op.ADD, drift)


def unobservable(ctx: Ctx, fail: Failure, rng: np.random.Generator) -> None:
    """No signature: the job dies and restarts; only the load shows it, like any job end."""
    del rng
    ctx.b.node_down(fail.node, fail.time, fail.repair)
    ctx.repair_label(fail.repair, Scope.NODE, fail.node, "job_restart", fail.mode.value)
