"""Alerts about nodes and the fleet rather than one GPU, link or port:

- `NodeNoData` (level 2): every entity of a node has stale telemetry. The node-level alert
  mutes its GPUs' alerts (inhibition), and no action is ever taken on stale data.
- `GpuMissing` (level 2): a GPU stopped reporting while other entities of its node still
  report (gpud checks the expected GPU count the same way). A GPU that falls off the bus goes
  silent; freezing its level on stale data alone would hide exactly that failure.
- `FleetStorm` (level 3): at least `fraction` of the nodes (and `min_nodes`) entered level 2
  or above within `window_s`. Something fleet-wide (a bad driver roll-out, a cooling or fabric
  incident) is more likely than that many nodes failing at once: one page for the fleet mutes
  the per-node pages, and the remediation breaker trips so nothing is drained automatically.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from service.notify.config import StormSettings
from service.stages.alert_machine import Transition

NODATA = "NodeNoData"
MISSING = "GpuMissing"
STORM = "FleetStorm"
FLEET = "fleet"
DERIVED = (NODATA, MISSING, STORM)
NODATA_LEVEL = MISSING_LEVEL = 2  # a human looks; no job moves on missing data alone
# Across shards: this shard's (live, hot) nodes in, the fleet's (live, hot) out; None where
# this replica does not judge the storm (service.cluster.census).
FleetWide = Callable[[int, int], tuple[int, int] | None]


class FleetAlerts:
    def __init__(self, storm: StormSettings, grace_s: float = 60.0) -> None:
        self.storm = storm
        # No data alert is raised until the service has watched for this long: after a start
        # or restart everything looks stale until the first rounds arrive.
        self.grace_s = grace_s
        self.first: float | None = None
        self.nodata: dict[str, int] = {}  # node -> level of its open NodeNoData alert
        self.missing: dict[str, tuple[str, int]] = {}  # GPU key -> (node, level) GpuMissing
        self.entered: dict[str, float] = {}  # node -> when it last entered level >= 2
        self.storm_level = 0

    def reset(self) -> None:
        """Forget every fleet-level alert (a replica taking over restores them)."""
        self.first = None
        self.nodata, self.missing, self.entered = {}, {}, {}
        self.storm_level = 0

    def forget_nodes(self, nodes: Collection[str]) -> None:
        """Drop what is known of `nodes` (handed to another shard) without resolving their
        alerts: the new owner restores and continues them."""
        for n in nodes:
            self.nodata.pop(n, None)
            self.entered.pop(n, None)
        self.missing = {k: v for k, v in self.missing.items() if v[0] not in nodes}

    def nodes(self) -> set[str]:
        """Nodes with fleet-level state here."""
        return {*self.nodata, *self.entered, *(node for node, _ in self.missing.values())}

    def restore(self, alertname: str, node: str, level: int, entity: str = "") -> None:
        if alertname == NODATA:
            self.nodata[node] = level
        elif alertname == MISSING:
            self.missing[entity] = (node, level)
        elif alertname == STORM:
            self.storm_level = level

    def step(self, now: float, nodes: list[str], node_stale: npt.NDArray[np.bool_],
             node_level: npt.NDArray[np.int8], raised: Mapping[str, int],
             missing: Mapping[str, tuple[int, str]] | None = None,
             fleet_size: int | None = None, fleet: FleetWide | None = None
             ) -> list[Transition]:
        """`node_stale`: every entity of the node is stale; `node_level`: the highest level of
        its entities; `raised`: nodes whose level rose to 2 or above this tick; `missing`:
        GPUs (key -> slot, node) that are stale while their node still reports; `fleet_size`:
        the nodes a storm's fraction is of (default: every node named). `fleet`, across
        shards: given this shard's (live, hot) nodes, the fleet's totals, or None where this
        replica does not judge the storm (service.cluster.census; alone, the local counts)."""
        if self.first is None:
            self.first = now
        watching = now - self.first >= self.grace_s
        out: list[Transition] = []
        pos = {name: i for i, name in enumerate(nodes)}
        for i in np.flatnonzero(node_stale).tolist() if watching else []:
            name = nodes[i]
            if self.nodata.get(name, 0) == 0:
                self.nodata[name] = NODATA_LEVEL
                out.append(Transition(Scope.NODE, i, name, name, 0, NODATA_LEVEL, now, 1.0,
                                      alertname=NODATA))
        stale = {nodes[i] for i in np.flatnonzero(node_stale).tolist()}
        for name in [n for n, lv in self.nodata.items() if lv and n not in stale]:
            self.nodata[name] = 0
            slot = pos.get(name, -1)
            out.append(Transition(Scope.NODE, slot, name, name, NODATA_LEVEL, 0, now, 0.0,
                                  alertname=NODATA))
        out += self._missing(now, missing or {}, watching)
        for name, lv in raised.items():
            if lv >= 2:
                self.entered[name] = now
        s = self.storm
        self.entered = {n: t for n, t in self.entered.items() if now - t <= s.window_s}
        size = max(fleet_size if fleet_size is not None else len(nodes), 1)
        hot = sum(1 for n in self.entered if n in pos and node_level[pos[n]] >= 2)
        if fleet is not None:
            totals = fleet(size, hot)
            if totals is None:
                return out  # another replica judges the fleet's storm
            size, hot = max(totals[0], 1), totals[1]
        out += self._storm(now, size, hot)
        return out

    def judge(self, now: float, fleet: int, hot: int) -> list[Transition]:
        """The storm judged on the fleet's totals across shards (the leader's part)."""
        return self._storm(now, max(fleet, 1), hot)

    def _storm(self, now: float, fleet: int, hot: int) -> list[Transition]:
        s = self.storm
        out: list[Transition] = []
        need = max(s.min_nodes, int(np.ceil(s.fraction * fleet)))
        share = hot / fleet
        if self.storm_level == 0 and hot >= need:
            self.storm_level = 3
            out.append(Transition(Scope.NODE, -1, FLEET, "*", 0, 3, now, share, hard=False,
                                  alertname=STORM))
        elif self.storm_level and hot < need // 2 + 1 and not self._recent(now):
            self.storm_level = 0
            out.append(Transition(Scope.NODE, -1, FLEET, "*", 3, 0, now, share,
                                  alertname=STORM))
        return out

    def levels(self) -> dict[str, int]:
        """Open derived alerts' levels by entity key (a node, a GPU, the fleet)."""
        out = {node: lv for node, lv in self.nodata.items() if lv}
        out.update((key, lv) for key, (_, lv) in self.missing.items())
        if self.storm_level:
            out[FLEET] = self.storm_level
        return out

    def _missing(self, now: float, missing: Mapping[str, tuple[int, str]],
                 watching: bool) -> list[Transition]:
        out = []
        for key, (slot, node) in missing.items() if watching else ():
            if key not in self.missing:
                self.missing[key] = (node, MISSING_LEVEL)
                out.append(Transition(Scope.GPU, slot, key, node, 0, MISSING_LEVEL, now, 1.0,
                                      alertname=MISSING))
        for key in [k for k in self.missing if k not in missing]:
            node, level = self.missing.pop(key)
            slot = -1  # reporting again (or its whole node is silent: NodeNoData says so)
            out.append(Transition(Scope.GPU, slot, key, node, level, 0, now, 0.0,
                                  alertname=MISSING))
        return out

    def _recent(self, now: float) -> bool:
        """A storm ends only once no node has entered level 2 for half the window."""
        return any(now - t < self.storm.window_s / 2 for t in self.entered.values())
