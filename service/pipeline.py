"""The one place that wires the stages in order (DESIGN.md): ingest -> sinks and window store
-> detectors -> fused risk -> alert state machine -> alert store -> notifiers. No stage calls
the next; the API reads the state each stage leaves behind."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from collectors.frames import Batch, Entity
from models.detectors.dynamic import DynamicThresholds
from models.detectors.findings import Detector, Signal
from models.detectors.hard import HardRules
from service.alert_store import Alert, AlertStore
from service.alerting import AlertMachine, Transition
from service.ingest import EventLog, Ingestor, IngestResult
from service.notify import Delivery, Notification, Notifier, RecordNotifier, notifications
from service.scoring import SCOPES, RiskState, Scorer
from service.settings import Settings
from service.sinks import Sink, SQLiteSink
from service.windows import WindowStore

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Stats:
    samples_ingested: int = 0
    samples_rejected: int = 0
    counter_resets: int = 0
    batches: int = 0
    ticks: int = 0
    last_ingest_s: float = 0.0
    last_tick_s: float = 0.0
    notifications_sent: int = 0
    notifications_failed: int = 0


@dataclass(slots=True)
class TickResult:
    at: float
    duration_s: float
    risk: RiskState
    transitions: list[Transition] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    notifications: list[Notification] = field(default_factory=list)
    changed: list[tuple[Transition, Alert]] = field(default_factory=list)
    # (notification, what the receiver answered, the receiver's name)
    deliveries: list[tuple[Notification, Delivery, str]] = field(default_factory=list)
    levels: dict[Scope, npt.NDArray[np.int8]] = field(default_factory=dict)


class TickObserver(Protocol):
    """Sees every scoring tick's result after it is complete (the InfluxDB recorder)."""

    def observe(self, tick: TickResult) -> None: ...


def default_detectors(settings: Settings) -> list[Detector]:
    """Rules and thresholds, and the model slot when a model is configured (it holds no model
    until an artifact is there, and says so)."""
    found: list[Detector] = [HardRules(settings.detectors.hard),
                             DynamicThresholds(settings.detectors.dynamic)]
    slot = model_slot(settings)
    return [*found, slot] if slot is not None else found


def model_slot(settings: Settings) -> Detector | None:
    m = settings.detectors.model
    path = m.resolved()
    if path is None:
        return None
    from models.predictor.slot import ModelSlot

    return ModelSlot(path, recheck_s=m.recheck_s, config=m.predictor_config())


class Pipeline:
    def __init__(self, settings: Settings | None = None, *, alert_db: str | None = None,
                 sinks: Sequence[Sink] | None = None,
                 notifiers: Sequence[Notifier] | None = None,
                 detectors: list[Detector] | None = None,
                 share_store_of: Pipeline | None = None,
                 observers: Sequence[TickObserver] | None = None) -> None:
        """`share_store_of`: read another pipeline's window store and events instead of keeping
        its own (several detector sets judged on one ingest, as the evaluator does); this
        pipeline's own ingest is then a no-op, since the owner ingests."""
        self.settings = settings or Settings()
        s = self.settings
        self.owns_store = share_store_of is None
        self.store: WindowStore = (
            share_store_of.store if share_store_of else WindowStore(s.window))
        self.events: EventLog = share_store_of.events if share_store_of else EventLog()
        self.ingestor = Ingestor(self.store, self.events, max_future_s=s.ingest.max_future_s,
                                 max_samples=s.ingest.max_samples_per_batch)
        self.scorer = Scorer(self.store, self.events, detectors or default_detectors(s))
        self.machine = AlertMachine(s.alerts)
        db = alert_db if alert_db is not None else str(s.storage.sqlite_path)
        self.alerts = AlertStore(db)
        self.notifiers: list[Notifier] = (
            list(notifiers) if notifiers is not None else [RecordNotifier(db)])
        sinks_default = sinks is None
        if sinks is None:  # the embedded default keeps sample history beside the alerts
            keep = s.storage.write_samples and alert_db is None
            sinks = [SQLiteSink(s.storage.sqlite_path)] if keep else []
        self.sinks = list(sinks)
        self.observers: list[TickObserver] = list(observers or [])
        if s.storage.influxdb.url and sinks_default:
            from service.influx.sink import InfluxSink

            influx = InfluxSink.from_settings(s)
            self.sinks.append(influx)
            self.observers.append(influx)
        self.risk: RiskState | None = None
        self.model = next((d for d in self.scorer.detectors if hasattr(d, "status")), None)
        self.stats = Stats()
        # Ingest (collector thread) and tick (scheduler thread) must not interleave.
        self.lock = threading.RLock()
        self._restore()

    def _restore(self) -> None:
        for a in self.alerts.open_alerts():
            entity = Entity.parse(a.entity)
            slot = self.store[entity.scope].slots_for_entity(entity, self.store.registry)
            self.machine.restore(entity.scope, slot, a.level)

    def ingest(self, batch: Batch, now: float | None = None) -> IngestResult:
        now = time.time() if now is None else now
        if not self.owns_store:
            return IngestResult()
        t0 = time.perf_counter()
        with self.lock:
            res = self.ingestor.ingest(batch, now)
            for sink in self.sinks:
                sink.write(res)
            st = self.stats
            st.batches += 1
            st.samples_ingested += res.accepted
            st.samples_rejected += res.rejected
            st.counter_resets += res.resets
            st.last_ingest_s = time.perf_counter() - t0
        for r in res.rejections[:5]:
            log.info("rejected: %s", r)
        return res

    def tick(self, now: float | None = None) -> TickResult:
        now = time.time() if now is None else now
        t0 = time.perf_counter()
        with self.lock:
            risk = self.scorer.score(now)
            transitions: list[Transition] = []
            for scope in SCOPES:
                sr = risk.scopes[scope]
                transitions += self.machine.step(scope, sr.risk, sr.hard, now,
                                                 self.store[scope].entities)
            explain: dict[str, list[Signal]] = {}
            for t in transitions:
                explain[t.entity] = risk.scopes[t.scope].explain(t.slot)
            changed = self.alerts.apply(transitions, explain) if transitions else []
            self.risk = risk
            self.stats.ticks += 1
            levels = {sc: self.machine.level(sc).copy() for sc in SCOPES}
        sent = notifications(changed)
        deliveries = [(n, d, name) for n in sent for d, name in self._deliver(n)]
        duration = time.perf_counter() - t0
        self.stats.last_tick_s = duration
        result = TickResult(now, duration, risk, transitions, [a for _, a in changed], sent,
                            changed, deliveries, levels)
        for obs in self.observers:
            obs.observe(result)
        return result

    def _deliver(self, n: Notification) -> list[tuple[Delivery, str]]:
        out = []
        for notifier in self.notifiers:
            result = notifier.notify(n)
            if not result.ok and result.retry:
                result = notifier.notify(n)  # one retry; the alerting issue brings backoff
            self._count(result)
            out.append((result, type(notifier).__name__))
        return out

    def _count(self, d: Delivery) -> None:
        if d.ok:
            self.stats.notifications_sent += 1
        else:
            self.stats.notifications_failed += 1
            log.error("notification failed: %s", d.detail)

    def process(self, batch: Batch, now: float) -> TickResult:
        """Ingest one round and score it: what replay and the simulator's evaluation do."""
        self.ingest(batch, now)
        return self.tick(now)

    def close(self) -> None:
        self.alerts.close()
        for n in self.notifiers:
            close = getattr(n, "close", None)
            if callable(close):
                close()
        for s in [*self.sinks, *self.observers]:
            close = getattr(s, "close", None)
            if callable(close):
                close()
