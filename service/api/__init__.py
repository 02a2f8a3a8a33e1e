"""The HTTP API: the FastAPI app factory, its lifespan, the read endpoints and line-protocol
writes (InfluxDB v1-compatible `/write`).

The API reads the state the stages leave behind (pipeline.risk, .alerts, .store, .events,
.stats) and never reaches into a stage's internals (DESIGN.md). Reads of the live window store
hold the pipeline lock so they never see half an ingest; the risk snapshot is replaced, never
changed, at each tick. Alert-store queries run outside the pipeline lock to keep it short.

Role files: schemas (wire shapes), state (what the lifespan builds), views (pipeline state to
wire shapes), read (probes, fleet and alert endpoints), write (line-protocol ingest), app (the
factory and its lifespan).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.api.app import CollectorFactory, PipelineFactory, create_app
    from service.api.state import Running

__all__ = ["CollectorFactory", "PipelineFactory", "Running", "create_app"]


def __getattr__(name: str) -> Any:
    # Lazy: the settings import service.api.auth, and the app imports the settings.
    if name == "Running":
        from service.api.state import Running

        return Running
    if name in __all__:
        from service.api import app

        return getattr(app, name)
    raise AttributeError(name)
