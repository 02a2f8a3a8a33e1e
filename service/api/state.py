"""The running service: what the lifespan builds, and the dependency handlers reach it by."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from threading import RLock
from typing import Annotated, Any

from fastapi import Depends, Request

from collectors.base import Collector, CollectorStatus
from collectors.schema import SchemaMapper
from service.api.coalesce import Coalescer
from service.errors import ServiceUnavailable
from service.pipeline import Pipeline
from service.runtime.metrics import ServiceMetrics
from service.runtime.remote_collectors import STALE_AFTER_ROUNDS, RemoteCollectors, RemoteStatus
from service.runtime.scheduler import Clock, TickScheduler
from service.settings import Settings
from service.tick import TracksCollectors


@dataclass(slots=True)
class Running:
    """What the lifespan builds; handlers find it on app.state.gpuhealth."""

    pipeline: Pipeline
    scheduler: TickScheduler
    metrics: ServiceMetrics
    clock: Clock
    collectors: list[Collector]
    # One mapper per strictness, kept across requests so the window store's slot cache (keyed
    # by entity-table identity) stays warm; mappers are not thread-safe, hence the lock.
    mappers: dict[bool, SchemaMapper] = field(default_factory=lambda: {
        True: SchemaMapper(strict=True), False: SchemaMapper(strict=False)})
    # Reentrant: a write's answer takes it around a whole parse on the event loop (write_answer).
    mapper_lock: RLock = field(default_factory=RLock)
    # Writes ingested together (service.api.coalesce); made by the first write when enabled.
    coalescer: Coalescer | None = None
    # Our agent's Arrow payloads (service.api.write_arrow): a collectors.arrow_batch.Decoder,
    # made on the first one (pyarrow is imported only then); safe from many threads.
    arrow: Any = None
    # Node agents' collector reports. A collector reads as down after STALE_AFTER_ROUNDS rounds
    # without one; agents are assumed to run at the service's collect interval.
    remote: RemoteCollectors = field(init=False)

    def __post_init__(self) -> None:
        for mapper in self.mappers.values():  # which label names a scraped sample's node
            mapper.node_name_from = tuple(self.settings.ingest.node_name_from)
        self.remote = RemoteCollectors(
            STALE_AFTER_ROUNDS * self.settings.service.collect_interval_s)
        self.metrics.track_remote(self.remote_statuses)
        for obs in self.pipeline.observers:
            if isinstance(obs, TracksCollectors):  # the InfluxDB sink records their health
                obs.track_collectors(self.collector_statuses)

    @property
    def settings(self) -> Settings:
        return self.pipeline.settings

    def now(self) -> float:
        """The service clock; wall time while a replay's data clock has no time yet."""
        now = self.clock()
        return time.time() if math.isnan(now) else now

    def scoring_problems(self) -> list[str]:
        """Why the service cannot score now: the newest tick failed, or no tick has succeeded
        for three score intervals while the scheduler runs (a stalled or wedged tick)."""
        p = self.pipeline
        if p.tick_error:
            return [f"scoring ticks are failing ({p.stats.tick_failures} so far): "
                    f"{p.tick_error}"]
        limit = max(3 * self.settings.service.score_interval_s, 30.0)
        if self.scheduler.running and p.last_tick_ok is not None and \
                time.monotonic() - p.last_tick_ok > limit:
            return [f"no scoring tick has succeeded for {time.monotonic() - p.last_tick_ok:.0f} s"]
        return []

    def remote_statuses(self) -> list[RemoteStatus]:
        return self.remote.statuses(self.now())

    def collector_statuses(self) -> dict[tuple[str, str], CollectorStatus]:
        """Every collector by (host, name): the service's own under host "" (as /metrics
        labels them), node agents' under their host."""
        own = {("", name): st for name, st in self.scheduler.statuses().items()}
        return {**own, **self.remote.as_collector_statuses(self.now())}


def _running(request: Request) -> Running:
    st: Running | None = getattr(request.app.state, "gpuhealth", None)
    if st is None:
        raise ServiceUnavailable("the service is starting or stopping")
    return st


State = Annotated[Running, Depends(_running)]
