"""The one place that wires the stages in order (docs/design.md, "Where things live"): ingest
-> sinks and window store -> detectors -> fused risk -> alert state machine -> alert store ->
notification pipeline and remediation controller. No stage calls the next; the API reads the
state each stage leaves behind."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from collectors.frames import Batch, Entity
from models.detectors.findings import Signal
from service.assembly import Parts, Wiring, build_parts
from service.cluster.ownership import Ownership
from service.cluster.roles import SOLE
from service.cluster.shard_map import ShardMap, local_in
from service.heap import HeapTrim
from service.notify.sender import Sent
from service.remediation.actions import AuditEntry
from service.settings import Settings
from service.stages.alert_machine import FlagChange, Transition, step_inputs
from service.stages.alert_store import Alert
from service.stages.fleet_alerts import FLEET, FLEET_NODE, MISSING, NODATA, STORM, silence_signal
from service.stages.ingest import MAX_DETAILED_REJECTIONS, IngestResult
from service.stages.scoring import SCOPES, RiskState
from service.stages.storm_report import StormReport, storm_of
from service.tick import Closable, Stats, TickResult

log = logging.getLogger(__name__)
SKEW_FORGET_S = 600.0  # a node's fast clock is reported this long after its last such point
MAX_SKEWED = 10_000  # nodes remembered as fast at once (names come from the wire)
FORGET_EVERY_S = 60.0  # how often silent entities are looked for (a vectorised check)


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
        self._swapped: dict[str, float] = {}  # entity -> when a counter proved a new device
        self.registry = parts.registry
        self.roles = parts.roles
        self.notification = parts.notification
        self.remediation = parts.remediation
        self.controller = parts.controller
        # Which roles this replica holds (service.cluster.roles): alone, always both. A replica
        # that gains one starts it from the shared state, as a restart would.
        self.cluster = parts.cluster
        self.census = parts.census
        self._writing = self._leading = self.cluster is SOLE
        if self.controller is not None:
            self.controller.acting = self.cluster.leader
        self.model = parts.model
        self.sinks = parts.sinks
        self.observers = parts.observers
        self.generation = self.store.generation  # of the store's forgetting this has followed
        # Freed heap pages go back to the system after ticks (service/heap.py): at once when
        # the store grew or forgot entities, else at most once a minute.
        self.heap = HeapTrim()
        # What the open storm says (its hot nodes, every hard fault under it), kept current.
        self.storm_report = StormReport(self.fleet, self.alerts, self.machine)
        # node -> when its data last arrived behind the live edge (a backfill, a spool drain):
        # handed to the fleet alerts at the next tick.
        self._behind: dict[str, float] = {}
        self._layout = self._store_layout()
        self.forget_every_s = FORGET_EVERY_S
        self._forgot_at = -np.inf
        self.risk: RiskState | None = None
        self.stats = Stats()
        # Why the newest tick failed ("" once one succeeds), and when one last succeeded
        # (monotonic): /readyz is not ready while scoring fails or has stopped.
        self.tick_error = ""
        self.last_tick_ok: float | None = None
        # node -> (seconds its clock ran ahead, when last seen so): reported, never trusted.
        self.clock_ahead: dict[str, tuple[float, float]] = {}
        # Ingest (collector thread) and tick (scheduler thread) must not interleave.
        self.lock = threading.RLock()
        # Live membership (service.cluster.members): the nodes this shard owns follow the
        # published map; alert writes and restores only ever touch owned nodes. With a static
        # map (`cluster.shards`) too: a node another shard owns is never ingested, alerted on
        # or acted on here, whatever a sender says (service.cluster.ownership).
        self.members = parts.members
        members = self.members
        self.ownership = Ownership(ShardMap.from_settings(self.settings.cluster),
                                   (lambda: members.map) if members is not None else None)
        self._restored_map: ShardMap | None = None  # the map the alert state was restored for
        if self.members is not None:
            self._restored_map = self.members.map
            self.members.on_change.append(self.rebalance)
        if self.controller is not None:
            self.controller.owns = self._owns
        self._restore(self._owns)

    def _owns(self, node: str) -> bool:
        """Whether this shard owns `node` now (a fleet alert's "*" is everyone's)."""
        return node == FLEET_NODE or self.ownership.owns(node)

    def rebalance(self, old: ShardMap | None, new: ShardMap | None) -> None:
        """Before a new shard map is used (the membership thread): forget the nodes it hands
        to other shards (their alerts stay open for the new owner). The writer restores the
        alerts of the nodes it gains at its next tick (_claim); their windows are warm-started
        by service.runtime.rebalance."""
        with self.lock:
            held = {*self.store.registry.nodes, *self.fleet.nodes()}
            self._hand_over([n for n in held if not local_in(new, n)])

    def _hand_over(self, lost: list[str]) -> None:
        if not lost or not self.owns_store:  # a shared store is its owner's to forget
            return
        self.store.forget_nodes(lost)
        self.fleet.forget_nodes(set(lost))
        log.warning("handed %d nodes to other shards (%s%s): forgotten here, their alerts "
                    "stay open for the new owner", len(lost), ", ".join(sorted(lost)[:5]),
                    " ..." if len(lost) > 5 else "")

    def _restore(self, only: Callable[[str], bool] | None = None) -> None:
        """Open alerts from the shared alert store into the alert machine; `only`: of the
        nodes it accepts (those this shard owns, or has just gained)."""
        for a in self.alerts.open_alerts():
            if only is not None and not only(a.node):
                continue
            if a.scope is Scope.NODE or a.alertname == MISSING:
                self.fleet.restore(a.name, a.node, a.level, a.entity)
                if a.name == STORM:
                    self.storm_report.restore(a)
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

    def ingest(self, batch: Batch, now: float | None = None, *,
               from_wire: bool = False, detail_limit: int = MAX_DETAILED_REJECTIONS
               ) -> IngestResult:
        now = time.time() if now is None else now
        if not self.owns_store:
            return IngestResult()
        t0 = time.perf_counter()
        with self.lock:
            batch, foreign = self.ownership.keep_owned(batch)
            res = self.ingestor.ingest(batch, now, from_wire=from_wire, detail_limit=detail_limit)
            for f in foreign:  # another shard's node: refused by entity, naming its owner
                res.refuse(f.n, f.reason, f.entity, f.metric)
            if not from_wire:  # history the service replays itself vouches for its nodes
                self.fleet.history.note(res.clean, self.store.config.step_s)
            for sink in self.sinks:
                sink.write(res)
            st = self.stats
            st.batches += 1
            st.samples_ingested += res.accepted
            st.samples_rejected += res.rejected
            st.rows_late += res.late
            st.counter_drops += res.counter_drops
            st.counter_resets += res.resets
            if res.swapped:  # a new device under an old name: the labeller's repair
                self._swapped.update(res.swapped)
            self._note_behind(res.clean, now)
            st.last_ingest_s = time.perf_counter() - t0
            if res.ahead:
                self._note_ahead(res.ahead, now)
        for r in res.rejections[:5]:
            log.info("rejected: %s", r)
        return res

    @property
    def fleet_size(self) -> int:
        """The declared fleet, else the nodes with a history reporting now (0: none yet)."""
        return self.parts.fleet_count.size()

    @property
    def live_nodes(self) -> int:
        """Nodes with fresh telemetry at the newest tick."""
        return self.parts.fleet_count.live

    def _stale_after(self) -> float:
        """Never call data stale before three of its steps are missing (replays at 5 min)."""
        return max(self.machine.policy.stale_after_s, 3 * self.store.config.step_s)

    def _note_behind(self, clean: Batch, now: float) -> None:
        """Nodes whose accepted rows or events are older than the stale limit: their data
        arrives behind the live edge (an agent's backfill, a relay draining its spool). Such a
        node is reporting, not silent, and its level changes are no storm entries."""
        edge = now - self._stale_after()
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

    def _note_ahead(self, ahead: dict[str, float], now: float) -> None:
        """Remember nodes whose clocks run fast (exported until SKEW_FORGET_S after their last
        such point), warning once per episode: an operator fixes NTP, we never trust it."""
        known = self.clock_ahead
        for node, secs in ahead.items():
            if node not in known:
                if len(known) >= MAX_SKEWED:
                    continue
                log.warning("node %s stamps its data %.0f s ahead of this service's clock; "
                            "it is scored at the service's time (check its NTP)", node, secs)
            known[node] = (secs, now)
        for node in [n for n, (_, at) in known.items() if now - at > SKEW_FORGET_S]:
            del known[node]

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

    def _claim(self, now: float) -> tuple[bool, bool]:
        """This tick's roles; a role just gained starts from the shared state."""
        writing, leading = self.cluster.writer(), self.cluster.leader()
        if writing and not self._writing:
            log.warning("this replica now writes its shard's alerts: restoring them")
            with self.lock:
                self.machine.reset()
                self.fleet.reset()
                self._restore(self._owns)
                self._restored_map = self.members.map if self.members is not None else None
        elif writing and self.members is not None and self.members.map is not self._restored_map:
            before, now_map = self._restored_map, self.members.map
            log.warning("the shard map changed: restoring the open alerts of the nodes this "
                        "shard gained")
            with self.lock:
                self._restore(lambda n: n != "*" and local_in(now_map, n)
                              and not local_in(before, n))
            self._restored_map = now_map
        if leading and not self._leading:
            log.warning("this replica is now the leader: notifications and remediation "
                        "continue from the shared state")
            if self.notification is not None:
                self.notification.dispatcher.restart()
            if self.controller is not None:
                self.controller.reconcile(now)
            if self.census is not None:  # the fleet's storm is the leader's to judge
                storm = storm_of(self.alerts.open_alerts())
                self.fleet.storm_level = storm.level if storm is not None else 0
                if storm is not None:
                    self.storm_report.restore(storm)
                else:
                    self.storm_report.closed()
        self._writing, self._leading = writing, leading
        return writing, leading

    def _tick(self, now: float | None) -> TickResult:
        now = time.time() if now is None else now
        t0 = time.perf_counter()
        writing, leading = self._claim(now)
        with self.lock:
            forgotten = self._forget(now)
            risk = self.scorer.score(now)
            transitions, flags = self._step_alerts(risk, now) if writing else ([], [])
            # A standby scores (its windows and risk stay current) but leaves the alerts to
            # its shard's writer: two writers would open every episode twice.
            transitions = forgotten + transitions if writing else []
            if self.ownership.sharded:  # nodes being handed over: the new owner writes
                transitions = [t for t in transitions if self._owns(t.node)]
                flags = [f for f in flags if self._owns(f.node)]
            explain: dict[tuple[str, str], list[Signal]] = {}
            for t in transitions:
                if t.alertname in (MISSING, NODATA) and t.new:
                    explain[t.alertname, t.entity] = [self._silence(t, now)]
                elif t.scope in risk.scopes and t.slot >= 0 and not t.derived:
                    explain[t.alertname, t.entity] = risk.scopes[t.scope].explain(t.slot)
            storm = [t for t in transitions if t.alertname == STORM]
            entity_ts = [t for t in transitions if t.alertname != STORM]
            changed = self.alerts.apply(entity_ts, explain) if entity_ts else []
            storm_updated = False
            if writing and self.census is None:
                done, storm_updated = self._storm_alert(risk, entity_ts, storm, now,
                                                        shared=self.cluster is not SOLE)
                changed += done
            for f in flags:
                self.alerts.set_flags(f.entity, flapping=f.flapping, stale=f.stale, at=now)
            self.risk = risk
            self.stats.ticks += 1
            levels = {sc: self.machine.level(sc).copy() for sc in SCOPES}
            if leading and self.census is not None:
                storm = self._judge_fleet(now)
                transitions = transitions + storm
                done, storm_updated = self._storm_alert(risk, entity_ts, storm, now,
                                                        shared=True)
                changed = changed + done
            derived = self.fleet.levels()
        sent = 0
        deliveries: list[Sent] = []
        if self.notification is not None and leading:
            # Sharing the state, other shards' writers open and resolve alerts too, which no
            # tick of ours sees change: the leader regroups from the shared state every tick.
            if changed or flags or storm_updated or self.cluster is not SOLE:
                self.notification.dispatcher.mark()
            sent = self.notification.flush(now)
            deliveries = self.notification.sender.drain()
            for d in deliveries:
                self._count(d)
        elif self.notification is not None and (changed or flags or storm_updated):
            self.notification.dispatcher.mark()  # the leader reads them; ours regroups later
        audit: list[AuditEntry] = []
        if self.remediation is not None:
            self._remediate(changed, now, leading)
            audit = self.remediation.audit()
        duration = time.perf_counter() - t0
        self.stats.last_tick_s = duration
        result = TickResult(now, duration, risk, transitions, [a for _, a in changed], changed,
                            flags, sent, deliveries, audit, levels, derived)
        with self.lock:  # both read the window store, which an ingest may be changing
            if self.labeller is not None and writing:
                swapped, self._swapped = self._swapped, {}
                self.labeller.observe(result, swapped)
            if self.roles is not None and writing:
                self.roles.step(result, self.scorer.view)
        result.labels = self.labels.drain()
        for obs in self.observers:
            obs.observe(result)
        layout = self._store_layout()
        self.heap.after_tick(now, changed=layout != self._layout)
        self._layout = layout
        return result

    def _store_layout(self) -> tuple[int, ...]:
        """What changes when the store's arrays are reallocated or compacted."""
        return (self.store.generation, *(w.capacity for w in self.store.scopes.values()))

    def _forget(self, now: float) -> list[Transition]:
        """Forget entities silent past their longest window (the store's owner decides, at
        most every forget_every_s), and follow every forgetting of the store since the last
        tick. An open alert of a forgotten entity resolves: it has not been seen for days."""
        if self.owns_store and now - self._forgot_at >= self.forget_every_s:
            self._forgot_at = now
            done = self.store.forget(now)
            if done is not None:
                self.fleet.history.forget(set(self.store.registry.nodes))
                log.info("forgot %s; nodes without entities left: %d",
                         ", ".join(f"{len(d)} {sc}" for sc, d in done.dropped.items() if d),
                         len(done.nodes_dropped))
            if self.members is not None:  # writes that arrived under an older map
                self._hand_over([n for n in self.store.registry.nodes if not self._owns(n)])
        out: list[Transition] = []
        pending = self.store.compactions_since(self.generation)
        if pending and pending[0].generation != self.generation + 1:
            raise RuntimeError(f"missed the store's forgetting {self.generation + 1}: this "
                               "pipeline's per-entity state no longer matches its slots")
        for c in pending:
            for scope, keep in c.keep.items():
                level = self.machine.level(scope)
                gone = np.ones(len(level), bool)
                gone[keep[keep < len(level)]] = False
                for e, old in zip(c.dropped[scope], level[gone].tolist(), strict=False):
                    if old > 0 and not c.handed:  # handed over: the new owner continues it
                        out.append(Transition(scope, -1, e.key, e.node, int(old), 0, now, 0.0))
                self.machine.forget(scope, keep)
                self.scorer.forget(scope, keep)
                if self.roles is not None:
                    self.roles.forget(scope, keep)
            self.generation = c.generation
        return out

    def _step_alerts(self, risk: RiskState,
                     now: float) -> tuple[list[Transition], list[FlagChange]]:
        transitions: list[Transition] = []
        flags: list[FlagChange] = []
        stale_after = self._stale_after()
        n_nodes = len(risk.node_names)
        heard_nodes = np.zeros(n_nodes)  # entities of the node not silent
        seen_nodes = np.zeros(n_nodes)
        node_level = np.zeros(n_nodes, np.int8)
        # Per node, its first arrival and its longest-reporting entity's span of arrivals:
        # its history (service.stages.fleet_alerts.FleetHistory).
        node_born = np.full(n_nodes, np.nan)
        node_span = np.full(n_nodes, np.nan)
        silent: dict[Scope, npt.NDArray[np.bool_]] = {}
        behind = self._behind
        self._behind = {}
        for scope in SCOPES:
            sr = risk.scopes[scope]
            sw = self.store[scope]
            n = len(sr.risk)
            last_seen, conf = step_inputs(sr, sw.last_ts)
            transitions += self.machine.step(scope, sr.risk, sr.hard, now, sw.entities,
                                             last_seen=last_seen, confidence=conf,
                                             stale_after_s=stale_after)
            flags += self.machine.flag_changes
            nodes = sw.node_of[:n]
            ok = nodes >= 0
            # Stale (the newest sample is old: levels freeze) is not silent (no sample row
            # arrived for the stale limit): a node sending old data (a backfill) is behind
            # (_note_behind), not gone.
            quiet = self.machine.stale(scope)[:n] & ~(now - sw.heard[:n] <= stale_after)
            silent[scope] = quiet
            heard_nodes += np.bincount(nodes[ok], weights=~quiet[ok],
                                       minlength=n_nodes)[:n_nodes]
            seen_nodes += np.bincount(nodes[ok], minlength=n_nodes)[:n_nodes]
            np.maximum.at(node_level, nodes[ok], self.machine.level(scope)[:n][ok])
            np.fmin.at(node_born, nodes[ok], sw.born[:n][ok])
            np.fmax.at(node_span, nodes[ok], (sw.touched[:n] - sw.born[:n])[ok])
        # Storm entries come from entities' own levels, never a derived (no-data) alert.
        raised = {t.node: t.new for t in transitions
                  if t.new >= 2 and t.new > t.old and not t.derived}
        node_silent = (seen_nodes > 0) & (heard_nodes == 0)
        step_s = self.store.config.step_s
        history = self.fleet.history
        trusted = history.trusted(risk.node_names)
        counted = history.counted(now, node_born, node_span, step_s, trusted)
        self.parts.fleet_count.live = int(np.count_nonzero((heard_nodes > 0) & counted))
        # A GPU silent while other GPUs of its node report: all of a node's GPUs silent is
        # its GPU collector or driver (collector_up, NodeNoData say so), not one GPU.
        gpus = self.store[Scope.GPU]
        n = len(risk.scopes[Scope.GPU].risk)
        gnode = gpus.node_of[:n]
        gsilent = silent[Scope.GPU]
        ok = gnode >= 0
        heard_gpus = np.bincount(gnode[ok], weights=~gsilent[ok], minlength=n_nodes)[:n_nodes]
        lost = np.flatnonzero(gsilent & ok & (heard_gpus[np.maximum(gnode, 0)] > 0))
        missing = {gpus.entities[i].key: (i, gpus.entities[i].node) for i in lost.tolist()}
        # A GPU's own history, or its node's replayed one if the GPU was part of it (first
        # heard with its node): a GPU index seen once under a real node never notifies.
        first_of_node = node_born[gnode[lost]]
        replayed = np.fromiter((gpus.entities[i].key in history.vouched_gpus
                                for i in lost.tolist()), bool, len(lost))
        young = lost[~(history.notifiable(gpus.touched[lost] - gpus.born[lost], step_s)
                       | (trusted[gnode[lost]] & (gpus.born[lost] <= first_of_node + 1e-6))
                       | replayed)]
        transitions += self.fleet.step(now, risk.node_names, node_silent, node_level, raised,
                                       missing, fleet_size=self.fleet_size,
                                       fleet=self._publish if self.census is not None else None,
                                       behind=behind,
                                       notifiable=history.notifiable(node_span, step_s)
                                       | trusted,
                                       young={gpus.entities[i].key for i in young.tolist()})
        return transitions, flags

    def _storm_alert(self, risk: RiskState, entity_ts: list[Transition],
                     storm: list[Transition], now: float, *, shared: bool
                     ) -> tuple[list[tuple[Transition, Alert]], bool]:
        """Open or resolve the storm alert, and keep what it says current while it fires:
        its hot nodes and every hard fault under it (service.stages.storm_report). Returns
        the storm's transitions applied, and whether its explanation was rewritten."""
        report = self.storm_report
        opening = any(t.new for t in storm)
        if not (self.fleet.storm_level or opening or storm):
            return [], False
        signals = (report.signals(risk, entity_ts, shared)
                   if self.fleet.storm_level or opening else [])
        out: list[tuple[Transition, Alert]] = []
        for t in storm:
            got = self.alerts.apply([t], {(STORM, FLEET): signals} if t.new else {})
            out += got
            if t.new:
                report.opened(got[0][1])
            else:
                report.closed()
        if self.fleet.storm_level and not opening:
            return out, report.update(signals, now) is not None
        return out, False

    def _publish(self, size: int, hot: int) -> None:
        """This shard's part of the fleet census; the leader judges the storm from the sum.
        What it publishes is its own nodes with a history, never `size` (a declared size)."""
        assert self.census is not None
        live = self.parts.fleet_count.live
        try:
            self.census.publish(live, hot)
        except Exception:  # the census is advisory: a lost row ages out, scoring goes on
            log.exception("could not publish this shard's fleet census")

    def _judge_fleet(self, now: float) -> list[Transition]:
        """The leader: the fleet's size for the breaker and its storm, from every shard."""
        assert self.census is not None
        totals = self.census.totals()
        self.parts.fleet_count.live = totals.live
        return self.fleet.judge(now, self.fleet_size, totals.hot)

    def _silence(self, t: Transition, now: float) -> Signal:
        """A NodeNoData or GpuMissing alert's explanation: silent for how long, last seen
        (when anything of it last arrived, or its newest sample's time if later)."""
        if t.alertname == MISSING:
            sw = self.store[Scope.GPU]
            rows = np.array([t.slot]) if 0 <= t.slot < len(sw.entities) else np.zeros(0, int)
            last = self._last_heard(Scope.GPU, rows)
            return silence_signal(MISSING, t.entity, t.node, now, last,
                                  self._stale_after())
        last = -np.inf
        for scope in SCOPES:
            sw = self.store[scope]
            n = len(sw.entities)
            last = max(last, self._last_heard(scope, np.flatnonzero(sw.node_of[:n] == t.slot)))
        return silence_signal(NODATA, t.node, t.node, now,
                              last if np.isfinite(last) else float("nan"), self._stale_after())

    def _last_heard(self, scope: Scope, rows: npt.NDArray[np.intp]) -> float:
        sw = self.store[scope]
        got = np.concatenate([sw.heard[rows], sw.last_ts[rows].ravel()])
        got = got[np.isfinite(got)]
        return float(got.max()) if len(got) else float("nan")

    def _remediate(self, changed: list[tuple[Transition, Alert]], now: float,
                   leading: bool = True) -> None:
        """Level 3 asks the controller to migrate jobs off the node when the alert is
        corroborated (a hard rule or a confident model), not flapping and not on stale data.
        A storm trips the breaker instead. The controller's guards decide the rest. A shard's
        writer records the request in the shared state; only the leader starts actions."""
        rem = self.remediation
        assert rem is not None
        # The breaker trips before any request of the same tick can start a drain.
        for t, _ in changed:
            if t.alertname == STORM and t.new == 3:
                rem.trip(f"fleet-wide alert storm: {t.risk:.0%} of nodes at level 2+", now)
        for t, a in changed:
            if (t.new == 3 and t.old < 3 and t.scope is not Scope.NODE and t.corroborated
                    and not t.flapping and t.entity != FLEET):
                rem.migrate(a, now)
        if leading:
            rem.step(now)

    def _count(self, d: Sent) -> None:
        if d.delivery.ok:
            self.stats.notifications_sent += 1
        else:
            self.stats.notifications_failed += 1

    def process(self, batch: Batch, now: float) -> TickResult:
        """Ingest one round and score it: what replay and the simulator's evaluation do."""
        self.ingest(batch, now)
        return self.tick(now)

    def close(self) -> None:
        self.cluster.close()  # hands its leases over at once rather than by expiry
        if self.census is not None:
            self.census.close()
        if self.notification is not None:
            self.notification.close()
        if self.remediation is not None:
            self.remediation.close()
        self.alerts.close()
        self.labels.close()
        self.verdicts.close()
        if self.registry is not None:
            self.registry.close()
        for s in [*self.sinks, *self.observers]:
            if isinstance(s, Closable):
                s.close()


def build_pipeline(settings: Settings | None = None, wiring: Wiring | None = None) -> Pipeline:
    """A pipeline from its settings and wiring; the live service is `build_pipeline(settings)`."""
    return Pipeline(build_parts(settings, wiring))
