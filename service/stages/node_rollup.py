"""What the fleet alerts (service.stages.fleet_alerts) are stepped on each tick, rolled up from
the entities: per node, whether any of its entities was heard within the stale limit, its
highest level, its first arrival and its longest-reporting entity's span of arrivals (its
history, FleetHistory); the GPUs silent while their node reports (GpuMissing), less those
too young to notify; and the nodes whose data arrived behind the live edge since the last
tick. Also the explanation of a NodeNoData or GpuMissing alert: silent since when."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from collectors.frames import Batch
from models.detectors.findings import Signal
from service.stages.alert_machine import AlertMachine, Transition
from service.stages.fleet_alerts import MISSING, NODATA, FleetAlerts, FleetWide, silence_signal
from service.stages.scoring import SCOPES, RiskState
from service.stages.windows import WindowStore

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
# What the node itself sends (its agent): GPUs, links, ports. A node's chassis (supplies, fans,
# its own sensors) may come from a BMC poller that keeps answering while the host is down, so it
# tells whether the node is silent only where the node has no entity of these.
IN_BAND = (Scope.GPU, Scope.NVLINK, Scope.IB_PORT)


def quiet_nodes(heard: F64, seen: F64, heard_in_band: F64, seen_in_band: F64) -> B:
    """Nodes none of whose entities was heard: of its in-band ones where it has any (a host
    whose agent went silent while its BMC still answers is silent), else of all of them."""
    out: B = np.where(seen_in_band > 0, heard_in_band == 0, (seen > 0) & (heard == 0))
    return out


class FleetSize(Protocol):
    """The fleet the storm is a share of (service.tick.FleetCount): set from the roll-up."""

    live: int

    def size(self) -> int: ...


@dataclass(slots=True)
class Nodes:
    """Per node of the tick's risk (`RiskState.node_names`), over its entities."""

    heard: F64  # entities not silent
    seen: F64  # entities
    level: npt.NDArray[np.int8]  # the highest level
    born: F64  # the first arrival (NaN: none)
    span: F64  # the longest-reporting entity's span of arrivals (NaN: none)
    silent: dict[Scope, B]  # per scope, which entities are silent
    heard_in_band: F64  # ... of them the node's GPUs, links and ports (IN_BAND)
    seen_in_band: F64

    @property
    def quiet(self) -> B:
        """Nodes none of whose entities was heard within the stale limit (quiet_nodes)."""
        return quiet_nodes(self.heard, self.seen, self.heard_in_band, self.seen_in_band)


class NodeRollup:
    def __init__(self, fleet: FleetAlerts, store: WindowStore, machine: AlertMachine,
                 count: FleetSize) -> None:
        self.fleet, self.store, self.machine, self.count = fleet, store, machine, count
        # node -> when its data last arrived behind the live edge (a backfill, a spool drain):
        # handed to the fleet alerts at the next tick.
        self._behind: dict[str, float] = {}

    def stale_after(self) -> float:
        """Never call data stale before three of its steps are missing (replays at 5 min)."""
        return max(self.machine.policy.stale_after_s, 3 * self.store.config.step_s)

    def note_behind(self, clean: Batch, now: float) -> None:
        """Nodes whose accepted rows or events are older than the stale limit: their data
        arrives behind the live edge (an agent's backfill, a relay draining its spool). Such a
        node is reporting, not silent, and its level changes are no storm entries."""
        edge = now - self.stale_after()
        for f in clean.frames.values():
            late = f.ts < edge
            if late.any():
                table = f.entities
                for r in np.unique(f.rows[late]).tolist():
                    self._behind[table[r].node] = now
        ev = clean.events
        for key, ts in zip(ev.keys, ev.ts, strict=True):
            if ts < edge:
                self._behind[key.split(":", 1)[0]] = now

    def step(self, risk: RiskState, entity_ts: Sequence[Transition], now: float,
             wide: FleetWide | None) -> list[Transition]:
        """Step the fleet alerts after the alert machine stepped every scope (`entity_ts`:
        its transitions); sets the live count. `wide`: the census across shards, if any."""
        behind, self._behind = self._behind, {}
        nodes = self.roll_up(risk, now)
        # Storm entries come from entities' own levels, never a derived (no-data) alert.
        raised = {t.node: t.new for t in entity_ts
                  if t.new >= 2 and t.new > t.old and not t.derived}
        step_s = self.store.config.step_s
        history = self.fleet.history
        trusted = history.trusted(risk.node_names)
        counted = history.counted(now, nodes.born, nodes.span, step_s, trusted)
        self.count.live = int(np.count_nonzero((nodes.heard > 0) & counted))
        missing, young = self._missing(risk, nodes, trusted)
        return self.fleet.step(now, risk.node_names, nodes.quiet, nodes.level, raised,
                               missing, fleet_size=self.count.size(), fleet=wide,
                               behind=behind,
                               notifiable=history.notifiable(nodes.span, step_s) | trusted,
                               young=young)

    def roll_up(self, risk: RiskState, now: float) -> Nodes:
        stale_after = self.stale_after()
        n_nodes = len(risk.node_names)
        out = Nodes(np.zeros(n_nodes), np.zeros(n_nodes), np.zeros(n_nodes, np.int8),
                    np.full(n_nodes, np.nan), np.full(n_nodes, np.nan), {}, np.zeros(n_nodes),
                    np.zeros(n_nodes))
        for scope in SCOPES:
            sw = self.store[scope]
            n = len(risk.scopes[scope].risk)
            nodes = sw.node_of[:n]
            ok = nodes >= 0
            # Stale (the newest sample is old: levels freeze) is not silent (no sample row
            # arrived for the stale limit): a node sending old data (a backfill) is behind
            # (note_behind), not gone.
            quiet = self.machine.stale(scope)[:n] & ~(now - sw.heard[:n] <= stale_after)
            out.silent[scope] = quiet
            heard = np.bincount(nodes[ok], weights=~quiet[ok], minlength=n_nodes)[:n_nodes]
            seen = np.bincount(nodes[ok], minlength=n_nodes)[:n_nodes]
            out.heard += heard
            out.seen += seen
            if scope in IN_BAND:
                out.heard_in_band += heard
                out.seen_in_band += seen
            np.maximum.at(out.level, nodes[ok], self.machine.level(scope)[:n][ok])
            np.fmin.at(out.born, nodes[ok], sw.born[:n][ok])
            np.fmax.at(out.span, nodes[ok], (sw.touched[:n] - sw.born[:n])[ok])
        return out

    def _missing(self, risk: RiskState, nodes: Nodes, trusted: B
                 ) -> tuple[dict[str, tuple[int, str]], set[str]]:
        """GPUs silent while other GPUs of their node report (key -> slot, node), and those of
        them too young to notify. All of a node's GPUs silent is its GPU collector or driver
        (collector_up, NodeNoData say so), not one GPU."""
        n_nodes = len(risk.node_names)
        gpus = self.store[Scope.GPU]
        n = len(risk.scopes[Scope.GPU].risk)
        gnode = gpus.node_of[:n]
        gsilent = nodes.silent[Scope.GPU]
        ok = gnode >= 0
        heard_gpus = np.bincount(gnode[ok], weights=~gsilent[ok], minlength=n_nodes)[:n_nodes]
        lost = np.flatnonzero(gsilent & ok & (heard_gpus[np.maximum(gnode, 0)] > 0))
        missing = {gpus.entities[i].key: (i, gpus.entities[i].node) for i in lost.tolist()}
        # A GPU's own history, or its node's replayed one if the GPU was part of it (first
        # heard with its node): a GPU index seen once under a real node never notifies.
        history = self.fleet.history
        first_of_node = nodes.born[gnode[lost]]
        replayed = np.fromiter((gpus.entities[i].key in history.vouched_gpus
                                for i in lost.tolist()), bool, len(lost))
        step_s = self.store.config.step_s
        young = lost[~(history.notifiable(gpus.touched[lost] - gpus.born[lost], step_s)
                       | (trusted[gnode[lost]] & (gpus.born[lost] <= first_of_node + 1e-6))
                       | replayed)]
        return missing, {gpus.entities[i].key for i in young.tolist()}

    def silence(self, t: Transition, now: float) -> Signal:
        """A NodeNoData or GpuMissing alert's explanation: silent for how long, last seen
        (when anything of it last arrived, or its newest sample's time if later)."""
        if t.alertname == MISSING:
            sw = self.store[Scope.GPU]
            rows = np.array([t.slot]) if 0 <= t.slot < len(sw.entities) else np.zeros(0, int)
            last = self._last_heard(Scope.GPU, rows)
            return silence_signal(MISSING, t.entity, t.node, now, last, self.stale_after())
        last = -np.inf
        for scope in SCOPES:
            sw = self.store[scope]
            n = len(sw.entities)
            last = max(last, self._last_heard(scope, np.flatnonzero(sw.node_of[:n] == t.slot)))
        return silence_signal(NODATA, t.node, t.node, now,
                              last if np.isfinite(last) else float("nan"), self.stale_after())

    def _last_heard(self, scope: Scope, rows: npt.NDArray[np.intp]) -> float:
        sw = self.store[scope]
        got = np.concatenate([sw.heard[rows], sw.last_ts[rows].ravel()])
        got = got[np.isfinite(got)]
        return float(got.max()) if len(got) else float("nan")
