"""The read endpoints: probes and metrics, fleet state, alerts."""

from __future__ import annotations

import sqlite3
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from service.api import peers
from service.api.auth import require
from service.api.bounded import AlertId
from service.api.cluster_truth import cluster_truth, truth_problems
from service.api.paging import PageDep
from service.api.principals import Permission
from service.api.problems import READ_ERRORS, problem_responses
from service.api.schemas import (
    AlertDetail,
    AlertList,
    CollectorOut,
    DetectorOut,
    GpuDetail,
    LevelChange,
    NodeDetail,
    NodeList,
    Readiness,
)
from service.api.state import Running, State
from service.api.views import alert_out, alerts_out, gpu_detail, model_out, node_detail, node_list
from service.errors import GpuhealthError, NotFound

router = APIRouter()
# Fleet and alert reads need a read token when `api.read_requires_token` is set; probes never.
READ = [Depends(require(Permission.READ))]
# On a sharded service, another shard's node is answered by its owner (service.api.peers).
AT_OWNER = [*READ, Depends(peers.at_owner)]


# ---- probes and metrics -------------------------------------------------------------------------

@router.get("/healthz", tags=["probes"], summary="The process is alive")
async def healthz() -> dict[str, str]:
    # On the event loop: a sync route waits for a free worker thread, and under a write
    # flood every one of them can be parsing (a liveness probe then waited 300 ms).
    return {"status": "ok"}


@router.get("/readyz", tags=["probes"], response_model=Readiness,
            responses={503: {"model": Readiness, "description": "Not ready, with the reasons"}},
            summary="Ready once a scoring tick has run, the shared state answers and every "
                    "collector is up")
def readyz(st: State) -> JSONResponse:
    statuses = st.scheduler.statuses()
    reasons = [] if st.pipeline.stats.ticks else ["no scoring tick has run yet"]
    reasons += _state_problems(st)
    reasons += st.scoring_problems()
    truth = cluster_truth(st.pipeline)
    reasons += truth_problems(truth)
    reasons += [f"collector {name} is down: {s.reason or 'no reason given'}"
                for name, s in sorted(statuses.items()) if not s.up]
    body = Readiness(ready=not reasons, reasons=reasons, collectors=_collectors(st),
                     model=model_out(st.pipeline), detectors={
                         n: DetectorOut(ok=not h.failing, errors=h.errors, reason=h.reason)
                         for n, h in st.pipeline.scorer.health.items()}, cluster=truth)
    return JSONResponse(body.model_dump(mode="json"), status_code=503 if reasons else 200)


@router.get("/v1/collectors", tags=["probes"], response_model=dict[str, CollectorOut],
            summary="Each collector's state, with the reason when it is down (on a sharded "
                    "service every shard's, keyed `<shard>/<collector>`)")
async def list_collectors(request: Request, st: State, fleet: peers.FleetDep,
                          partial: peers.Partial = False) -> dict[str, CollectorOut]:
    if fleet is not None:
        return await peers.collectors(request, fleet, lambda: _collectors(st), partial)
    return _collectors(st)


def _state_problems(st: Running) -> list[str]:
    """Why the shared state (alerts, tokens, silences: SQLite or PostgreSQL) cannot answer:
    a service without it can neither alert nor authenticate, so it is not ready."""
    try:
        st.pipeline.alerts.ping()
    except GpuhealthError as e:
        return [f"the shared state does not answer: {e.detail}"]
    except sqlite3.Error as e:
        return [f"the shared state does not answer: {e}"]
    return []


def _collectors(st: Running) -> dict[str, CollectorOut]:
    return {n: CollectorOut(up=s.up, reason=s.reason, exhausted=s.exhausted)
            for n, s in sorted(st.scheduler.statuses().items())}


@router.get("/metrics", tags=["probes"], response_class=Response, dependencies=READ,
            responses=READ_ERRORS,
            summary="Prometheus metrics in the text exposition format (a read token when "
                    "api.read_requires_token is set)")
def metrics(st: State) -> Response:
    body, content_type = st.metrics.render()
    return Response(body, media_type=content_type)


# ---- fleet state ----------------------------------------------------------------------------

@router.get("/v1/nodes", tags=["fleet"], dependencies=READ, response_model=NodeList,
            responses=problem_responses(400, 503) | READ_ERRORS,
            summary="Risk summary per node (on a sharded service, of every shard's nodes)")
async def list_nodes(
    request: Request,
    st: State,
    page: PageDep,
    fleet: peers.FleetDep,
    sort: Literal["risk", "node", "alerts"] = "risk",
    order: Annotated[Literal["asc", "desc"] | None,
                     Query(description="default: desc for risk and alerts, asc for node")] = None,
    partial: peers.Partial = False,
) -> NodeList:
    descending = (order or ("asc" if sort == "node" else "desc")) == "desc"

    def here() -> NodeList:
        return node_list(st.pipeline, sort, descending, page)

    if fleet is not None:
        return await peers.node_list(request, fleet, here, page, sort, descending, partial)
    return await run_in_threadpool(here)


@router.get("/v1/nodes/{node}", tags=["fleet"], dependencies=AT_OWNER,
            response_model=NodeDetail,
            responses=problem_responses(404, description="Unknown node")
            | problem_responses(503, description="The shard that owns the node did not answer")
            | READ_ERRORS,
            summary="A node's GPUs, NVLink links and IB ports with risk, level and explanation")
def get_node(st: State, node: str) -> NodeDetail:
    detail = node_detail(st.pipeline, node)
    if detail is None:
        raise NotFound(f"node {node!r} is not known: no sample has named it")
    return detail


@router.get("/v1/gpus/{gpu}", tags=["fleet"], dependencies=AT_OWNER, response_model=GpuDetail,
            responses=problem_responses(404, description="Unknown GPU, or not a GPU key")
            | problem_responses(503, description="The shard that owns the node did not answer")
            | READ_ERRORS,
            summary="Latest metrics, risk, explanation, links and open alerts of one GPU")
def get_gpu(st: State, gpu: str) -> GpuDetail:
    detail = gpu_detail(st.pipeline, gpu)
    if isinstance(detail, str):
        raise NotFound(detail)
    return detail


_LEVEL_DOC = "alerts that reached at least this level (1 record, 2 email, 3 page)"


@router.get("/v1/alerts", tags=["alerts"], dependencies=READ, response_model=AlertList,
            responses=problem_responses(400) | READ_ERRORS, summary="Alerts, newest first")
def list_alerts(
    st: State,
    page: PageDep,
    level: Annotated[int | None, Query(ge=1, le=3, description=_LEVEL_DOC)] = None,
    state: Literal["firing", "resolved"] | None = None,
    node: str | None = None,
    entity: str | None = None,
) -> AlertList:
    after = page.after("alerts", (float, int))
    found = st.pipeline.alerts.find(level=level, state=state, node=node, entity=entity,
                                    limit=page.limit + 1,
                                    before=None if after is None else (float(after[0]),
                                                                       int(after[1])))
    rows, next_cursor = page.slice("alerts", found, lambda a: (a.started_at, a.id), 0)
    return AlertList(limit=page.limit, next_cursor=next_cursor,
                     alerts=alerts_out(st.pipeline, rows))


@router.get("/v1/alerts/{alert_id}", tags=["alerts"], dependencies=READ, response_model=AlertDetail,
            responses=problem_responses(404, description="Unknown alert") | READ_ERRORS,
            summary="One alert with its history of level changes")
def get_alert(st: State, alert_id: AlertId) -> AlertDetail:
    alert = st.pipeline.alerts.get(alert_id)
    if alert is None:
        raise NotFound(f"alert {alert_id} does not exist")
    history = [LevelChange(at=h["at"], old_level=int(h["old_level"]),
                           new_level=int(h["new_level"]), risk=h["risk"])
               for h in st.pipeline.alerts.history(alert_id)]
    return AlertDetail(**alert_out(st.pipeline, alert).model_dump(), history=history)
