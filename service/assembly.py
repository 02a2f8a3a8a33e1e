"""The composition root: every part of a pipeline built from the settings, in one place
(`service.pipeline.build_pipeline` hands them to a Pipeline).

What a caller chooses beyond the settings is named in a `Wiring`, never guessed from other
arguments: the live service takes the defaults (everything the settings ask for); a replay,
the evaluator and tests say what they leave out. `Pipeline` receives the built `Parts` and only
orchestrates; the API reads the typed parts (the controller, the model slot), never probes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from models.detectors.chassis import ChassisRules
from models.detectors.dynamic import DynamicThresholds
from models.detectors.findings import Detector
from models.detectors.hard import HardRules
from models.predictor.interval import default_calibration
from service.cluster.census import Census
from service.cluster.members import Members, Membership
from service.cluster.roles import SOLE, LeasedRoles, Roles, default_replica_id
from service.history.sinks import Sink, SQLiteSink
from service.learning.autolabel import AutoLabeller
from service.learning.model_registry import ModelRegistry
from service.learning.model_roles import ModelRoles
from service.learning.verdicts import VerdictStore
from service.notify.build import Notification, build_notification
from service.notify.message import Notifier
from service.remediation.controller import RemediationController
from service.remediation.wiring import Remediator, build_remediation
from service.settings import Settings
from service.stages.alert_machine import AlertMachine
from service.stages.alert_store import AlertStore
from service.stages.fleet_alerts import FleetAlerts
from service.stages.gpu_identity import GpuIdentities
from service.stages.ingest import EventLog, Ingestor
from service.stages.label_store import LabelStore
from service.stages.scoring import Scorer
from service.stages.windows import WindowStore
from service.storage.postgres_db import is_postgres
from service.tick import FleetCount, Remediation, TickObserver

if TYPE_CHECKING:
    from models.predictor.slot import ModelSlot
    from service.stages.window_refit import WindowRefit


@dataclass(frozen=True, slots=True)
class Wiring:
    """A pipeline's choices beyond its settings. The defaults are the live service;
    `Wiring.offline()` is a replay's, an evaluation's or a test's."""

    # Where the shared state lives (alerts, notification log, actions, ...): a SQLite file or
    # a PostgreSQL DSN; None: the settings' (storage.state_target).
    alert_db: str | None = None
    # Keep samples (if write_samples) and, without InfluxDB, risk history in the settings'
    # SQLite file.
    sample_history: bool = True
    influxdb: bool = True  # the InfluxDB sink and tick recorder, when the settings name one
    sinks: Sequence[Sink] = ()  # more sinks, after those above
    observers: Sequence[TickObserver] = ()  # more tick observers
    # None: the configured receivers; empty: notification off; else they replace configured
    # receivers by name (the `record` receiver is always there).
    notifiers: Sequence[Notifier] | None = None
    notify_background: bool = True  # False: messages are sent inside the tick (timelines)
    remediate: bool = True  # build the controller the settings ask for (dry_run by default)
    remediation: Remediation | None = None  # given instead of built
    detectors: list[Detector] | None = None  # None: rules, thresholds and the model slot
    # Read another pipeline's windows and events (several detector sets judged on one
    # ingest, as the evaluator does); this pipeline's own ingest is then a no-op.
    shared: tuple[WindowStore, EventLog] | None = None
    # Label hard failures and repairs in the label store as they happen (docs/learning.md).
    autolabel: bool = True
    # Follow the model registry: promotions, rollbacks and a challenger in shadow.
    model_roles: bool = True

    @classmethod
    def offline(cls, **choices: Any) -> Wiring:
        """Alerts kept in memory, nothing sent or remediated, no sample history; `choices`
        change any of it (an alert file, receivers, the detectors...)."""
        return replace(cls(alert_db=":memory:", notifiers=(), sample_history=False,
                           remediate=False, autolabel=False, model_roles=False), **choices)


@dataclass(slots=True)
class Parts:
    """A pipeline's stages and what they talk to, built; typed for the API's reads."""

    settings: Settings
    db: str
    store: WindowStore
    events: EventLog
    owns_store: bool
    ingestor: Ingestor
    scorer: Scorer
    machine: AlertMachine
    fleet: FleetAlerts
    alerts: AlertStore
    labels: LabelStore
    verdicts: VerdictStore
    fleet_count: FleetCount
    identities: GpuIdentities  # which board sits in each GPU slot (service.stages.gpu_identity)
    notification: Notification | None = None
    remediation: Remediation | None = None
    controller: RemediationController | None = None  # the one behind `remediation`, if ours
    model: ModelSlot | None = None
    labeller: AutoLabeller | None = None
    windows: WindowRefit | None = None  # failure windows refitted on the fleet's own alerts
    registry: ModelRegistry | None = None
    roles: ModelRoles | None = None
    sinks: list[Sink] = field(default_factory=list)
    observers: list[TickObserver] = field(default_factory=list)
    cluster: Roles = SOLE  # which roles this replica holds (service.cluster.roles)
    # Live shard membership (cluster.membership postgres): the map in force, followed by the
    # roles' renewals; None: the static map (cluster.shards) or one shard owning all.
    members: Membership | None = None
    census: Census | None = None  # the fleet across shards (service.cluster.census)


def default_detectors(settings: Settings) -> list[Detector]:
    """Rules and thresholds, and the model slot when a model is configured (it holds no model
    until an artifact is there, and says so)."""
    found: list[Detector] = [HardRules(settings.detectors.hard),
                             ChassisRules(settings.detectors.chassis),
                             DynamicThresholds(settings.detectors.dynamic)]
    slot = model_slot(settings)
    return [*found, slot] if slot is not None else found


def model_slot(settings: Settings) -> ModelSlot | None:
    m = settings.detectors.model
    path = m.resolved()
    if path is None:
        return None
    from models.predictor.slot import ModelSlot  # torch: only when a model is configured

    return ModelSlot(path, recheck_s=m.recheck_s, config=m.predictor_config())


def build_parts(settings: Settings | None = None, wiring: Wiring | None = None) -> Parts:
    s = settings or Settings()
    w = wiring or Wiring()
    default_calibration()  # a damaged shipped window table stops the start, named
    store, events = w.shared or (WindowStore(s.window, s.ingest.limits()), EventLog())
    detectors = w.detectors if w.detectors is not None else default_detectors(s)
    db = w.alert_db if w.alert_db is not None else str(s.storage.state_target)
    alerts = AlertStore(db)
    labels = LabelStore(db)
    parts = Parts(
        settings=s, db=db, store=store, events=events, owns_store=True,
        ingestor=Ingestor(store, events, max_future_s=s.ingest.max_future_s,
                          max_samples=s.ingest.max_samples_per_batch),
        scorer=Scorer(store, events, detectors), machine=AlertMachine(s.alerts),
        fleet=FleetAlerts(s.notify.storm, grace_s=max(s.alerts.stale_after_s,
                                                      3 * s.window.step_s)),
        alerts=alerts, labels=labels, verdicts=VerdictStore(db, alerts, labels),
        fleet_count=FleetCount(s.remediation.fleet_size), identities=GpuIdentities(db))
    parts.owns_store = w.shared is None
    if is_postgres(db):  # shared with other replicas: the roles come from leases
        c = s.cluster
        roles = LeasedRoles(db, replica_id=c.replica_id or default_replica_id(
            s.service.port), shard_id=c.shard_id or "default", ttl_s=c.lease_ttl_s,
            renew_s=c.lease_renew_s)
        if c.membership == "postgres":
            roles.membership = parts.members = Membership(
                Members(db, ttl_s=c.lease_ttl_s), replica_id=roles.replica_id,
                shard_id=c.shard_id, url=c.advertise_url, vnodes=c.vnodes,
                leader=roles.leader, leader_lease=roles.leader_lease, renew_s=c.lease_renew_s)
        parts.cluster = roles
        # The storm and the breaker's fraction are judged over the whole fleet by the leader.
        parts.census = Census(db, c.shard_id or "default", max_age_s=c.lease_ttl_s * 4)
    parts.model = _model_of(detectors)
    parts.notification = _notification(s, w, alerts, db, parts.identities)
    parts.remediation, parts.controller = _remediation(s, w, alerts, db, parts.fleet_count.size,
                                                       leads_alone=parts.cluster is SOLE)
    if w.sample_history and s.storage.write_samples:
        parts.sinks.append(SQLiteSink(s.storage.sqlite_path,
                                      retention_s=s.storage.sample_retention_days * 86400.0))
    if w.sample_history and s.storage.risk_history_days > 0 and not s.storage.influxdb.url:
        from service.history.risk_history import RiskHistory

        parts.observers.append(RiskHistory(s.storage.sqlite_path,
                                           retention_s=s.storage.risk_history_days * 86400.0))
    if w.model_roles:
        m = s.detectors.model
        parts.registry = ModelRegistry(db)
        parts.roles = ModelRoles(
            parts.registry, parts.model, m.resolved(),
            m.predictor_config() if parts.model is not None else None, s.alerts,
            stale_after_s=max(s.alerts.stale_after_s, 3 * s.window.step_s), check_s=m.recheck_s)
        parts.roles.check(force=True)
    if w.autolabel:
        parts.labeller = AutoLabeller(parts.labels, alerts, stale_after_s=max(
            s.alerts.stale_after_s, 3 * s.window.step_s))
        if s.learning.windows.enabled:
            from service.stages.window_ledger import WindowLedger
            from service.stages.window_refit import WindowRefit  # the evaluation's scoring

            parts.windows = WindowRefit(WindowLedger(db), parts.labels,
                                        coverage=s.learning.windows.coverage)
    parts.sinks += w.sinks
    parts.observers += w.observers
    if w.influxdb and s.storage.influxdb.url:
        from service.history.influx.sink import InfluxSink  # httpx client, spool: when asked

        influx = InfluxSink.from_settings(s.storage.influxdb, s.storage.influx_spool)
        parts.sinks.append(influx)
        parts.observers.append(influx)
    return parts


def _model_of(detectors: Sequence[Detector]) -> ModelSlot | None:
    """The model slot among the detectors: one can only exist if its module (and torch with
    it) was imported, so a pipeline without a model never imports them."""
    module = sys.modules.get("models.predictor.slot")
    if module is None:
        return None
    found: ModelSlot | None = next((d for d in detectors if isinstance(d, module.ModelSlot)),
                                   None)
    return found


def _notification(s: Settings, w: Wiring, alerts: AlertStore, db: str,
                  identities: GpuIdentities) -> Notification | None:
    if w.notifiers is not None and not list(w.notifiers):
        return None
    given = None if w.notifiers is None else {n.name: n for n in w.notifiers}
    if given is not None and "record" not in given:
        from service.notify.record import RecordReceiver

        given["record"] = RecordReceiver(db)
    return build_notification(s.notify, alerts, db, cluster=s.storage.influxdb.cluster,
                              receivers=given, background=w.notify_background,
                              boards=identities.at)


def _remediation(s: Settings, w: Wiring, alerts: AlertStore, db: str,
                 fleet_size: Callable[[], int], *, leads_alone: bool
                 ) -> tuple[Remediation | None, RemediationController | None]:
    if w.remediation is not None:
        given = w.remediation
        return given, given.controller if isinstance(given, Remediator) else None
    if not w.remediate:
        return None, None
    # Alone, the process leads from its start and settles what its last life left running; a
    # replica does that when it becomes the leader (service.cluster.replica), never at its
    # start as a standby, where it would re-plan the live leader's actions in flight.
    built = build_remediation(s.remediation, alerts, db, fleet_size, reconcile=leads_alone)
    return built, built.controller if built is not None else None
