"""M3 (NVLink) and M4 (InfiniBand / optics): docs/simulator.md, `failures.shapes`, gives the
sources."""

from __future__ import annotations

import numpy as np

from collectors.catalog import Scope
from models.simulator.context import REBOOT_GAP_S, Ctx, precursor_times
from models.simulator.failures import Failure
from models.simulator.plan import Op

_NVL = Scope.NVLINK
_IB = Scope.IB_PORT
IB_DOWN = 1.0  # logical port state DOWN
IB_INIT = 2.0  # physical link up, not yet active: what a retraining flap reads


def _crc(ctx: Ctx, t: float, link: int, flit: float, rng: np.random.Generator) -> None:
    sh = ctx.cfg.failures.shapes.nvlink
    ctx.b.step(t, _NVL, link, "nvlink_crc_flit", flit)
    data = np.round(flit * sh.data_ratio * rng.uniform(0.5, 1.5))
    if data > 0:
        ctx.b.step(t, _NVL, link, "nvlink_crc_data", float(data))
    ctx.b.step(t, _NVL, link, "nvlink_replay", float(max(1.0, np.round(flit * sh.replay_ratio))))


def nvlink(ctx: Ctx, fail: Failure, rng: np.random.Generator) -> None:
    sh = ctx.cfg.failures.shapes.nvlink
    topo = ctx.topo
    gpu = topo.gpu(fail.node, fail.unit)
    link = fail.entity(topo)
    t = fail.time
    peer = topo.peer_link(gpu, fail.link)
    mirror = peer is not None and rng.random() < sh.mirror_prob
    peer_link = topo.nvlink(*peer) if peer is not None else -1
    if fail.onset is not None:
        lead = t - fail.onset
        times = precursor_times(rng, fail.onset, t,
                                sh.bursts_base + sh.bursts_per_h * lead / 3600,
                                rng.uniform(2.0, 6.0), fail.growth)
        sizes = ctx.burst_sizes(rng, len(times), sh.crc_burst_median, 1.0)
        for tb, n in zip(times, sizes, strict=True):
            tb = float(np.round(tb))
            _crc(ctx, tb, link, float(n), rng)
            if mirror:
                _crc(ctx, tb, peer_link, float(max(1.0, np.round(n * sh.mirror_scale))), rng)
        # Recovery bursts of 1-5 recurring with shrinking gaps over the last half of the lead.
        k = int(rng.integers(sh.recovery_bursts_min, sh.recovery_bursts_max + 1))
        gaps = sh.recovery_gap_shrink ** np.arange(k)
        gaps *= (lead / 2) / gaps.sum()
        for tr in t - lead / 2 + np.concatenate(([0.0], np.cumsum(gaps)[:-1])):
            ctx.b.step(float(np.round(tr)), _NVL, link, "nvlink_recovery",
                       float(rng.integers(1, 6)))
    _crc(ctx, t, link, float(ctx.burst_sizes(rng, 1, sh.crc_burst_median, 1.0)[0]), rng)
    ctx.b.xid(t, gpu, 74)
    ctx.b.interval(_NVL, "nvlink_state", (link, link + 1), t, fail.repair, Op.SET, 0.0)
    if mirror and peer is not None:
        ctx.b.xid(t, peer[0], 74)
        ctx.b.interval(_NVL, "nvlink_state", (peer_link, peer_link + 1), t, fail.repair,
                       Op.SET, 0.0)
    ctx.b.node_down(fail.node, t, fail.repair)
    back = ctx.node_reboot(fail.repair, fail.node)
    ctx.node_missing(fail.node, back - REBOOT_GAP_S, back)
    ctx.repair_label(back, Scope.NODE, fail.node, "node_reboot", fail.mode.value)


def ib_link(ctx: Ctx, fail: Failure, rng: np.random.Generator) -> None:
    sh = ctx.cfg.failures.shapes.ib
    port = fail.entity(ctx.topo)
    t = fail.time
    bps = ctx.spec.ib_rate_gbps * 1e9
    if fail.onset is not None:
        lead = t - fail.onset
        ber = 10 ** rng.uniform(np.log10(sh.plateau_ber_min), np.log10(sh.plateau_ber_max))
        # A "step" precursor keeps its plateau to the end; every other shape climbs.
        rise = t if fail.growth == "step" else t - sh.rise_frac * lead
        # Symbol errors step to a stable plateau (CorrOpt), then climb past 1e-12 (ibdiagnet).
        ctx.b.segment(_IB, port, "ib_symbol_error", fail.onset, t, ber * bps, rise,
                      sh.final_ber * bps)
        ctx.b.segment(_IB, port, "ib_port_rcv_errors", fail.onset, t,
                      ber * bps * sh.rcv_error_ratio, rise, sh.final_ber * bps * sh.rcv_error_ratio)
        n = int(rng.integers(sh.flaps_min, sh.flaps_max + 1))
        for tf in np.sort(rng.uniform(min(rise, t - sh.rise_frac * lead), t - 60.0, n)):
            tf = float(np.round(tf))
            ctx.b.step(tf, _IB, port, "ib_link_error_recovery", 1.0)
            ctx.b.step(tf, _IB, port, "ib_local_link_integrity_errors", 1.0)
            ctx.b.interval(_IB, "ib_state", (port, port + 1), tf,
                           tf + rng.uniform(sh.flap_s_min, sh.flap_s_max), Op.SET, IB_INIT)
    # The terminal outage lasts until the cable or transceiver is replaced (>= 30 s: NVIDIA Health
    # Validation fails an RDMA link outage of 30 s).
    ctx.b.step(t, _IB, port, "ib_link_error_recovery", 1.0)
    ctx.b.step(t, _IB, port, "ib_link_downed", 1.0)
    ctx.b.interval(_IB, "ib_state", (port, port + 1), t, fail.repair, Op.SET, IB_DOWN)
    ctx.b.node_down(fail.node, t, fail.repair)
    ctx.repair_label(fail.repair, _IB, port, "link_repair", fail.mode.value)
