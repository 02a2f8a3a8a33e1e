"""The running service: what the lifespan builds, and the dependency handlers reach it by."""

from __future__ import annotations

from dataclasses import dataclass, field
from threading import Lock
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from collectors.base import Collector
from collectors.schema import SchemaMapper
from service.metrics import ServiceMetrics
from service.pipeline import Pipeline
from service.scheduler import Clock, TickScheduler
from service.settings import Settings


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
    mapper_lock: Lock = field(default_factory=Lock)

    @property
    def settings(self) -> Settings:
        return self.pipeline.settings


def _running(request: Request) -> Running:
    st: Running | None = getattr(request.app.state, "gpuhealth", None)
    if st is None:
        raise HTTPException(503, "the service is starting or stopping")
    return st


State = Annotated[Running, Depends(_running)]
