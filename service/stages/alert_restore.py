"""The round's alert state rebuilt from the alert store, as a restart would: the open alerts
back into the alert machine (per entity) and the fleet alerts (NodeNoData, GpuMissing, the
storm and what it says). At a start, and when a replica takes a role over or gains nodes
(service.cluster.replica says which alerts are its own)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from collectors.catalog import Scope
from collectors.frames import Entity
from service.stages.alert_machine import AlertMachine
from service.stages.alert_store import ALERTNAMES, AlertStore
from service.stages.fleet_alerts import MISSING, STORM, FleetAlerts
from service.stages.storm_report import StormReport, storm_of
from service.stages.windows import WindowStore

log = logging.getLogger(__name__)


class AlertRestore:
    def __init__(self, alerts: AlertStore, store: WindowStore, machine: AlertMachine,
                 fleet: FleetAlerts, report: StormReport) -> None:
        self.alerts, self.store, self.machine = alerts, store, machine
        self.fleet, self.report = fleet, report

    def reset(self) -> None:
        """Forget every level and fleet alert (before restoring them all)."""
        self.machine.reset()
        self.fleet.reset()

    def restore(self, only: Callable[[str], bool] | None = None) -> None:
        """Open alerts from the shared alert store into the alert machine; `only`: of the
        nodes it accepts (those this shard owns, or has just gained)."""
        for a in self.alerts.open_alerts():
            if only is not None and not only(a.node):
                continue
            # Node and fleet alerts (no data, a storm) and GpuMissing are the fleet's; a node's
            # own risk alert (NodeAtRisk) is its node entity's level, as a GPU's is.
            if (a.scope is Scope.NODE and a.name != ALERTNAMES[Scope.NODE]) \
                    or a.alertname == MISSING:
                self.fleet.restore(a.name, a.node, a.level, a.entity)
                if a.name == STORM:
                    self.report.restore(a)
                continue
            if a.level >= 2:  # a storm open across a restart still counts its nodes
                self.fleet.restore_entry(a.node, a.started_at)
            try:
                entity = Entity.parse(a.entity)
            except ValueError as exc:  # stored before names were validated at ingest
                log.warning("open alert %d is for %r, which is no valid entity (%s): it is "
                            "not restored; it stays in the alert history as it was",
                            a.id, a.entity, exc)
                continue
            # Known since the alert's last update: forgotten like any entity if it stays silent.
            slot = self.store[entity.scope].slots_for_entity(entity, self.store.registry,
                                                             now=a.updated_at)
            self.machine.restore(entity.scope, slot, a.level, since=a.updated_at,
                                 flapping=a.flapping)

    def storm(self) -> None:
        """The fleet's storm from the shared state alone (the leader judges it across
        shards): its level and what it says, or none."""
        storm = storm_of(self.alerts.open_alerts())
        self.fleet.storm_level = storm.level if storm is not None else 0
        if storm is not None:
            self.report.restore(storm)
        else:
            self.report.closed()
