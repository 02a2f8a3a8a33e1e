"""Connects the remediation controller to the pipeline: a level-3 alert becomes a migration
request, a storm trips the breaker, and the controller's last guard re-checks the alert on
the latest tick's state (still level 3, fresh telemetry, the node still reporting)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from collectors.catalog import Scope
from service.notify.refs import summary_of
from service.remediation.actions import ActionStore, AuditEntry
from service.remediation.config import RemediationSettings
from service.remediation.controller import MigrationRequest, RemediationController
from service.remediation.hooks import build_hook
from service.remediation.hooks.base import Hook
from service.stages.alert_machine import Transition
from service.stages.alert_store import Alert, AlertStore
from service.stages.fleet_alerts import FLEET, NODATA, STORM


class AlertRecheck:
    """The controller's `Recheck` over the alert store the pipeline keeps current."""

    def __init__(self, alerts: AlertStore) -> None:
        self.alerts = alerts

    def recheck(self, node: str, fingerprint: str, now: float) -> str | None:
        mine = self.alerts.find(state="firing", node=node, limit=10_000)
        if any(a.name == NODATA for a in mine):
            return "no data from the node"
        hit = next((a for a in mine if a.fingerprint == fingerprint), None)
        if hit is None:
            return "the alert has resolved"
        # A hard fault's evidence is the event itself, and a GPU off the bus is silent by
        # nature: with the node still reporting (no NodeNoData above) it is acted on.
        if hit.stale and not hit.corroborated:
            return "the entity's telemetry is stale"
        if hit.level < 3:
            return f"the alert fell to level {hit.level}"
        return None


class Remediator:
    """The pipeline's `Remediation`: what the tick asks of the controller."""

    def __init__(self, controller: RemediationController) -> None:
        self.controller = controller
        last = controller.store.audit(after_seq=0, limit=1_000_000)
        self._seq = last[-1].seq if last else 0  # only what happens from now on is exported

    def audit(self) -> list[AuditEntry]:
        """Audit rows written since the last call (the InfluxDB recorder annotates them)."""
        rows = self.controller.store.audit(after_seq=self._seq, limit=10_000)
        if rows:
            self._seq = rows[-1].seq
        return rows

    def migrate(self, alert: Alert, now: float) -> None:
        self.controller.request(MigrationRequest(
            alert.node, alert.id, alert.fingerprint, alert.level, alert.risk,
            summary_of(alert), now), now)

    def trip(self, reason: str, now: float) -> None:
        self.controller.breaker.trip(reason, now)

    def step(self, now: float) -> None:
        self.controller.step(now)

    def close(self) -> None:
        self.controller.close()


class Acts(Protocol):
    """What a tick's alert changes ask of remediation (service.tick.Remediation)."""

    def migrate(self, alert: Alert, now: float) -> None: ...

    def trip(self, reason: str, now: float) -> None: ...

    def step(self, now: float) -> None: ...

    def audit(self) -> list[AuditEntry]: ...


def remediate(rem: Acts, changed: Sequence[tuple[Transition, Alert]], now: float,
              leading: bool = True) -> list[AuditEntry]:
    """Level 3 asks the controller to migrate jobs off the node when the alert is
    corroborated (a hard rule or a confident model), not flapping and not on stale data.
    A storm trips the breaker instead. The controller's guards decide the rest. A shard's
    writer records the request in the shared state; only the leader starts actions.
    Returns the audit rows written since the last call."""
    # The breaker trips before any request of the same tick can start a drain.
    for t, _ in changed:
        if t.alertname == STORM and t.new == 3:
            rem.trip(f"fleet-wide alert storm: {t.risk:.0%} of nodes at level 2+", now)
    for t, a in changed:
        # A node's own risk (a host memory UE, a fatal SXid) drains as a GPU's does; its
        # no-data alert never does.
        if (t.new == 3 and t.old < 3 and not (t.scope is Scope.NODE and t.derived)
                and t.corroborated
                and not t.flapping and t.entity != FLEET):
            rem.migrate(a, now)
    if leading:
        rem.step(now)
    return rem.audit()


def build_remediation(settings: RemediationSettings, alerts: AlertStore, db: str,
                      fleet_size: Callable[[], int], *, hook: Hook | None = None,
                      now: float | None = None, reconcile: bool = True) -> Remediator | None:
    """None when remediation is off. `reconcile`: settle the actions a restart interrupted
    now (one process alone); a replica leaves that to when it leads."""
    if settings.mode == "off":
        return None
    chosen = hook if hook is not None else build_hook(settings.hook, settings.hook_config)
    controller = RemediationController(ActionStore(db), chosen, settings, AlertRecheck(alerts),
                                       fleet_size)
    if reconcile:
        controller.reconcile(time.time() if now is None else now)
    return Remediator(controller)
