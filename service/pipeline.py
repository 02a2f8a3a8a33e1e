"""The one place that wires the stages in order (docs/design.md, "Where things live"): ingest
-> sinks and window store -> detectors -> fused risk -> alert state machine -> alert store ->
notification pipeline and remediation controller. No stage calls the next; the API reads the
state each stage leaves behind. What this replica writes, restores and judges in a cluster is
service.cluster.replica's answer, asked once a tick."""

from __future__ import annotations

import logging
import threading
import time

from collectors.catalog import Scope
from collectors.frames import Batch, Entity
from collectors.identity import GpuIdentity
from models.detectors.findings import Signal
from service.assembly import Parts, Wiring, build_parts
from service.cluster.ownership import Ownership
from service.cluster.replica import Replica, Turn
from service.cluster.roles import Roles
from service.cluster.shard_map import ShardMap
from service.diagnostics.wiring import build_diagnostics, build_sweeper
from service.heap import HeapTrim
from service.notify.sender import Sent
from service.remediation.wiring import remediate
from service.settings import Settings
from service.stages.alert_machine import FlagChange, Transition, step_inputs
from service.stages.alert_restore import AlertRestore
from service.stages.alert_store import Alert
from service.stages.clock_ahead import ClockAhead
from service.stages.fleet_alerts import MISSING, NODATA, STORM
from service.stages.forgetting import Forgetting
from service.stages.ingest import MAX_DETAILED_REJECTIONS, IngestResult
from service.stages.node_rollup import NodeRollup
from service.stages.scoring import SCOPES, RiskState
from service.stages.storm_report import StormReport
from service.tick import Closable, Stats, TickPhases, TickResult, TracksStore

log = logging.getLogger(__name__)


class Pipeline:
    def __init__(self, parts: Parts) -> None:
        """Orchestrates parts built elsewhere (service.assembly; `build_pipeline` below)."""
        self.parts = parts
        self.settings = parts.settings
        self.db = parts.db
        self.store = parts.store
        self.events = parts.events
        self.owns_store = parts.owns_store
        self.ingestor = parts.ingestor
        self.scorer = parts.scorer
        self.machine = parts.machine
        self.fleet = parts.fleet
        self.alerts = parts.alerts
        self.labels = parts.labels
        self.verdicts = parts.verdicts
        self.labeller = parts.labeller
        self.windows = parts.windows
        self._swapped: dict[str, float] = {}  # entity -> when it proved a new device
        self._boards_why: dict[str, str] = {}  # of those, a board's: how its identity changed
        self.identities = parts.identities
        self.registry = parts.registry
        self.roles = parts.roles
        self.notification = parts.notification
        self.remediation = parts.remediation
        self.controller = parts.controller
        self.census = parts.census
        self.model = parts.model
        self.sinks = parts.sinks
        self.observers = parts.observers
        # Freed heap pages go back to the system after ticks (service/heap.py): at once when
        # the store grew or forgot entities, else at most once a minute.
        self.heap = HeapTrim()
        # What the open storm says (its hot nodes, every hard fault under it), kept current.
        self.storm_report = StormReport(self.fleet, self.alerts, self.machine)
        self.nodes = NodeRollup(self.fleet, self.store, self.machine, parts.fleet_count)
        self.forgetting = Forgetting(
            self.store, self.machine, self.fleet,
            [self.scorer, *([self.roles] if self.roles is not None else [])],
            owns_store=self.owns_store, nodes_gone=parts.identities.forget_nodes)
        for sink in self.sinks:  # the InfluxDB hour tier reads the store's finished hours
            if isinstance(sink, TracksStore):
                sink.track_store(self.scorer.view)
        self._layout = self._store_layout()
        self.risk: RiskState | None = None
        self.stats = Stats()
        # Why the newest tick failed ("" once one succeeds), and when one last succeeded
        # (monotonic): /readyz is not ready while scoring fails or has stopped.
        self.tick_error = ""
        self.last_tick_ok: float | None = None
        # node -> (seconds its clock ran ahead, when last seen so): reported, never trusted.
        self.skew = ClockAhead()
        self.clock_ahead = self.skew.nodes
        # Ingest (collector thread) and tick (scheduler thread) must not interleave.
        self.lock = threading.RLock()
        # Which roles this replica holds and which nodes are its own (service.cluster): a
        # node another shard owns is never ingested, alerted on or acted on here, whatever a
        # sender says; with live membership, the owned nodes follow the published map.
        self.members = members = parts.members
        self.ownership = Ownership(ShardMap.from_settings(self.settings.cluster),
                                   (lambda: members.map) if members is not None else None)
        # The return-to-service gate (service.diagnostics), when on and something can drain.
        self.diagnostics = (build_diagnostics(self.settings.diagnostics, self.db,
                                              self.controller, self.ingest)
                            if self.controller is not None else None)
        self.sweeper = (build_sweeper(self.settings.diagnostics, self.diagnostics,
                                      self.controller, self._node_names)
                        if self.controller is not None else None)
        self.replica = Replica(
            parts.cluster, self.ownership,
            AlertRestore(self.alerts, self.store, self.machine, self.fleet, self.storm_report),
            lock=self.lock, store=self.store, fleet=self.fleet, owns_store=self.owns_store,
            count=parts.fleet_count, members=members, census=self.census,
            notification=self.notification, controller=self.controller)
        if self.notification is not None:
            # Each attempt asks the roles in force (a test or the API may replace them): a
            # leader that lost its lease while paused sends nothing it had queued.
            self.notification.sender.may_send = lambda: self.replica.roles.leader()

    @property
    def cluster(self) -> Roles:
        """Which roles this replica holds (service.cluster.roles): alone, always both."""
        return self.replica.roles

    @cluster.setter
    def cluster(self, roles: Roles) -> None:
        self.replica.roles = roles

    @property
    def generation(self) -> int:
        """Of the store's forgetting this pipeline has followed."""
        return self.forgetting.generation

    def ingest(self, batch: Batch, now: float | None = None, *,
               from_wire: bool = False, detail_limit: int = MAX_DETAILED_REJECTIONS
               ) -> IngestResult:
        now = time.time() if now is None else now
        if not self.owns_store:
            return IngestResult()
        t0 = time.perf_counter()
        with self.lock:
            batch, foreign = self.ownership.keep_owned(batch)
            # A GPU's identity is kept only for GPUs the store admitted (names from the wire
            # cannot grow the table): those it holds already before their readings (a swap
            # restarts their counters first), new ones once ingest has admitted them.
            held, fresh = self._admitted(batch.identity)
            changes = self.identities.observe(held, now) if held else []
            for c in changes:
                if c.kind == "swapped":  # before its readings: they are a new board's
                    self.ingestor.new_device(c.entity)
            res = self.ingestor.ingest(batch, now, from_wire=from_wire, detail_limit=detail_limit)
            if fresh:
                changes += self.identities.observe(self._admitted(fresh)[0], now)
            # The sinks store an identity once per change, not each time a source says it.
            res.clean.identity = {c.entity: c.identity for c in changes}
            swaps = [c for c in changes if c.kind == "swapped"]
            res.swapped.update((c.entity, now) for c in swaps)
            self._boards_why.update((c.entity, c.why) for c in swaps)
            for f in foreign:  # another shard's node: refused by entity, naming its owner
                res.refuse(f.n, f.reason, f.entity, f.metric)
            if not from_wire:  # history the service replays itself vouches for its nodes
                self.fleet.history.note(res.clean, self.store.config.step_s)
            for sink in self.sinks:
                sink.write(res)
            self.stats.add(res)
            if res.swapped:  # a new board under an old name: the labeller's repair
                self._swapped.update(res.swapped)
            self.nodes.note_behind(res.clean, now)
            self.stats.last_ingest_s = time.perf_counter() - t0
            if res.ahead:
                self.skew.note(res.ahead, now)
        for r in res.rejections[:5]:
            log.info("rejected: %s", r)
        return res

    def _admitted(self, said: dict[str, GpuIdentity]
                  ) -> tuple[dict[str, GpuIdentity], dict[str, GpuIdentity]]:
        """`said` split into the GPUs the store holds and the rest."""
        held: dict[str, GpuIdentity] = {}
        rest: dict[str, GpuIdentity] = {}
        gpus = self.store[Scope.GPU]
        for key, ident in said.items():
            try:
                gpu = Entity.parse(key)
            except ValueError:  # the parsers name GPUs only; a plugin's batch may not
                log.info("identity of %r dropped: not a GPU key", key[:80])
                continue
            if gpu.scope is Scope.GPU:
                (held if gpus.slot(gpu) is not None else rest)[key] = ident
        return held, rest

    @property
    def fleet_size(self) -> int:
        """The declared fleet, else the nodes with a history reporting now (0: none yet)."""
        return self.parts.fleet_count.size()

    @property
    def live_nodes(self) -> int:
        """Nodes with fresh telemetry at the newest tick."""
        return self.parts.fleet_count.live

    def tick(self, now: float | None = None) -> TickResult:
        try:
            result = self._tick(now)
        except Exception as exc:
            self.stats.tick_failures += 1
            self.tick_error = f"{type(exc).__name__}: {exc}"[:300]
            raise
        self.tick_error = ""
        self.last_tick_ok = time.monotonic()
        return result

    def _tick(self, now: float | None) -> TickResult:
        now = time.time() if now is None else now
        t0 = time.perf_counter()
        phase = TickPhases(self.stats.tick_phases)
        turn = self.replica.claim(now)
        phase.mark("claim")
        with self.lock:
            phase.mark("lock")
            if self.forgetting.forget(now):
                self.replica.hand_over_strays()
            forgotten = self.forgetting.follow(now)
            phase.mark("forget")
            risk = self.scorer.score(now)
            phase.mark("score")
            # A standby scores (its windows and risk stay current) but leaves the alerts to
            # its shard's writer: two writers would open every episode twice.
            transitions, flags = (self.replica.mine(*self._step_alerts(risk, forgotten, now))
                                  if turn.writing else ([], []))
            phase.mark("alerts")
            transitions, changed, storm_updated = self._record(risk, turn, transitions, now)
            for f in flags:
                self.alerts.set_flags(f.entity, flapping=f.flapping, stale=f.stale, at=now)
            self.risk = risk
            self.stats.ticks += 1
            levels = {sc: self.machine.level(sc).copy() for sc in SCOPES}
            derived = self.fleet.levels()
        phase.mark("record")
        sent, deliveries = (self.notification.tick(
            now, leading=turn.leading, changed=bool(changed or flags or storm_updated),
            shared=self.replica.shared) if self.notification is not None else (0, []))
        self._count(deliveries)
        phase.mark("notify")
        audit = (remediate(self.remediation, changed, now, turn.leading)
                 if self.remediation is not None else [])
        if self.sweeper is not None and turn.leading:
            self.sweeper.step(now)  # starts due sweeps on worker threads; cheap when not due
        phase.mark("remediate")
        duration = time.perf_counter() - t0
        self.stats.last_tick_s = duration
        result = TickResult(now, duration, risk, transitions, [a for _, a in changed], changed,
                            flags, sent, deliveries, audit, levels, derived)
        self._learn(result, turn.writing)
        result.labels = self.labels.drain()
        for obs in self.observers:
            obs.observe(result)
        layout = self._store_layout()
        self.heap.after_tick(now, changed=layout != self._layout)
        self._layout = layout
        return result

    def _record(self, risk: RiskState, turn: Turn, transitions: list[Transition], now: float
                ) -> tuple[list[Transition], list[tuple[Transition, Alert]], bool]:
        """Write this tick's alert changes: every entity's and node's, then the storm's where
        it is this replica's to judge. Returns the transitions, each applied with its alert,
        and whether the storm's explanation was rewritten."""
        entity_ts = [t for t in transitions if t.alertname != STORM]
        changed = (self.alerts.apply(entity_ts, self._explain(risk, entity_ts, now))
                   if entity_ts else [])
        judged = self.replica.storm(turn, [t for t in transitions if t.alertname == STORM], now)
        if judged is None:
            return entity_ts, changed, False
        storm, shared = judged
        done, updated = self.storm_report.apply(risk, entity_ts, storm, now, shared=shared)
        return entity_ts + storm, changed + done, updated

    def _step_alerts(self, risk: RiskState, forgotten: list[Transition], now: float
                     ) -> tuple[list[Transition], list[FlagChange]]:
        """The alert machine over every scope, then the node and fleet alerts on it."""
        transitions: list[Transition] = []
        flags: list[FlagChange] = []
        stale_after = self.nodes.stale_after()
        for scope in SCOPES:
            sr, sw = risk.scopes[scope], self.store[scope]
            last_seen, conf = step_inputs(sr, sw.last_ts)
            transitions += self.machine.step(scope, sr.risk, sr.hard, now, sw.entities,
                                             last_seen=last_seen, confidence=conf,
                                             stale_after_s=stale_after)
            flags += self.machine.flag_changes
        fleet = self.nodes.step(risk, transitions, now, self.replica.wide)
        return forgotten + transitions + fleet, flags

    def _explain(self, risk: RiskState, transitions: list[Transition], now: float
                 ) -> dict[tuple[str, str], list[Signal]]:
        """Each alert's explanation: a silence's, else its entity's signals now."""
        out: dict[tuple[str, str], list[Signal]] = {}
        for t in transitions:
            if t.alertname in (MISSING, NODATA) and t.new:
                out[t.alertname, t.entity] = [self.nodes.silence(t, now)]
            elif t.scope in risk.scopes and t.slot >= 0 and not t.derived:
                out[t.alertname, t.entity] = risk.scopes[t.scope].explain(t.slot)
        return out

    def _count(self, deliveries: list[Sent]) -> None:
        ok = sum(d.delivery.ok for d in deliveries)
        self.stats.notifications_sent += ok
        self.stats.notifications_failed += len(deliveries) - ok

    def _learn(self, result: TickResult, writing: bool) -> None:
        """The shard's writer labels the tick and steps the model roles on it."""
        with self.lock:  # both read the window store, which an ingest may be changing
            if self.labeller is not None and writing:
                swapped, self._swapped = self._swapped, {}
                boards, self._boards_why = self._boards_why, {}
                self.labeller.observe(result, swapped, boards)
            if self.roles is not None and writing:
                self.roles.step(result, self.scorer.view)
            if self.windows is not None:
                if writing:  # what each escalation showed, for the windows' own refit
                    detector = self.model.detector if self.model is not None else None
                    self.windows.ledger.note(
                        result.transitions, result.risk.scopes,
                        detector.probabilities if detector is not None else None)
                self.windows.step(result.at, writing)

    def _node_names(self) -> list[str]:
        with self.lock:
            return [e.key for e in self.store[Scope.NODE].entities]

    def _store_layout(self) -> tuple[int, ...]:
        """What changes when the store's arrays are reallocated or compacted."""
        return (self.store.generation, *(w.capacity for w in self.store.scopes.values()))

    def process(self, batch: Batch, now: float) -> TickResult:
        """Ingest one round and score it: what replay and the simulator's evaluation do."""
        self.ingest(batch, now)
        return self.tick(now)

    def close(self) -> None:
        self.replica.close()  # hands its leases over at once rather than by expiry
        if self.notification is not None:
            self.notification.close()
        if self.sweeper is not None:
            self.sweeper.close()
        if self.diagnostics is not None:
            self.diagnostics.close()
        if self.remediation is not None:
            self.remediation.close()
        self.alerts.close()
        self.labels.close()
        if self.windows is not None:
            self.windows.close()
        self.identities.close()
        self.verdicts.close()
        if self.registry is not None:
            self.registry.close()
        for s in [*self.sinks, *self.observers]:
            if isinstance(s, Closable):
                s.close()


def build_pipeline(settings: Settings | None = None, wiring: Wiring | None = None) -> Pipeline:
    """A pipeline from its settings and wiring; the live service is `build_pipeline(settings)`."""
    return Pipeline(build_parts(settings, wiring))
