"""A node as the read endpoints show it now, worked out one way so the fleet grid, the node list
and a node's page read the same numbers: its risk, and whether its telemetry went silent.

Risk is the scoring tick's, except where an entity's telemetry went stale while its alert
fires. The alert machine freezes a stale entity's level (stale data neither raises nor
resolves), but nothing scores an entity that sends nothing, so its tick risk falls to zero:
a GPU that fell off the bus after an Xid 79 read "risk 0.00 · 3 page". Such an entity keeps
the risk its alert holds, as long as the alert is held. Node and fleet alerts (no data, a
storm) are left out: their "risk" is a share or a flag, not a failure's.

Silent: every entity of a node (or one GPU) stale as of the last tick, with the newest sample
it sent, so a page can say "no data since ..."; a node with GPUs, links or ports is silent when
those are, whatever its BMC still says of its supplies and fans (as NodeNoData judges it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from service.pipeline import Pipeline
from service.stages.alert_store import Alert
from service.stages.fleet_alerts import DERIVED
from service.stages.node_rollup import IN_BAND, quiet_nodes
from service.stages.scoring import SCOPES, RiskState


class NodeState:
    """Built under the pipeline lock from the tick's risk and the open alerts."""

    def __init__(self, p: Pipeline, risk: RiskState | None, open_alerts: Iterable[Alert]) -> None:
        # By name once: RiskState.node looks a name up in a list, per call.
        self._tick: dict[str, float] = ({} if risk is None else
                                        dict(zip(risk.node_names, risk.nodes.tolist(),
                                                 strict=False)))
        self.held: dict[str, float] = {}  # entity key -> risk its alert holds on stale data
        node_held: dict[str, float] = defaultdict(float)
        for a in open_alerts:
            if a.stale and a.name not in DERIVED and a.state == "firing":
                self.held[a.entity] = max(self.held.get(a.entity, 0.0), a.risk)
                node_held[a.node] = max(node_held[a.node], a.risk)
        self._node_held = dict(node_held)
        self._stale: dict[Scope, npt.NDArray[np.bool_]] = {}
        names = p.store.registry.nodes
        fresh = np.zeros(len(names))
        seen = np.zeros(len(names))
        fresh_in_band = np.zeros(len(names))
        seen_in_band = np.zeros(len(names))
        for scope in SCOPES:
            w = p.store[scope]
            stale = p.machine.stale(scope)
            n = min(len(w), len(stale))
            self._stale[scope] = stale[:n]
            nodes = w.node_of[:n]
            ok = nodes >= 0
            f = np.bincount(nodes[ok], weights=~stale[:n][ok], minlength=len(names))
            s = np.bincount(nodes[ok], minlength=len(names))
            fresh += f
            seen += s
            if scope in IN_BAND:
                fresh_in_band += f
                seen_in_band += s
        silent = quiet_nodes(fresh, seen, fresh_in_band, seen_in_band)
        last = np.full(len(names), -np.inf)
        for scope in SCOPES if silent.any() else ():
            w = p.store[scope]
            n = len(self._stale[scope])
            nodes = w.node_of[:n]
            mine = (nodes >= 0) & silent[np.maximum(nodes, 0)]
            if mine.any():
                np.maximum.at(last, nodes[mine], _newest(w.last_ts[:n][mine]))
        self._silent = {names[i]: float(last[i]) if np.isfinite(last[i]) else None
                        for i in np.flatnonzero(silent).tolist()}
        self._p = p

    def node_risk(self, node: str) -> float | None:
        tick = self._tick.get(node)
        held = self._node_held.get(node)
        if held is None:
            return tick
        return held if tick is None else max(tick, held)

    def entity_risk(self, key: str, tick: float | None) -> float | None:
        held = self.held.get(key)
        if held is None:
            return tick
        return held if tick is None else max(tick, held)

    def node_silent(self, node: str) -> tuple[bool, float | None]:
        """Whether every entity of the node is stale, and its newest sample's time."""
        if node not in self._silent:
            return False, None
        return True, self._silent[node]

    def silent_since(self, scope: Scope, slot: int) -> float | None:
        """The newest sample of a stale entity; None while it reports (or never did)."""
        stale = self._stale[scope]
        if slot >= len(stale) or not stale[slot]:
            return None
        newest = _newest(self._p.store[scope].last_ts[slot: slot + 1])
        return float(newest[0]) if np.isfinite(newest[0]) else None


def _newest(last_ts: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Per row, the newest sample time over its metrics; -inf for a row with none."""
    if not last_ts.shape[1]:
        return np.full(len(last_ts), -np.inf)
    out: npt.NDArray[np.float64] = np.fmax.reduce(last_ts, axis=1)
    return np.where(np.isnan(out), -np.inf, out)
