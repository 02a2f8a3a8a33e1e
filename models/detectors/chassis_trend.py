"""Predictive chassis rules (issue 31, item 6: "fan RPM falling against its peers in the same
chassis"): a fan or a supply drifting away from its peers in the same chassis before it fails.
Both are watch level (risk 0.35: look at it, no action yet); the failure itself is
models/detectors/chassis.py's (fan_failed, psu_failed).

- fan_slowing: a fan turning below `fan_ratio` of the median of the other fans of its node,
  for `hold_s`. A fan's bearing wears for hours to days before it stalls, and its speed falls
  against fans under the same fan curve; the curve itself (fans speeding up with load, the BMC
  switching to an acoustic or a performance profile) moves every fan of the chassis together
  and never fires. A fan already under its lower critical threshold is fan_failed's.
- psu_running_hot: a delivering supply more than `psu_delta_c` warmer than the median of the
  node's other delivering supplies, for `hold_s`, or Warning health (Redfish Status.Health
  Warning, IPMI "Predictive failure"). Supplies sharing a load run at one temperature; a spare
  in standby by design and a supply that already failed are no peers (they run cool).

The peers are a chassis's own (a fleet's fans differ by model and zone); with fewer than
`min_peers` peers reporting, neither rule fires. Thresholds are design choices
(docs/simulator.md, "Node-wide modes", shows the simulated precursors they are tuned on).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.detectors.findings import F64, Finding, sustained
from models.detectors.view import ScopeView, recent

WATCH_RISK = 0.35
ENABLED, WARNING, CRITICAL = 0, 1, 2


@dataclass(frozen=True, slots=True)
class ChassisTrendConfig:
    hold_s: float = 1800.0  # a fan spinning up or a supply warming after a load step settles
    fan_ratio: float = 0.85  # of the peers' median speed
    psu_delta_c: float = 8.0  # over the peers' median temperature
    min_peers: int = 1


def _peer_median(values: F64, nodes: npt.NDArray[np.int64],
                 peer: npt.NDArray[np.bool_]) -> tuple[F64, F64]:
    """[entity, step] the median of the other entities of the same node where `peer` holds,
    and how many there were (NaN median where none). Vectorised: the node's entities on a
    grid [node, position, step], every position's peers gathered at once and sorted (a chassis
    holds a handful of fans or supplies), the median read from the sorted valid ones."""
    out: F64 = np.full(values.shape, np.nan)
    count: F64 = np.zeros(values.shape)
    idx = np.flatnonzero(nodes >= 0)
    if not len(idx) or not values.shape[1]:
        return out, count
    order = idx[np.argsort(nodes[idx], kind="stable")]
    _, start, sizes = np.unique(nodes[order], return_index=True, return_counts=True)
    k = int(sizes.max())
    if k < 2:
        return out, count
    pos = np.arange(len(order)) - np.repeat(start, sizes)
    row = np.repeat(np.arange(len(sizes)), sizes)
    grid = np.full((len(sizes), k, values.shape[1]), np.nan)
    grid[row, pos] = np.where(peer[order], values[order], np.nan)
    others = np.array([[i for i in range(k) if i != j] for j in range(k)])  # [k, k - 1]
    # [entity, k - 1, step]: each entity's node-mates, sorted with the NaNs last.
    peers = np.sort(grid[row[:, None], others[pos]], axis=1)
    n = (~np.isnan(peers)).sum(axis=1)  # [entity, step]
    lo = np.take_along_axis(peers, np.maximum(n - 1, 0)[:, None, :] // 2, axis=1)[:, 0]
    hi = np.take_along_axis(peers, (n // 2)[:, None, :], axis=1)[:, 0]
    out[order] = np.where(n > 0, (lo + hi) / 2, np.nan)
    count[order] = n
    return out, count


class ChassisTrends:
    def __init__(self, config: ChassisTrendConfig | None = None) -> None:
        self.c = config or ChassisTrendConfig()

    def findings(self, psu: ScopeView, fan: ScopeView) -> list[Finding]:
        return [self._fan(fan), self._psu(psu)]

    def _win(self, v: ScopeView, metric: str) -> F64:
        """The hold's span at the finest resolution that covers it (raw at coarse steps, the
        minute tier at 5-s steps)."""
        return recent(v, metric, self.c.hold_s)[0].astype(np.float64)

    def _fan(self, f: ScopeView) -> Finding:
        c = self.c
        rpm, health = self._win(f, "fan_rpm"), self._win(f, "fan_health")
        lcr = f.latest("fan_rpm_lower_critical")
        nodes = np.asarray(f.node_of[: len(f)], np.int64)
        with np.errstate(invalid="ignore"):
            ok = ~(health >= CRITICAL) & ~(rpm < lcr[:, None]) & (rpm > 0)
        med, count = _peer_median(rpm, nodes, ok)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = rpm / med
            seen = ~np.isnan(ratio) & (count >= c.min_peers)
            slow = seen & ok & (ratio < c.fan_ratio)
        held = sustained(slow, seen)
        value: F64 = ratio[:, -1] if ratio.shape[1] else np.full(len(f), np.nan)
        return Finding("fan_slowing", Scope.FAN, np.where(held, WATCH_RISK, 0.0).astype(
            np.float32), value, c.fan_ratio,
            f"fan speed as a share of its chassis peers' median, below {c.fan_ratio:g} for "
            f"{c.hold_s / 60:g} min (a wearing fan slows before it stalls)")

    def _psu(self, p: ScopeView) -> Finding:
        c = self.c
        temp, state = self._win(p, "psu_temp_c"), self._win(p, "psu_state")
        health = self._win(p, "psu_health")
        nodes = np.asarray(p.node_of[: len(p)], np.int64)
        with np.errstate(invalid="ignore"):
            delivers = ((state == ENABLED) | np.isnan(state)) & ~(health >= CRITICAL)
        med, count = _peer_median(temp, nodes, delivers)
        with np.errstate(invalid="ignore"):
            delta = temp - med
            seen = ~np.isnan(delta) & (count >= c.min_peers) & delivers
            hot = seen & (delta > c.psu_delta_c)
            warned = health[:, -2:] == WARNING
        held = sustained(hot, seen) | (warned.all(axis=1) & (warned.shape[1] == 2))
        value: F64 = delta[:, -1] if delta.shape[1] else np.full(len(p), np.nan)
        return Finding("psu_running_hot", Scope.PSU, np.where(held, WATCH_RISK, 0.0).astype(
            np.float32), value, c.psu_delta_c,
            f"supply temperature over its delivering peers' median (degC), above "
            f"{c.psu_delta_c:g} for {c.hold_s / 60:g} min, or Warning health (predictive "
            f"failure)")
