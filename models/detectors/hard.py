"""Tier (a): hard rules from vendor facts. Each fires on the latest state, so it holds while
the condition holds and clears after the repair (a GPU reset zeroes volatile counters and
pending flags)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from collectors.catalog import Scope
from models.detectors.evidence import GPU_TEMP, HBM_ECC
from models.detectors.findings import F64, Finding, fired, sustained
from models.detectors.view import FleetView, ScopeView
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


class HardRules:
    name = "hard"

    def __init__(self, config: HardRuleConfig | None = None) -> None:
        self.c = config or HardRuleConfig()

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        gpu, nvl, ib = view.scope(Scope.GPU), view.scope(Scope.NVLINK), view.scope(Scope.IB_PORT)
        out = self._memory(gpu) + self._thermal(gpu) + [self._pcie(gpu), self._xid(view, gpu, now)]
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
        return Finding("xid", Scope.GPU, risk, code, math.nan,
                       f"Xid code logged in the last {self.c.xid_hold_s / 60:g} min",
                       hard=True)
