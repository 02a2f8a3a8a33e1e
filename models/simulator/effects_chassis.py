"""The node-wide failure modes (issue 31; rates from a public fault log of 400 eight-GPU
servers over 349 days, SIGCOMM 2025: fault_log.py): what their precursors and terminal events
write. docs/simulator.md, `chassis`, gives the shapes; config_chassis.py the numbers.

- M8 power supply: the supply runs hotter over its lead, then fails (health Critical, not
  delivering, 0 W) and the node loses its power redundancy; drained until the swap.
- M9 fan: the fan's speed decays against its peers over hours to days (bearing wear), then it
  stalls or crawls under its lower critical threshold (health Critical, fan redundancy lost);
  drained until the swap.
- M10 GPU PCIe width: bursts of correctable AER errors, then the link trains narrower (x8 or
  x4 of x16); the GPU keeps working, slower, until the board is reseated.
- M11 NIC speed: symbol errors and link recoveries, then the port trains at half its rate (or,
  for a share, the HCA's PCIe link narrows); it keeps carrying traffic until the repair.
- M12 GPU unreadable: the tools read "[Unknown Error]" or nvidia-smi hangs, until a reboot.
- M13 host hardware: an uncorrectable memory error (EDAC UE with its machine check); the node
  crashes and reboots.
"""

from __future__ import annotations

import numpy as np

from collectors.catalog import Scope
from models.simulator.context import REBOOT_GAP_S, Ctx, precursor_times
from models.simulator.failures import Failure
from models.simulator.plan import Op

ENABLED, OFF = 0.0, 3.0  # psu_state
CRITICAL = 2.0  # psu_health, fan_health
_RESEAT_S = 1800.0  # a degraded link keeps working until the node is drained to fix it


def _reboot_after(ctx: Ctx, fail: Failure, action: str, scope: Scope, ent: int) -> None:
    back = ctx.node_reboot(fail.repair, fail.node)
    ctx.node_missing(fail.node, back - REBOOT_GAP_S, back)
    ctx.repair_label(back, scope, ent, action, fail.mode.value)


def psu(ctx: Ctx, fail: Failure, rng: np.random.Generator) -> None:
    c = ctx.cfg.chassis
    ent, t, node = fail.entity(ctx.topo), fail.time, fail.node
    one = (ent, ent + 1)
    if fail.onset is not None:
        rise = rng.uniform(c.psu_drift_c_min, c.psu_drift_c_max)
        ctx.b.interval(Scope.PSU, "psu_temp_c", one, fail.onset, t, Op.RAMP, 0.0, rise)
    ctx.b.interval(Scope.PSU, "psu_health", one, t, fail.repair, Op.SET, CRITICAL)
    ctx.b.interval(Scope.PSU, "psu_state", one, t, fail.repair, Op.SET, OFF)
    ctx.b.interval(Scope.NODE, "psu_redundant", (node, node + 1), t, fail.repair, Op.SET, 0.0)
    ctx.b.node_down(node, t, fail.repair)
    ctx.repair_label(fail.repair, Scope.PSU, ent, "psu_replace", fail.mode.value)


def fan(ctx: Ctx, fail: Failure, rng: np.random.Generator) -> None:
    c = ctx.cfg.chassis
    ent, t, node = fail.entity(ctx.topo), fail.time, fail.node
    one = (ent, ent + 1)
    if fail.onset is not None:
        # Piecewise-constant factors falling from 1 to `to` (a multiplicative decay that keeps
        # following the fan curve): linear in time, the native shape of wear.
        to = rng.uniform(c.fan_decay_to_min, c.fan_decay_to_max)
        edges = np.linspace(fail.onset, t, c.fan_decay_pieces + 1)
        for k in range(c.fan_decay_pieces):
            f = 1.0 - (1.0 - to) * (k + 1) / c.fan_decay_pieces
            ctx.b.interval(Scope.FAN, "fan_rpm", one, float(np.round(edges[k])),
                           float(np.round(edges[k + 1])), Op.SCALE, f)
    crawl = 0.0 if rng.random() < 0.5 else rng.uniform(0.2, 0.8) * c.fan_lower_critical_rpm
    ctx.b.interval(Scope.FAN, "fan_rpm", one, t, fail.repair, Op.SET, crawl)
    ctx.b.interval(Scope.FAN, "fan_health", one, t, fail.repair, Op.SET, CRITICAL)
    ctx.b.interval(Scope.NODE, "fan_redundant", (node, node + 1), t, fail.repair, Op.SET, 0.0)
    ctx.b.node_down(node, t, fail.repair)
    ctx.repair_label(fail.repair, Scope.FAN, ent, "fan_replace", fail.mode.value)


def pcie_width(ctx: Ctx, fail: Failure, rng: np.random.Generator) -> None:
    c = ctx.cfg.chassis
    gpu, t = fail.entity(ctx.topo), fail.time
    if fail.onset is not None:
        lead = t - fail.onset
        times = precursor_times(rng, fail.onset, t, c.aer_bursts_base + c.aer_bursts_per_h
                                * lead / 3600, rng.uniform(2.0, 6.0), fail.growth)
        sizes = np.maximum(np.round(c.aer_burst_median * np.exp(
            0.8 * rng.standard_normal(len(times)))), c.aer_burst_min)
        for tb, n in zip(times, sizes, strict=True):
            ctx.b.step(float(np.round(tb)), Scope.GPU, gpu, "pcie_aer_correctable_total",
                       float(n))
    lanes = 8.0 if rng.random() < 0.7 else 4.0
    fix = max(t, fail.repair - _RESEAT_S)
    ctx.b.interval(Scope.GPU, "pcie_link_width", (gpu, gpu + 1), t, fail.repair, Op.SET, lanes)
    ctx.b.node_down(fail.node, fix, fail.repair)
    _reboot_after(ctx, fail, "gpu_reseat", Scope.GPU, gpu)


def nic_speed(ctx: Ctx, fail: Failure, rng: np.random.Generator) -> None:
    c, sh = ctx.cfg.chassis, ctx.cfg.failures.shapes.ib
    port, t = fail.entity(ctx.topo), fail.time
    one = (port, port + 1)
    bps = ctx.spec.ib_rate_gbps * 1e9
    if fail.onset is not None:
        lead = t - fail.onset
        ber = 10 ** rng.uniform(np.log10(sh.plateau_ber_min), np.log10(sh.plateau_ber_max))
        rise = t - sh.rise_frac * lead
        ctx.b.segment(Scope.IB_PORT, port, "ib_symbol_error", fail.onset, t, ber * bps, rise,
                      sh.final_ber * bps)
        for tf in np.sort(rng.uniform(rise, t - 60.0, int(rng.integers(1, 4)))):
            ctx.b.step(float(np.round(tf)), Scope.IB_PORT, port, "ib_link_error_recovery", 1.0)
    ctx.b.step(t, Scope.IB_PORT, port, "ib_link_error_recovery", 1.0)
    if rng.random() < c.nic_pcie_share:
        ctx.b.interval(Scope.IB_PORT, "nic_pcie_link_width", one, t, fail.repair, Op.SET, 8.0)
    else:
        ctx.b.interval(Scope.IB_PORT, "ib_rate", one, t, fail.repair, Op.SET,
                       ctx.spec.ib_rate_gbps / 2)
    ctx.b.node_down(fail.node, max(t, fail.repair - _RESEAT_S), fail.repair)
    ctx.repair_label(fail.repair, Scope.IB_PORT, port, "link_repair", fail.mode.value)


def gpu_unreadable(ctx: Ctx, fail: Failure, rng: np.random.Generator) -> None:
    gpu, t = fail.entity(ctx.topo), fail.time
    state = 1.0 if rng.random() < 2.4 / 2.9 else 4.0  # the log's unknown error : timeout
    ctx.b.interval(Scope.GPU, "gpu_unreadable", (gpu, gpu + 1), t, fail.repair, Op.SET, state)
    ctx.b.node_down(fail.node, t, fail.repair)
    _reboot_after(ctx, fail, "node_reboot", Scope.NODE, fail.node)


def host_hw(ctx: Ctx, fail: Failure, rng: np.random.Generator) -> None:
    node, t = fail.node, fail.time
    ctx.b.step(t, Scope.NODE, node, "edac_ue_total", 1.0)
    ctx.b.step(t, Scope.NODE, node, "mce_total", 1.0)
    ctx.b.node_down(node, t, fail.repair)
    ctx.node_missing(node, t, t + REBOOT_GAP_S)  # the host crashed
    _reboot_after(ctx, fail, "node_reboot", Scope.NODE, node)
