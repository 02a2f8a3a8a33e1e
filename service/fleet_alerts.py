"""Alerts about nodes and the fleet rather than one GPU, link or port:

- `NodeNoData` (level 2): every entity of a node has stale telemetry. The node-level alert
  mutes its GPUs' alerts (inhibition), and no action is ever taken on stale data.
- `FleetStorm` (level 3): at least `fraction` of the nodes (and `min_nodes`) entered level 2
  or above within `window_s`. Something fleet-wide (a bad driver roll-out, a cooling or fabric
  incident) is more likely than that many nodes failing at once: one page for the fleet mutes
  the per-node pages, and the remediation breaker trips so nothing is drained automatically.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from service.alerting import Transition
from service.notify.config import StormSettings

NODATA = "NodeNoData"
STORM = "FleetStorm"
FLEET = "fleet"


class FleetAlerts:
    def __init__(self, storm: StormSettings) -> None:
        self.storm = storm
        self.nodata: dict[str, int] = {}  # node -> level of its open NodeNoData alert
        self.entered: dict[str, float] = {}  # node -> when it last entered level >= 2
        self.storm_level = 0

    def restore(self, alertname: str, node: str, level: int) -> None:
        if alertname == NODATA:
            self.nodata[node] = level
        elif alertname == STORM:
            self.storm_level = level

    def step(self, now: float, nodes: list[str], node_stale: npt.NDArray[np.bool_],
             node_level: npt.NDArray[np.int8], raised: Mapping[str, int]) -> list[Transition]:
        """`node_stale`: every entity of the node is stale; `node_level`: the highest level of
        its entities; `raised`: nodes whose level rose to 2 or above this tick."""
        out: list[Transition] = []
        pos = {name: i for i, name in enumerate(nodes)}
        for i in np.flatnonzero(node_stale).tolist():
            name = nodes[i]
            if self.nodata.get(name, 0) == 0:
                self.nodata[name] = 2
                out.append(Transition(Scope.NODE, i, name, name, 0, 2, now, 1.0,
                                      alertname=NODATA))
        stale = {nodes[i] for i in np.flatnonzero(node_stale).tolist()}
        for name in [n for n, lv in self.nodata.items() if lv and n not in stale]:
            self.nodata[name] = 0
            slot = pos.get(name, -1)
            out.append(Transition(Scope.NODE, slot, name, name, 2, 0, now, 0.0,
                                  alertname=NODATA))
        for name, lv in raised.items():
            if lv >= 2:
                self.entered[name] = now
        s = self.storm
        self.entered = {n: t for n, t in self.entered.items() if now - t <= s.window_s}
        need = max(s.min_nodes, int(np.ceil(s.fraction * max(len(nodes), 1))))
        hot = sum(1 for n in self.entered if n in pos and node_level[pos[n]] >= 2)
        share = hot / max(len(nodes), 1)
        if self.storm_level == 0 and hot >= need:
            self.storm_level = 3
            out.append(Transition(Scope.NODE, -1, FLEET, "*", 0, 3, now, share, hard=False,
                                  alertname=STORM))
        elif self.storm_level and hot < need // 2 + 1 and not self._recent(now):
            self.storm_level = 0
            out.append(Transition(Scope.NODE, -1, FLEET, "*", 3, 0, now, share,
                                  alertname=STORM))
        return out

    def _recent(self, now: float) -> bool:
        """A storm ends only once no node has entered level 2 for half the window."""
        return any(now - t < self.storm.window_s / 2 for t in self.entered.values())
