"""Tier (a): hard rules from vendor facts. Each fires on the latest state, so it holds while
the condition holds and clears after the repair (a GPU reset zeroes volatile counters and
pending flags)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from collectors.catalog import Scope
from collectors.kernel_log.xid_words import xid_words
from models.detectors.evidence import GPU_TEMP, HBM_ECC
from models.detectors.findings import F64, Finding, fired, sustained
from models.detectors.link_rate import LinkRateConfig, link_rate_low
from models.detectors.roce_gid import RoceGidConfig, roce_gid_missing
from models.detectors.view import FleetView, ScopeView, recent, recent_sum
from models.detectors.xid import xid_risk


@dataclass(frozen=True, slots=True)
class HardRuleConfig:
    xid_hold_s: float = 3600.0  # an Xid keeps its risk this long after it was logged
    ib_down_s: float = 30.0  # NVIDIA health validation: an RDMA outage of 30 s fails
    # A pending remap or retirement needs a GPU reset, not an evacuation, and single benign
    # remaps are common (docs/simulator.md, `benign`): below every alert level on its own,
    # it shows in the risk and explanation and adds to other memory signals.
    pending_risk: float = 0.25
    retired_soft: float = 15.0  # DCGM dcgm_gpu_hardware_limits.h soft limit
    retired_hard: float = 63.0  # DCGM retired-pages limit
    pcie_replays_per_min: float = 8.0  # DCGM PCIe replay-rate limit
    thermal_hold_s: float = 60.0  # slowdown must persist this long (brief spikes are normal)
    # A GPU the tools cannot read (gpu_unreadable): an unknown error or a hung nvidia-smi that
    # lasts this long is treated as the GPU being gone (see `_unreadable`).
    unreadable_escalate_s: float = 600.0
    # PCIe width below its maximum must hold this long while the link is busy (`_pcie_width`).
    pcie_width_hold_s: float = 300.0
    pcie_busy_util: float = 10.0  # GPU utilization (%) at which the link counts as busy
    aer_fatal_hold_s: float = 3600.0  # a fatal AER error keeps its risk this long, like an Xid
    aer_burst_s: float = 600.0  # correctable AER errors counted over this window ...
    aer_burst_errors: float = 100.0  # ... reaching this many is a burst (a watch-level precursor)
    # A port up below the rate its link should run at (models/detectors/link_rate.py).
    link_rate: LinkRateConfig = field(default_factory=LinkRateConfig)
    # A RoCE port up with no usable RoCE v2 GID (models/detectors/roce_gid.py).
    roce_gid: RoceGidConfig = field(default_factory=RoceGidConfig)


class HardRules:
    name = "hard"

    def __init__(self, config: HardRuleConfig | None = None) -> None:
        self.c = config or HardRuleConfig()

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        gpu, nvl, ib = view.scope(Scope.GPU), view.scope(Scope.NVLINK), view.scope(Scope.IB_PORT)
        out = self._memory(gpu) + self._thermal(gpu) + [self._pcie(gpu), self._xid(view, gpu, now)]
        out += [self._unreadable(gpu), self._pcie_width(gpu), *self._aer(gpu)]
        if len(nvl):
            state = nvl.latest("nvlink_state")
            down = np.where(state == 0, 1.0, np.nan)
            out.append(Finding("nvlink_down", Scope.NVLINK, fired(down, 1, 1.0), state, 0,
                               "NVLink link state (0 = inactive)", hard=True))
        if len(ib):
            n = max(1, math.ceil(self.c.ib_down_s / ib.step_s))
            st = ib.window("ib_state", n).astype(np.float64)
            seen = ~np.isnan(st)
            down_all = sustained((st != 4) & seen, seen).astype(np.float64)
            latest = ib.latest("ib_state")
            out.append(Finding("ib_port_down", Scope.IB_PORT, fired(down_all, 1, 1.0), latest, 4,
                               f"IB port state (4 = ACTIVE), not active for {self.c.ib_down_s:g}s",
                               hard=True))
            out.append(self._nic_pcie_width(ib))
            out.append(link_rate_low(ib, self.c.link_rate))
            out.append(roce_gid_missing(ib, self.c.roce_gid))
        return out

    def _memory(self, g: ScopeView) -> list[Finding]:
        c = self.c
        dbe = g.latest("ecc_dbe_volatile")
        fail = g.latest("remapped_rows_failure")
        pend = np.fmax(g.latest("remapped_rows_pending"), g.latest("retired_pages_pending"))
        retired = g.latest("retired_pages_sbe") + np.nan_to_num(g.latest("retired_pages_dbe"))
        return [
            Finding("dbe", Scope.GPU, fired(dbe, 1, 1.0), dbe, 1,
                    "uncorrectable ECC errors since the driver loaded", hard=True,
                    evidence=HBM_ECC),
            Finding("remap_failure", Scope.GPU, fired(fail, 1, 1.0), fail, 1,
                    "row-remap failure flag (spare rows exhausted)", hard=True,
                    evidence=HBM_ECC),
            # The pending flag is left by the same memory's remaps: one piece of evidence with
            # them and the correctable errors behind them (fusion counts it once).
            Finding("remap_pending", Scope.GPU, fired(pend, 1, c.pending_risk), pend, 1,
                    "row remap or page retirement pending a GPU reset", hard=False,
                    evidence=HBM_ECC),
            Finding("retired_pages_limit", Scope.GPU, fired(retired, c.retired_hard, 1.0),
                    retired, c.retired_hard, "retired pages (DCGM limit)", hard=True,
                    evidence=HBM_ECC),
            Finding("retired_pages_soft", Scope.GPU, fired(retired, c.retired_soft, 0.45),
                    retired, c.retired_soft, "retired pages (DCGM soft limit)",
                    evidence=HBM_ECC),
        ]

    def _thermal(self, g: ScopeView) -> list[Finding]:
        n = max(1, math.ceil(self.c.thermal_hold_s / g.step_s))
        temp = g.window("gpu_temp", n).astype(np.float64)
        slow = g.latest("gpu_slowdown_temp")
        shut = g.latest("gpu_shutdown_temp")
        throttle = g.window("throttle_thermal", n).astype(np.float64)
        with np.errstate(invalid="ignore"):
            hot = (temp >= slow[:, None]) | (throttle >= 1)
            over = sustained(hot, ~np.isnan(temp) | ~np.isnan(throttle))
            margin = shut - g.latest("gpu_temp")
        val = np.where(over, 1.0, 0.0)
        return [
            Finding("thermal_slowdown", Scope.GPU, fired(val, 1, 0.7), g.latest("gpu_temp"),
                    float(np.nanmedian(slow)) if np.isfinite(slow).any() else math.nan,
                    f"GPU at its slowdown temperature or thermally throttled for "
                    f"{self.c.thermal_hold_s:g}s", evidence=GPU_TEMP),
            Finding("near_shutdown", Scope.GPU, fired(-margin, -2.0, 1.0), margin, 2.0,
                    "degrees below the GPU shutdown temperature", hard=True,
                    evidence=GPU_TEMP),
        ]

    def _pcie(self, g: ScopeView) -> Finding:
        n = max(1, round(60 / g.step_s))
        per_min = np.nansum(g.window("pcie_replay", n), axis=1).astype(np.float64)
        return Finding("pcie_replay_rate", Scope.GPU,
                       fired(per_min, self.c.pcie_replays_per_min + 1e-9, 0.6), per_min,
                       self.c.pcie_replays_per_min, "PCIe replays in the last minute")

    def _xid(self, view: FleetView, g: ScopeView, now: float) -> Finding:
        risk = np.zeros(len(g), np.float32)
        code: F64 = np.full(len(g), np.nan)
        recent = [e for e in view.events_since(now - self.c.xid_hold_s)
                  if e.metric == "xid" and e.ts <= now]
        index = {e.key: i for i, e in enumerate(g.entities)} if recent else {}
        for ev in recent:
            i = index.get(ev.entity)
            r = xid_risk(int(ev.value))
            if i is not None and r >= risk[i]:
                risk[i], code[i] = r, ev.value
        hold = f"{self.c.xid_hold_s / 60:g} min"
        details = {i: f"{xid_words(int(code[i]))} (logged in the last {hold})"
                   for i in np.flatnonzero(risk > 0).tolist()}
        return Finding("xid", Scope.GPU, risk, code, math.nan,
                       f"Xid code logged in the last {hold}", hard=True,
                       details=details or None)

    def _unreadable(self, g: ScopeView) -> Finding:
        """gpu_unreadable in 1..5 at the two latest readings (one failed read is a blip: a
        driver call racing a reset, an nvidia-smi run killed by a busy node). The level follows
        what the state says of the GPU:

        - 2 requires reset, 3 lost (fell off the bus), 5 no longer listed: the GPU cannot run
          work until a reset or a reboot and its job has already failed, so level 3 at once;
        - 1 unknown error and 4 nvidia-smi timed out: often passing (a lock held by another
          NVML client, a driver busy recovering), so level 2 first, and level 3 once every
          reading over `unreadable_escalate_s` has been bad (the log counts them as GPU faults).
        """
        win = recent(g, "gpu_unreadable", self.c.unreadable_escalate_s)[0].astype(np.float64)
        seen = ~np.isnan(win)
        from_end = np.cumsum(seen[:, ::-1], axis=1)[:, ::-1]  # readings at or after each step
        last = np.where(seen & (from_end == 1), win, 0.0).sum(axis=1)
        prev = np.where(seen & (from_end == 2), win, 0.0).sum(axis=1)
        with np.errstate(invalid="ignore"):
            bad = (win >= 1) & (win <= 5)
        both = (seen.sum(axis=1) >= 2) & (last >= 1) & (last <= 5) & (prev >= 1) & (prev <= 5)
        gone = np.isin(last, (2.0, 3.0, 5.0))
        lasting = sustained(bad, seen)
        risk = np.where(both, np.where(gone | lasting, 1.0, 0.7), 0.0).astype(np.float32)
        value: F64 = np.where(seen.any(axis=1), last, np.nan)
        return Finding("gpu_unreadable", Scope.GPU, risk, value, 1.0,
                       "GPU unreadable (1 unknown error, 2 requires reset, 3 lost, 4 nvidia-smi "
                       "timed out, 5 not found) at two readings in a row", hard=True)

    def _pcie_width(self, g: ScopeView) -> Finding:
        """PCIe link width below its maximum for `pcie_width_hold_s` while the link is busy.

        The width, not the generation: GPUs lower their PCIe generation at idle to save power
        (nvidia-smi --help-query-gpu: the current generation "may be reduced when the GPU is not
        in use"), so a generation drop alone is never a fault. Some boards narrow the width at
        idle too (real captures: an A10G idle at gen 1 x8 of x16), so a reading counts only
        while the link is busy: at its maximum generation or the GPU at `pcie_busy_util` %.
        A link trained narrower while it carries traffic is a bad riser, slot or seating."""
        n = max(1, math.ceil(self.c.pcie_width_hold_s / g.step_s))
        w = g.window("pcie_link_width", n).astype(np.float64)
        wmax = g.window("pcie_link_width_max", n).astype(np.float64)
        gen = g.window("pcie_link_gen", n).astype(np.float64)
        gmax = g.window("pcie_link_gen_max", n).astype(np.float64)
        util = g.window("gpu_util", n).astype(np.float64)
        with np.errstate(invalid="ignore"):
            busy = (gen >= gmax) | (util >= self.c.pcie_busy_util)
            seen = ~np.isnan(w) & ~np.isnan(wmax) & busy
            narrow = w < wmax
        held = sustained(narrow & seen, seen)
        return Finding("pcie_width_low", Scope.GPU, fired(np.where(held, 1.0, 0.0), 1, 0.7),
                       g.latest("pcie_link_width"), math.nan,
                       f"PCIe lanes while busy, below the link's maximum for "
                       f"{self.c.pcie_width_hold_s / 60:g} min (a lower generation at idle is "
                       f"power saving, not a fault)", hard=True)

    def _aer(self, g: ScopeView) -> list[Finding]:
        """Fatal AER errors: the link lost data it could not recover, the GPU's work with it
        (level 3, held like an Xid). Correctable errors in a burst: the link retrains and
        replays, the usual precursor of a width drop or a fatal error (watch level)."""
        c = self.c
        fatal = recent_sum(g, "pcie_aer_fatal_total", c.aer_fatal_hold_s)
        burst = recent_sum(g, "pcie_aer_correctable_total", c.aer_burst_s)
        return [
            Finding("pcie_aer_fatal", Scope.GPU, fired(fatal, 1, 1.0), fatal, 1,
                    f"fatal PCIe AER errors in the last {c.aer_fatal_hold_s / 60:g} min",
                    hard=True),
            # Bad TLPs and DLLPs, replay timeouts and rollovers are what the link replays: one
            # error stream with the replay counter, counted once by fusion.
            Finding("pcie_aer_correctable_burst", Scope.GPU,
                    fired(burst, c.aer_burst_errors, 0.35), burst, c.aer_burst_errors,
                    f"correctable PCIe AER errors in the last {c.aer_burst_s / 60:g} min",
                    evidence="pcie_replay_rate"),
        ]

    def _nic_pcie_width(self, ib: ScopeView) -> Finding:
        """An HCA's PCI link narrower than its maximum for `pcie_width_hold_s`: its ports
        cannot carry their IB rate (an x8 link caps a 400 Gb/s port near half). HCAs keep
        their width at idle, so every reading counts (level 2: fix at the next job boundary)."""
        n = max(1, math.ceil(self.c.pcie_width_hold_s / ib.step_s))
        w = ib.window("nic_pcie_link_width", n).astype(np.float64)
        wmax = ib.window("nic_pcie_link_width_max", n).astype(np.float64)
        seen = ~np.isnan(w) & ~np.isnan(wmax)
        with np.errstate(invalid="ignore"):
            held = sustained((w < wmax) & seen, seen)
        return Finding("nic_pcie_width_low", Scope.IB_PORT,
                       fired(np.where(held, 1.0, 0.0), 1, 0.7), ib.latest("nic_pcie_link_width"),
                       math.nan, f"HCA PCIe lanes below the link's maximum for "
                                 f"{self.c.pcie_width_hold_s / 60:g} min", hard=True)
