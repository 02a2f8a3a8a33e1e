"""InfluxDB as the service's store: a Sink for what ingest accepted (samples, derived rates,
events) and a TickObserver for what scoring decided (risk, alerts, deliveries, collector
health). Both only format lines and hand them to the spooler, so the ingest and tick paths
never wait on InfluxDB; the spooler's thread delivers them. The hour tier
(service.history.influx.hour_tier) goes through a second, small spooler of its own: it is
written to its own retention policy, and a write names one."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from collectors.agent.spool import Spool
from collectors.base import CollectorStatus
from models.detectors.view import FleetView
from service.history.influx.client import InfluxClient, InfluxError
from service.history.influx.hour_tier import HourWriter
from service.history.influx.lines import LineWriter
from service.history.influx.record import TickRecorder
from service.history.influx.schema import HOUR_RP, ensure_schema
from service.history.influx.settings import InfluxSettings
from service.history.influx.spooler import Spooler
from service.stages.ingest import IngestResult
from service.tick import TickResult

log = logging.getLogger(__name__)

Statuses = Callable[[], Mapping[tuple[str, str], CollectorStatus]]


def _no_statuses() -> Mapping[tuple[str, str], CollectorStatus]:
    return {}


class InfluxSink:
    def __init__(self, client: InfluxClient, spool: Spool, *, cluster: str = "default",
                 batch_lines: int = 50_000, manage_schema: bool = False,
                 retention: tuple[str, str] = ("14d", "400d"),
                 backoff_s: tuple[float, float] = (0.5, 30.0), start: bool = True,
                 hours: tuple[InfluxClient, Spool] | None = None) -> None:
        """`hours`: the client (naming the hour tier's retention policy) and spool the hour
        tier is written through; None: no hour tier."""
        self.client = client
        self.lines = LineWriter(cluster)
        self.recorder = TickRecorder(cluster)
        self.statuses: Statuses = _no_statuses
        self._schema_pending = manage_schema
        self._retention = retention
        # Started only once assigned: the sender's first act is `_schema`, which reads
        # `self.spooler` when InfluxDB is unreachable; a thread started inside the Spooler's
        # constructor could get there first and die (InfluxDB down as the service starts).
        self.spooler = Spooler(spool, client.write, batch_lines=batch_lines, backoff_s=backoff_s,
                               before_send=self._schema, start=False)
        self.hour_lines = HourWriter(cluster)
        self._fleet: FleetView | None = None
        self.hour_spooler: Spooler | None = None
        if hours is not None:
            self.hour_client = hours[0]
            self.hour_spooler = Spooler(hours[1], hours[0].write, batch_lines=batch_lines,
                                        backoff_s=backoff_s, before_send=self._schema,
                                        start=False)
        self._closed = False
        if start:
            self.spooler.start()
            if self.hour_spooler is not None:
                self.hour_spooler.start()

    @classmethod
    def from_settings(cls, cfg: InfluxSettings, spool_dir: Path) -> InfluxSink:
        """The sink `storage.influxdb` describes, spooling under `spool_dir`."""
        # With the schema ours, the hour tier has its long-lived policy; otherwise it goes
        # where the samples go (docs/influxdb.md: 2.x and 3.x map a policy to a bucket).
        hour_cfg = cfg.model_copy(update={"retention_policy": HOUR_RP}) \
            if cfg.manage_schema else cfg
        hours = (InfluxClient(hour_cfg),
                 Spool(spool_dir.with_name(spool_dir.name + "-1h"),
                       max(16 << 20, (cfg.spool_mb << 20) // 16)))
        return cls(InfluxClient(cfg), Spool(spool_dir, cfg.spool_mb << 20),
                   cluster=cfg.cluster, batch_lines=cfg.batch_lines,
                   manage_schema=cfg.manage_schema,
                   retention=(cfg.raw_retention, cfg.rollup_retention), hours=hours)

    def _schema(self) -> bool:
        """Create the database and policies before the first delivery (InfluxDB may come up
        after the service; until it does, points wait in the spool)."""
        if not self._schema_pending:
            return True
        try:
            ensure_schema(self.client, *self._retention)
        except InfluxError as exc:
            self.spooler.stats.last_error = str(exc)
            self.spooler.stats.up = False
            return False
        self._schema_pending = False
        return True

    def track_collectors(self, statuses: Statuses) -> None:
        self.statuses = statuses

    def track_store(self, fleet: FleetView) -> None:
        """The window store whose finished hours the hour tier stores (service.pipeline)."""
        self._fleet = fleet

    # ---- Sink -----------------------------------------------------------------------------------
    def write(self, result: IngestResult) -> None:
        self.spooler.put(self.lines.batch(result.clean, result.rates, result.derived))
        if self._fleet is not None and self.hour_spooler is not None:
            hours = self.hour_lines.lines(self._fleet)
            if hours:
                self.hour_spooler.put(hours)

    # ---- TickObserver ---------------------------------------------------------------------------
    def observe(self, tick: TickResult) -> None:
        rec = self.recorder
        self.spooler.put(rec.risk(tick.risk, tick.levels, tick.derived))
        if tick.changed:
            self.spooler.put(rec.alerts(tick.changed))
        if tick.deliveries:
            self.spooler.put(rec.deliveries(tick.deliveries))
        if tick.audit:
            self.spooler.put(rec.actions(tick.audit))
        if tick.labels:
            self.spooler.put(rec.labels(tick.labels))
        statuses = self.statuses()
        if statuses:
            self.spooler.put(rec.collectors(statuses, tick.at))

    def flush(self, timeout_s: float = 30.0) -> bool:
        ok = self.spooler.flush(timeout_s)
        return (self.hour_spooler is None or self.hour_spooler.flush(timeout_s)) and ok

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.spooler.flush(5.0)
        self.spooler.close()
        self.client.close()
        if self.hour_spooler is not None:
            self.hour_spooler.flush(5.0)
            self.hour_spooler.close()
            self.hour_client.close()
