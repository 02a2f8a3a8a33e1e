"""The app factory: the lifespan that builds and tears down the service, and the routes."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from apscheduler.schedulers.background import BackgroundScheduler
from fastapi import Depends, FastAPI
from fastapi.concurrency import run_in_threadpool

from collectors.base import Closes, Collector, Starts
from service.api import (
    alerting,
    cluster,
    diagnostics,
    fleet,
    history,
    models,
    openapi,
    peers,
    problems,
    read,
    runbooks,
    verdicts,
    write,
)
from service.api.auth import ApiAuth, require
from service.api.principals import Permission
from service.api.shard_route import ShardRoute
from service.api.state import Running
from service.api.write_lean import LeanWrite
from service.cluster.roles import LeasedRoles
from service.console import routes as console
from service.pipeline import Pipeline, build_pipeline
from service.runtime import gc_policy
from service.runtime.metrics import ServiceMetrics
from service.runtime.rebalance import follow_membership
from service.runtime.retrain import start_retraining
from service.runtime.scheduler import Clock, TickScheduler
from service.runtime.warm import warm_start_from_settings
from service.settings import Settings

log = logging.getLogger(__name__)

PipelineFactory = Callable[[], Pipeline]
CollectorFactory = Callable[[Pipeline], Sequence[Collector]]


def create_app(
    source: Settings | PipelineFactory | None = None,
    *,
    collectors: Sequence[Collector] | CollectorFactory = (),
    clock: Clock = time.time,
    schedule: bool = True,
    wall_clock: Clock = time.time,
    lean_write: bool = True,
) -> FastAPI:
    """The service. `source` is the settings to build a Pipeline from, or a factory that builds
    one; `collectors` (or a factory given the pipeline) feed the scheduler's collect jobs;
    `clock` gives the time ingest and scoring run at (a replay's data time); `wall_clock` the
    time token expiry, rate limits and idempotency keys run at, which is never data time (a
    replay must not revive an expired token or refill a rate limit by jumping ahead).
    `schedule=False` builds everything but leaves the jobs to the caller
    (app.state.gpuhealth.scheduler), as tests do. `lean_write=False` leaves every write to the
    FastAPI routes (service.api.write_lean says what the lean route answers; the benchmark
    measures both)."""
    if source is None or isinstance(source, Settings):
        settings = source or Settings()

        def factory() -> Pipeline:
            return build_pipeline(settings)
    else:
        factory = source

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pipeline = factory()
        scheduler: TickScheduler | None = None
        retraining: BackgroundScheduler | None = None
        found: list[Collector] = []
        policy_installed = False
        try:
            # Before the first live round, so detectors continue from where they stopped.
            # With live membership the shard owns nothing yet: its nodes are warm-started
            # when the map gives them to it (service.runtime.rebalance).
            if follow_membership(pipeline, clock) is None:
                await run_in_threadpool(warm_start_from_settings, pipeline, clock())
            found = list(collectors(pipeline) if callable(collectors) else collectors)
            if pipeline.diagnostics is not None:  # its runs and events at the service's time
                pipeline.diagnostics.clock = clock
            metrics = ServiceMetrics(pipeline)
            svc = pipeline.settings.service
            scheduler = TickScheduler(pipeline, found, clock=clock, metrics=metrics,
                                      collect_interval_s=svc.collect_interval_s,
                                      score_interval_s=svc.score_interval_s)
            metrics.track_collectors(scheduler.statuses)
            for c in found:
                if isinstance(c, Starts):
                    _guarded(c, c.start)
            # Tokens, idempotency keys and rate limits live beside the alerts.
            app.state.gpuhealth_auth = ApiAuth.open(pipeline.db, pipeline.settings.api,
                                                     wall_clock)
            app.state.gpuhealth = Running(pipeline, scheduler, metrics, clock, found)
            if isinstance(pipeline.cluster, LeasedRoles):
                pipeline.cluster.start()  # before the first tick asks for its roles
            if schedule:
                scheduler.start()
                retraining = start_retraining(pipeline)
            # What start-up loaded (modules, the model, warm-started state) lives as long as
            # the process, and so does what survives a full collection: out of the collector's
            # scans, a full collection under a burst of writes pauses every thread for what
            # arrived since the last one, not for everything (service.runtime.gc_policy).
            gc_policy.POLICY.install()
            policy_installed = True
            yield
        finally:
            app.state.gpuhealth = None
            auth = getattr(app.state, "gpuhealth_auth", None)
            app.state.gpuhealth_auth = None
            if auth is not None:
                auth.close()
            history.close_history(app)
            if retraining is not None:
                retraining.shutdown(wait=False)
            if scheduler is not None:
                # Shutdown waits for a running tick: keep the event loop free meanwhile.
                await run_in_threadpool(scheduler.shutdown)
            for c in found:
                if isinstance(c, Closes):
                    _guarded(c, c.close)
            pipeline.close()
            if policy_installed:
                gc_policy.POLICY.uninstall()

    # The docs are served from the service's own assets (service.console), never a CDN.
    app = FastAPI(title="gpuhealth", version="0.1.0", lifespan=lifespan,
                  description="Predictive health monitoring for GPU training clusters",
                  docs_url=None, redoc_url=None)
    # Every error as a problem detail (RFC 9457); the InfluxDB endpoints InfluxDB's way.
    problems.install(app, influxdb_paths=write.INFLUXDB_PATHS)
    openapi.install(app, influxdb_paths=write.INFLUXDB_PATHS)
    # Another shard's node read here: its owner answers (service.api.peers).
    app.add_exception_handler(peers.AtOwner, peers.answer_at_owner)
    app.include_router(read.router)
    app.include_router(fleet.router)
    app.include_router(write.router)
    app.include_router(history.router, dependencies=[Depends(require(Permission.READ)),
                                                     Depends(peers.history_at_owner)],
                       responses=problems.READ_ERRORS)
    app.include_router(alerting.router)
    app.include_router(diagnostics.router)
    app.include_router(verdicts.router)
    app.include_router(runbooks.router)
    app.include_router(models.router)
    app.include_router(cluster.router)
    console.install(app)
    if lean_write:
        app.add_middleware(LeanWrite)
    if not isinstance(source, Settings | None) or settings.cluster.shards or \
            settings.cluster.membership == "postgres":
        # Outermost: other shards' nodes redirected, split or refused (service.api.shard_route).
        app.add_middleware(ShardRoute)
    return app


def _guarded(obj: object, method: Callable[[], None]) -> None:
    """A collector's start or close that fails is logged; the service goes on."""
    try:
        method()
    except Exception:
        log.exception("%s.%s() failed", type(obj).__name__, method.__name__)
