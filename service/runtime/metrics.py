"""The service's own Prometheus metrics, on a registry built per app (never the global one).

Counts the pipeline already keeps (samples, rejections, resets, notifications) are read from
`Pipeline.stats` at scrape time by a custom collector, so no call site can forget or double an
increment. Durations are histograms observed where the work is timed (the scheduler and the
write endpoint). Fleet risk is exported twice: a few counts per scope and level, and one risk
and one level per GPU, IB port and node (`entity_metrics`, its cardinality in docs/metrics.md).

Collectors are one series per (collector, host): node agents' collectors carry their node as
`host`; the service's own collectors carry no `host` label (to Prometheus the same as an empty
one), so their series stay what they were before agents reported.

Names pass `promtool check metrics`: no metric type in a name (the catalog's "counter resets"
are `gpuhealth_resets_detected_total`), base units, `_total` only on counters.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.samples import Sample

from collectors.base import CollectorStatus
from collectors.catalog import Scope
from collectors.ignored import OTHER, IgnoredNames
from service.diagnostics.run_counts import STATUS_VALUE, RunCounts
from service.pipeline import Pipeline
from service.runtime.entity_metrics import EntityGauges
from service.runtime.redact import redact
from service.runtime.remote_collectors import RemoteStatus
from service.stages.alert_machine import LEVELS
from service.stages.scoring import SCOPES
from service.tick import TickPhases

log = logging.getLogger(__name__)

# Distinct (measurement, field) pairs /metrics lists; a sender inventing names cannot grow the
# exposition (or this process) past it: the rest count together under "(other)".
MAX_IGNORED_NAMES = 500

StatusSource = Callable[[], Mapping[str, CollectorStatus]]
RemoteSource = Callable[[], Sequence[RemoteStatus]]  # already judged stale or not

# A 5-s tick budget: buckets resolve from a millisecond up to well past the budget.
_TICK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _no_collectors() -> Mapping[str, CollectorStatus]:
    return {}


def _no_remote() -> Sequence[RemoteStatus]:
    return ()


class PipelineCollector:
    """Reads the state the pipeline stages leave behind, at scrape time."""

    def __init__(self, pipeline: Pipeline, statuses: StatusSource = _no_collectors,
                 remote: RemoteSource = _no_remote,
                 last_scrape: Mapping[str, float] | None = None) -> None:
        self.pipeline = pipeline
        self.statuses = statuses
        self.remote = remote
        self.last_scrape: Mapping[str, float] = {} if last_scrape is None else last_scrape
        self.run_counts = RunCounts()  # diagnostic runs, counted on from scrape to scrape

    def describe(self) -> Iterable[Metric]:
        return []  # families depend on runtime state; skip the registry's describe-by-collect

    def collect(self) -> Iterable[Metric]:
        yield from self._stats()
        yield from self._collectors()
        yield from self._detectors()
        yield self._clock_ahead()
        yield self._alerts()
        yield from self._risk()
        yield from self._entity_limits()
        yield self._roles()
        yield from self._map_epoch()
        yield from self._diagnostics()
        yield _http_closed()

    def _roles(self) -> Metric:
        """Which of the replica roles this process holds: alone, both; with replicas, the
        alert to write is "no replica holds `leader`" (sum over replicas == 0)."""
        fam = GaugeMetricFamily("gpuhealth_cluster_role", "1 while this replica holds the "
                                "role: writer (persists its shard's alerts), leader (notifies "
                                "and remediates for the fleet)", labels=["role"])
        roles = self.pipeline.cluster
        fam.add_metric(["writer"], 1.0 if roles.writer() else 0.0)
        fam.add_metric(["leader"], 1.0 if roles.leader() else 0.0)
        return fam

    def _map_epoch(self) -> Iterable[Metric]:
        members = self.pipeline.members
        if members is not None:  # live membership: replicas disagreeing for long is a fault
            yield GaugeMetricFamily("gpuhealth_cluster_map_epoch", "Epoch of the shard map "
                                    "in force in this process (cluster.membership postgres)",
                                    value=float(members.epoch))

    def _diagnostics(self) -> Iterable[Metric]:
        """Active diagnostics (service.diagnostics), while they are on: runs by outcome, each
        tested node's last result, and the repeat offenders."""
        diag = self.pipeline.diagnostics
        if diag is None:
            return
        self.run_counts.refresh(diag.runs)
        runs = CounterMetricFamily(
            "gpuhealth_diagnostic_runs", "Diagnostic suite runs finished, by suite, purpose "
            "(gate, sweep, manual) and status (pass, fail, error: the test could not run)",
            labels=["suite", "purpose", "status"])
        for (suite, purpose, status), n in sorted(self.run_counts.totals.items()):
            runs.add_metric([suite, purpose, status], n)
        last = GaugeMetricFamily(
            "gpuhealth_node_diagnostic_status", "The result of the node's last diagnostic "
            "run: 0 pass, 1 fail, 2 error", labels=["node"])
        for node, (_, status) in sorted(self.run_counts.last.items()):
            last.add_metric([node], STATUS_VALUE.get(status, 2.0))
        yield from (runs, last)
        if diag.offenders is not None:
            flagged = GaugeMetricFamily(
                "gpuhealth_node_repeat_offender", "1 while the node needs its hardware "
                "replaced (it failed again soon after a release; the gate holds it), 0 for a "
                "node that came back and failed again but is not flagged", labels=["node"])
            for rec in diag.offenders.fleet(diag.clock()):
                flagged.add_metric([rec.node], 1.0 if rec.flagged else 0.0)
            yield flagged

    def _stats(self) -> Iterable[Metric]:
        st = self.pipeline.stats
        for name, doc, value in (
            ("gpuhealth_samples_ingested", "Samples (values and events) accepted by ingest",
             st.samples_ingested),
            ("gpuhealth_samples_rejected", "Samples or lines refused by parsing or ingest",
             st.samples_rejected),
            ("gpuhealth_rows_late", "Rows stored to the sinks but not scored: older than "
             "their entity's last sample or than the raw window", st.rows_late),
            ("gpuhealth_lifetime_drops", "Persistent counts (lifetime ECC, retired pages) read "
             "lower than before: stored, left out of scoring until taken as a new device",
             st.counter_drops),
            ("gpuhealth_resets_detected", "Resets of cumulative device counts detected "
             "(driver reload, GPU reset, reboot)", st.counter_resets),
            ("gpuhealth_batches", "Batches ingested", st.batches),
            ("gpuhealth_score_ticks", "Scoring ticks run", st.ticks),
            ("gpuhealth_score_tick_failures", "Scoring ticks that raised", st.tick_failures),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        phases = CounterMetricFamily(
            "gpuhealth_score_tick_phase_seconds", "Seconds of scoring ticks spent per phase "
            "(lock: waiting for an ingest to finish; notify and remediate: the leader's "
            "deliveries and job migrations)", labels=["phase"])
        for phase in TickPhases.PHASES:
            phases.add_metric([phase], st.tick_phases.get(phase, 0.0))
        yield phases
        yield from self._notifications()

    def _notifications(self) -> Iterable[Metric]:
        labels = ["receiver", "integration"]
        sent = CounterMetricFamily("gpuhealth_notifications_sent", "Notifications delivered, "
                                   "by receiver (its name) and integration (its type)",
                                   labels=labels)
        failed = CounterMetricFamily("gpuhealth_notifications_failed", "Notifications that "
                                     "failed after retry, by receiver and integration",
                                     labels=labels)
        note = self.pipeline.notification
        if note is not None:
            ok, bad = note.sender.counts()
            for key, n in sorted(ok.items()):
                sent.add_metric(list(key), n)
            for key, n in sorted(bad.items()):
                failed.add_metric(list(key), n)
        yield from (sent, failed)
        ctl = self.pipeline.controller
        if ctl is not None:  # remediation on
            yield GaugeMetricFamily("gpuhealth_remediation_breaker_open", "1 while the "
                                    "blast-radius circuit breaker is open (remediation "
                                    "stopped until an admin resets it)",
                                    value=1.0 if ctl.breaker.is_open else 0.0)

    def _collectors(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "gpuhealth_collector_up", "1 when the collector's last round succeeded (and, for a "
            "node agent's, was reported recently); host: the agent's node, none for the "
            "service's own", labels=["collector", "host"])
        # The reason a collector is down, as an info-style series (value 1); none while up.
        err = GaugeMetricFamily("gpuhealth_collector_last_error",
                                "Why a collector is down (1 per down collector, reason label)",
                                labels=["collector", "host", "reason"])
        last = GaugeMetricFamily("gpuhealth_collector_last_scrape_seconds",
                                 "Duration of the collector's last collect()",
                                 labels=["collector", "host"])
        for name, status in sorted(self.statuses().items()):
            _add(up, {"collector": name}, 1.0 if status.up else 0.0)
            if not status.up:
                _add(err, {"collector": name, "reason": label_text(status.reason)}, 1.0)
            if name in self.last_scrape:
                _add(last, {"collector": name}, self.last_scrape[name])
        for r in self.remote():
            labels = {"collector": r.collector, "host": r.host}
            _add(up, labels, 1.0 if r.up else 0.0)
            if not r.up:
                _add(err, {**labels, "reason": label_text(r.reason)}, 1.0)
            if not math.isnan(r.scrape_seconds):
                _add(last, labels, r.scrape_seconds)
        return up, err, last

    def _clock_ahead(self) -> Metric:
        fam = GaugeMetricFamily("gpuhealth_clock_ahead_seconds",
                                "How far ahead of the service a node stamps its data (a fast "
                                "clock; its points are scored at the service's time), for "
                                "nodes seen so in the last 10 minutes", labels=["host"])
        for node, (secs, _) in sorted(self.pipeline.clock_ahead.items()):
            fam.add_metric([node], secs)
        return fam

    def _detectors(self) -> Iterable[Metric]:
        health = self.pipeline.scorer.health
        errors = CounterMetricFamily("gpuhealth_detector_errors",
                                     "Ticks on which a detector raised (its findings were left "
                                     "out; the others still scored)", labels=["detector"])
        up = GaugeMetricFamily("gpuhealth_detector_up",
                               "1 when the detector scored on the newest tick",
                               labels=["detector"])
        for name, h in sorted(health.items()):
            errors.add_metric([name], h.errors)
            up.add_metric([name], 0.0 if h.failing else 1.0)
        return errors, up

    def _alerts(self) -> Metric:
        firing = GaugeMetricFamily("gpuhealth_alerts_firing", "Open alerts by current level",
                                   labels=["level"])
        by_level = Tally(a.level for a in self.pipeline.alerts.open_alerts())
        for level in LEVELS:
            firing.add_metric([str(level)], by_level.get(level, 0))
        return firing

    def _risk(self) -> Iterable[Metric]:
        risk = self.pipeline.risk  # one immutable snapshot per tick; no lock needed
        tracked = GaugeMetricFamily("gpuhealth_entities", "Entities scored, by scope",
                                    labels=["scope"])
        at_risk = GaugeMetricFamily(
            "gpuhealth_entities_at_risk",
            "Entities whose risk is at or above the enter threshold of a level",
            labels=["scope", "level"])
        if risk is None:
            return
        enter = self.pipeline.settings.alerts.enter
        # "node" counts every node by its rolled-up risk (its own sensors' included), once.
        per_scope = [(str(s), risk.scopes[s].risk) for s in SCOPES if s is not Scope.NODE]
        per_scope.append(("node", risk.nodes))
        for scope, r in per_scope:
            tracked.add_metric([scope], len(r))
            for level, threshold in zip(LEVELS, enter, strict=True):
                at_risk.add_metric([scope, str(level)], int(np.count_nonzero(r >= threshold)))
        yield tracked
        yield at_risk
        yield GaugeMetricFamily("gpuhealth_last_tick_timestamp_seconds",
                                "Data time of the newest scoring tick", value=risk.at)
        yield GaugeMetricFamily("gpuhealth_last_tick_duration_seconds",
                                "Duration of the newest scoring tick", value=risk.duration_s)


    def _entity_limits(self) -> Iterable[Metric]:
        """New entities the limits turned away, and entities forgotten after falling silent
        (ingest.max_gpus, ingest.max_new_gpus_per_batch)."""
        refused = CounterMetricFamily(
            "gpuhealth_entities_refused", "New entities refused by the entity limits (their "
            "samples are refused with the reason)", labels=["scope"])
        forgotten = CounterMetricFamily(
            "gpuhealth_entities_forgotten", "Entities forgotten after falling silent for "
            "longer than their longest window", labels=["scope"])
        limit = GaugeMetricFamily("gpuhealth_entities_limit", "Entities held at most",
                                  labels=["scope"])
        for scope in SCOPES:
            w = self.pipeline.store[scope]
            refused.add_metric([str(scope)], w.refused_total)
            forgotten.add_metric([str(scope)], w.forgotten_total)
            limit.add_metric([str(scope)], w.max_entities)
        yield from (refused, forgotten, limit)


def label_text(reason: str, limit: int = 120) -> str:
    """An agent's error as a label value: credentials redacted, one line of printable
    characters, bounded (it came from the wire, and every distinct value is a series)."""
    clean = "".join(c if c.isprintable() else " " for c in redact(reason[:1000]))
    clean = " ".join(clean.split())
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def _add(family: GaugeMetricFamily, labels: dict[str, str], value: float) -> None:
    # Samples of one family may leave a label out: the service's own collectors have no host.
    family.samples.append(Sample(family.name, labels, value))


class _ScrapeTimes:
    """The scrape-duration histogram, also keeping each collector's last duration for the
    last-scrape gauge (the scheduler only observes)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.histogram = Histogram(
            "gpuhealth_collector_scrape_seconds", "Duration of one collect() of a collector",
            ["collector"], buckets=_TICK_BUCKETS, registry=registry)
        self.last: dict[str, float] = {}

    def labels(self, collector: str) -> _ScrapeTime:
        return _ScrapeTime(self, collector)


class _ScrapeTime:
    __slots__ = ("collector", "times")

    def __init__(self, times: _ScrapeTimes, collector: str) -> None:
        self.times, self.collector = times, collector

    def observe(self, seconds: float) -> None:
        self.times.last[self.collector] = seconds
        self.times.histogram.labels(self.collector).observe(seconds)


class IgnoredFields:
    """What writes carried that the catalog does not track, per (measurement, field): counted
    for /metrics, each new name logged once."""

    def __init__(self, max_names: int = MAX_IGNORED_NAMES) -> None:
        self._tally = IgnoredNames(max_names)
        self._lock = threading.Lock()  # writes are ingested on the thread pool

    def note(self, ignored: IgnoredNames) -> None:
        if not ignored.counts:
            return
        with self._lock:
            new = self._tally.merge(ignored)
        for m, f in new:
            if (m, f) == (OTHER, OTHER):
                log.warning("more than %d distinct measurement/field names ignored; further "
                            "ones are counted together as %s", self._tally.max_names, OTHER)
            else:
                log.info("ignoring %s.%s: not in the metric catalog (counted in "
                         "gpuhealth_ignored_fields_total)", m, f)

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(
            "gpuhealth_ignored_fields", "Field values written that the catalog does not track "
            "(stored nowhere), by measurement and field; '(other)' past "
            f"{self._tally.max_names} distinct names", labels=["measurement", "field"])
        with self._lock:
            items = sorted(self._tally.counts.items())
        for (m, f), n in items:
            family.add_metric([m, f], n)
        yield family

    def describe(self) -> Iterable[Metric]:
        return []

    def count(self, measurement: str, field: str) -> int:
        with self._lock:
            return self._tally.counts.get((measurement, field), 0)


class ServiceMetrics:
    """Everything /metrics renders. One instance per app, on its own registry."""

    def __init__(self, pipeline: Pipeline, statuses: StatusSource = _no_collectors) -> None:
        self.registry = CollectorRegistry()
        # process_resident_memory_bytes and friends: memory must stay bounded by the fleet.
        ProcessCollector(registry=self.registry)
        self.tick_seconds = Histogram(
            "gpuhealth_score_tick_seconds", "Duration of a scoring tick (detectors, fusion, "
            "alert state machine, notifications)", buckets=_TICK_BUCKETS, registry=self.registry)
        self.ingest_seconds = Histogram(
            "gpuhealth_ingest_seconds", "Duration of ingesting one batch, by source",
            ["source"], buckets=_TICK_BUCKETS, registry=self.registry)
        self.scrape_seconds = _ScrapeTimes(self.registry)
        self.skipped = Counter(
            "gpuhealth_ticks_skipped", "Scheduled runs skipped because the previous run of the "
            "job was still going or ran too late (coalesced, never queued)", ["job"],
            registry=self.registry)
        self.job_errors = Counter(
            "gpuhealth_job_errors", "Scheduled runs that raised (a programmer or config error)",
            ["job"], registry=self.registry)
        self.write_requests = Counter(
            "gpuhealth_write_requests", "Line-protocol write requests by HTTP status",
            ["code"], registry=self.registry)
        self._pipeline = PipelineCollector(pipeline, statuses,
                                           last_scrape=self.scrape_seconds.last)
        self.registry.register(self._pipeline)
        # Sees each tick's result; builds on scrape.
        self.entities = EntityGauges(pipeline.identities.current)
        pipeline.observers.append(self.entities)
        self.registry.register(self.entities)
        self.ignored = IgnoredFields()
        self.registry.register(self.ignored)

    def track_collectors(self, statuses: StatusSource) -> None:
        """Export `collector_up` from this source (the scheduler, once it exists)."""
        self._pipeline.statuses = statuses

    def track_remote(self, remote: RemoteSource) -> None:
        """Export node agents' collectors from this source (the write endpoint's store)."""
        self._pipeline.remote = remote

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _http_closed() -> Metric:
    """Connections the server's guard closed (service.runtime.http_guard), by why."""
    from service.runtime.http_guard import CLOSE_REASONS, CLOSED

    fam = CounterMetricFamily(
        "gpuhealth_http_connections_closed", "Client connections the service closed: headers or "
        "body too slow or too large, evicted to make room at the connection cap, refused at it",
        labels=["reason"])
    for reason in CLOSE_REASONS:
        fam.add_metric([reason], float(CLOSED[reason]))
    return fam
