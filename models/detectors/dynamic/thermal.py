"""Temperatures: HBM held hot for hours, and a GPU warmer than its node's other GPUs beyond its
own usual offset (peer comparison)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.detectors.dynamic.baseline import Baseline
from models.detectors.dynamic.family import Flagged, Rule
from models.detectors.dynamic.hourly import HOUR, nanmean
from models.detectors.dynamic.levels import LevelConfig
from models.detectors.evidence import GPU_TEMP, MEM_TEMP
from models.detectors.findings import F64, Finding, kept
from models.detectors.view import FleetView, ScopeView, recent


@dataclass(frozen=True)
class ThermalConfig(LevelConfig):
    # Sustained HBM temperature (issue 2): above 85 degC for 3 h.
    hbm_temp_c: float = 85.0
    hbm_temp_hold_s: float = 3 * HOUR
    hbm_temp_risk: float = 0.25
    # Peer comparison: a GPU warmer than its node's median beyond its own usual offset.
    peer_window_s: float = 1800.0
    peer_watch_c: float = 5.0
    peer_warn_c: float = 10.0


HBM_TEMP = Rule("hbm_temp_sustained", Scope.GPU, ("mem_temp",), MEM_TEMP,
                "hours with HBM temperature above {hbm_temp_c:g} degC")
_PEER_SIGNAL = "{metric} above the node median beyond its usual offset, degC"
PEER = {
    "gpu_temp": Rule("peer_gpu_temp", Scope.GPU, ("gpu_temp", "power_draw"), GPU_TEMP,
                     _PEER_SIGNAL),
    "mem_temp": Rule("peer_mem_temp", Scope.GPU, ("mem_temp", "power_draw"), MEM_TEMP,
                     _PEER_SIGNAL),
}


class Thermal:
    rules: tuple[Rule, ...] = (HBM_TEMP, *PEER.values())

    def __init__(self, c: ThermalConfig) -> None:
        self.c = c
        self.peer_base = {m: Baseline(c.baseline_half_life_h) for m in PEER}
        self.hbm_since: F64 = np.zeros(0)
        self._prev_drift: dict[str, F64] = {}

    def every_tick(self, view: FleetView, now: float) -> list[Finding]:
        return [self._hbm_sustained(view.scope(Scope.GPU), now)]

    def every_minute(self, view: FleetView) -> list[Finding]:
        return self._peer(view.scope(Scope.GPU))

    def learn(self, view: FleetView, flagged: Flagged) -> None:
        g = view.scope(Scope.GPU)
        if len(g):
            for metric, base in self.peer_base.items():
                base.update(self._residual(g, metric), flagged(PEER[metric].name, len(g)))

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        if scope is Scope.GPU:
            for base in self.peer_base.values():
                base.take(keep)
            self.hbm_since = kept(self.hbm_since, keep)
            self._prev_drift = {m: kept(d, keep) for m, d in self._prev_drift.items()}

    def _hbm_sustained(self, g: ScopeView, now: float) -> Finding:
        c, n = self.c, len(g)
        if len(self.hbm_since) < n:
            self.hbm_since = np.concatenate([self.hbm_since, np.full(n - len(self.hbm_since),
                                                                     np.nan)])
        temp = g.latest("mem_temp")
        since = self.hbm_since[:n]
        hot, cool = temp > c.hbm_temp_c, temp <= c.hbm_temp_c  # NaN is neither: a gap waits
        since[hot & np.isnan(since)] = now
        since[cool] = np.nan
        held = now - since
        # Below every alert level on its own: HBM temperature is a weak failure predictor
        # (Schroeder et al., DRAM Errors in the Wild, SIGMETRICS 2009); it shows in the risk
        # and explanation and adds to other signals.
        risk = np.where(held >= c.hbm_temp_hold_s, np.float32(c.hbm_temp_risk), np.float32(0))
        return HBM_TEMP.finding(risk.astype(np.float32), held / HOUR, c.hbm_temp_hold_s / HOUR,
                                hbm_temp_c=c.hbm_temp_c)

    def _residual(self, g: ScopeView, metric: str) -> F64:
        """Temperature above the node's median, less what the GPU's extra power explains:
        a GPU that runs warmer because it works harder than its peers is not anomalous."""
        level = nanmean(recent(g, metric, self.c.peer_window_s)[0])
        power = nanmean(recent(g, "power_draw", self.c.peer_window_s)[0])
        x = level - node_median(level, g.node_of)
        p = power - node_median(power, g.node_of)
        ok = np.isfinite(x) & np.isfinite(p)
        denom = float(np.sum(p[ok] ** 2))
        # One fleet-wide slope (degC per W), fitted through the origin on this minute's data.
        slope = float(np.clip(np.sum(x[ok] * p[ok]) / denom, 0.0, 0.5)) if denom > 0 else 0.0
        out: F64 = x - slope * np.nan_to_num(p)
        return out

    def _peer(self, g: ScopeView) -> list[Finding]:
        c, n, out = self.c, len(g), []
        if n == 0:
            return []
        for metric, base in self.peer_base.items():
            now_drift = self._residual(g, metric) - np.nan_to_num(base.get(n), nan=0.0)
            prev = self._prev_drift.get(metric, np.zeros(0))
            prev = np.concatenate([prev, np.full(max(0, n - len(prev)), np.nan)])[:n]
            self._prev_drift[metric] = now_drift
            # Persistent: the smaller of this and the previous evaluation must cross.
            drift = np.minimum(now_drift, np.where(np.isnan(prev), -np.inf, prev))
            with np.errstate(invalid="ignore"):
                risk = np.where(drift >= c.peer_warn_c, c.warn_risk,
                                np.where(drift >= c.peer_watch_c, c.watch_risk, 0.0))
            out.append(PEER[metric].finding(risk.astype(np.float32), drift, c.peer_watch_c,
                                            metric=metric))
        return out


def node_median(values: F64, node_of: npt.NDArray[np.int32]) -> F64:
    """Median of each entity's node peers (itself included), vectorised over nodes."""
    n = len(values)
    if n == 0:
        return np.zeros(0)
    nodes = node_of[:n]
    order = np.argsort(nodes, kind="stable")
    sn = nodes[order]
    start = np.r_[0, np.flatnonzero(sn[1:] != sn[:-1]) + 1]
    seg = np.cumsum(np.r_[True, sn[1:] != sn[:-1]]) - 1
    rank = np.arange(n) - start[seg]
    grid = np.full((len(start), int(rank.max()) + 1), np.nan)
    grid[seg, rank] = values[order]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN nodes give NaN, as meant
        med = np.nanmedian(grid, axis=1)
    out = np.empty(n)
    out[order] = med[seg]
    return out
