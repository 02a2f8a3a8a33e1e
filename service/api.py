"""The HTTP API: the FastAPI app factory, its lifespan, the read endpoints and line-protocol
writes (InfluxDB v1-compatible `/write`).

The API reads the state the stages leave behind (pipeline.risk, .alerts, .store, .events,
.stats) and never reaches into a stage's internals (DESIGN.md). Reads of the live window store
hold the pipeline lock so they never see half an ingest; the risk snapshot is replaced, never
changed, at each tick. Alert-store queries run outside the pipeline lock to keep it short.
"""

from __future__ import annotations

import logging
import math
import time
import zlib
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from threading import Lock
from typing import Annotated, Any, Literal

import numpy as np
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from collectors.base import Collector
from collectors.catalog import CATALOG, Scope
from collectors.frames import Entity, Rejection
from collectors.schema import SchemaMapper
from models.detectors.findings import Signal
from service.alert_store import Alert
from service.ingest import IngestResult
from service.metrics import ServiceMetrics
from service.pipeline import Pipeline
from service.scheduler import Clock, TickScheduler
from service.scoring import SCOPES, RiskState
from service.settings import Settings

log = logging.getLogger(__name__)

PipelineFactory = Callable[[], Pipeline]
CollectorFactory = Callable[[Pipeline], Sequence[Collector]]
Precision = Literal["ns", "n", "us", "u", "ms", "s", "m", "h"]  # InfluxDB v1 and v2 spellings
ALL = 1_000_000  # "no limit" for alert-store queries scoped to one node


# ---- wire shapes ----------------------------------------------------------------------------

class SignalOut(BaseModel):
    rule: str
    signal: str
    value: float | None
    threshold: float | None
    risk: float
    hard: bool


class TopSignal(BaseModel):
    entity: str
    rule: str
    signal: str
    risk: float


class NodeSummary(BaseModel):
    node: str
    risk: float | None  # None until a tick has scored the node
    level: int  # level of the node's worst open alert, 0 when none
    gpus: int
    links: int
    ports: int
    alerts: int  # open alerts
    top_signal: TopSignal | None


class NodeList(BaseModel):
    total: int
    limit: int
    offset: int
    nodes: list[NodeSummary]


class EntityOut(BaseModel):
    entity: str
    scope: str
    risk: float | None
    level: int
    explanation: list[SignalOut]  # empty while risk is zero


class AlertOut(BaseModel):
    id: int
    entity: str
    scope: str
    node: str
    level: int
    peak_level: int
    state: str
    risk: float
    started_at: float
    updated_at: float
    resolved_at: float | None
    explanation: list[SignalOut]


class LevelChange(BaseModel):
    at: float
    old_level: int
    new_level: int
    risk: float


class AlertDetail(AlertOut):
    history: list[LevelChange]


class AlertList(BaseModel):
    limit: int
    offset: int
    alerts: list[AlertOut]


class NodeDetail(BaseModel):
    node: str
    risk: float | None
    level: int
    gpus: list[EntityOut]
    links: list[EntityOut]
    ports: list[EntityOut]
    alerts: list[AlertOut]


class MetricOut(BaseModel):
    name: str
    unit: str
    kind: str
    value: float | None  # None: never reported
    ts: float | None


class GpuDetail(BaseModel):
    gpu: str
    node: str
    risk: float | None
    level: int
    metrics: list[MetricOut]
    explanation: list[SignalOut]
    links: list[EntityOut]
    alerts: list[AlertOut]  # open alerts of the GPU and of its NVLink links


class CollectorOut(BaseModel):
    up: bool
    reason: str
    exhausted: bool


class Readiness(BaseModel):
    ready: bool
    reasons: list[str]
    collectors: dict[str, CollectorOut]


class RejectionOut(BaseModel):
    line: int | None
    reason: str
    entity: str | None
    metric: str | None


class WriteError(BaseModel):
    error: str  # InfluxDB's error key, which Telegraf logs
    accepted: int = 0
    rejected: int = 0
    rejections: list[RejectionOut] = []


# ---- the running service ----------------------------------------------------------------------

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
router = APIRouter()


# ---- probes and metrics -------------------------------------------------------------------------

@router.get("/healthz", tags=["probes"], summary="The process is alive")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", tags=["probes"], response_model=Readiness,
            responses={503: {"model": Readiness, "description": "Not ready, with the reasons"}},
            summary="Ready once a scoring tick has run and every collector is up")
def readyz(st: State) -> JSONResponse:
    statuses = st.scheduler.statuses()
    reasons = [] if st.pipeline.stats.ticks else ["no scoring tick has run yet"]
    reasons += [f"collector {name} is down: {s.reason or 'no reason given'}"
                for name, s in sorted(statuses.items()) if not s.up]
    body = Readiness(ready=not reasons, reasons=reasons, collectors=_collectors(st))
    return JSONResponse(body.model_dump(), status_code=503 if reasons else 200)


@router.get("/v1/collectors", tags=["probes"], response_model=dict[str, CollectorOut],
            summary="Each collector's state, with the reason when it is down")
def list_collectors(st: State) -> dict[str, CollectorOut]:
    return _collectors(st)


def _collectors(st: Running) -> dict[str, CollectorOut]:
    return {n: CollectorOut(up=s.up, reason=s.reason, exhausted=s.exhausted)
            for n, s in sorted(st.scheduler.statuses().items())}


@router.get("/metrics", tags=["probes"], response_class=Response,
            summary="Prometheus metrics in the text exposition format")
def metrics(st: State) -> Response:
    body, content_type = st.metrics.render()
    return Response(body, media_type=content_type)


# ---- fleet state ----------------------------------------------------------------------------

@router.get("/v1/nodes", tags=["fleet"], response_model=NodeList,
            summary="Risk summary per node")
def list_nodes(
    st: State,
    sort: Literal["risk", "node", "alerts"] = "risk",
    order: Annotated[Literal["asc", "desc"] | None,
                     Query(description="default: desc for risk and alerts, asc for node")] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> NodeList:
    descending = (order or ("asc" if sort == "node" else "desc")) == "desc"
    return _node_list(st.pipeline, sort, descending, limit, offset)


@router.get("/v1/nodes/{node}", tags=["fleet"], response_model=NodeDetail,
            responses={404: {"description": "Unknown node"}},
            summary="A node's GPUs, NVLink links and IB ports with risk, level and explanation")
def get_node(st: State, node: str) -> NodeDetail:
    detail = _node_detail(st.pipeline, node)
    if detail is None:
        raise HTTPException(404, f"node {node!r} is not known: no sample has named it")
    return detail


@router.get("/v1/gpus/{gpu}", tags=["fleet"], response_model=GpuDetail,
            responses={404: {"description": "Unknown GPU, or not a GPU key"}},
            summary="Latest metrics, risk, explanation, links and open alerts of one GPU")
def get_gpu(st: State, gpu: str) -> GpuDetail:
    detail = _gpu_detail(st.pipeline, gpu)
    if isinstance(detail, str):
        raise HTTPException(404, detail)
    return detail


_LEVEL_DOC = "alerts that reached at least this level (1 record, 2 email, 3 page)"


@router.get("/v1/alerts", tags=["alerts"], response_model=AlertList,
            summary="Alerts, newest first")
def list_alerts(
    st: State,
    level: Annotated[int | None, Query(ge=1, le=3, description=_LEVEL_DOC)] = None,
    state: Literal["firing", "resolved"] | None = None,
    node: str | None = None,
    entity: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> AlertList:
    found = st.pipeline.alerts.find(level=level, state=state, node=node, entity=entity,
                                    limit=limit, offset=offset)
    return AlertList(limit=limit, offset=offset, alerts=[_alert(a) for a in found])


@router.get("/v1/alerts/{alert_id}", tags=["alerts"], response_model=AlertDetail,
            responses={404: {"description": "Unknown alert"}},
            summary="One alert with its history of level changes")
def get_alert(st: State, alert_id: int) -> AlertDetail:
    alert = st.pipeline.alerts.get(alert_id)
    if alert is None:
        raise HTTPException(404, f"alert {alert_id} does not exist")
    history = [LevelChange(at=h["at"], old_level=int(h["old_level"]),
                           new_level=int(h["new_level"]), risk=h["risk"])
               for h in st.pipeline.alerts.history(alert_id)]
    return AlertDetail(**_alert(alert).model_dump(), history=history)


# ---- line-protocol writes -------------------------------------------------------------------

_WRITE_DOC = """Line protocol, plain or `Content-Encoding: gzip`: our own schema (`gpu`, `nvlink`,
`ib_port`, `xid`) or Telegraf's `nvidia_smi` and `infiniband`. 204 when every line was
accepted; 400 listing each rejected line (number and reason) while every valid sample is kept;
413 when the body, or what it inflates to, is over the limit. `strict=false` ignores
measurements and fields the catalog does not track instead of rejecting them."""
_WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": WriteError}, 413: {"model": WriteError}, 415: {"model": WriteError}}


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@router.post("/write", tags=["ingest"], status_code=204, response_class=Response,
             operation_id="write_influxdb_v1", summary="Write line protocol (InfluxDB v1 path)",
             description=_WRITE_DOC, responses=_WRITE_ERRORS)
@router.post("/v1/write", tags=["ingest"], status_code=204, response_class=Response,
             operation_id="write", summary="Write line protocol", description=_WRITE_DOC,
             responses=_WRITE_ERRORS)
async def write(
    request: Request,
    st: State,
    db: Annotated[str | None, Query(description="accepted for InfluxDB compatibility")] = None,
    precision: Precision = "ns",
    strict: bool = True,
) -> Response:
    limit = st.settings.ingest.max_body_bytes
    try:
        body = await _read_body(request, limit)
        data = _inflate(body, request.headers.get("content-encoding", ""), limit)
    except _Refused as r:
        st.metrics.write_requests.labels(str(r.status)).inc()
        return JSONResponse(WriteError(error=r.message).model_dump(), status_code=r.status)
    # Parsing and ingest are CPU work under locks: keep them off the event loop.
    res = await run_in_threadpool(_ingest_lines, st, data, precision, strict)
    if not res.rejected:
        st.metrics.write_requests.labels("204").inc()
        return Response(status_code=204)
    st.metrics.write_requests.labels("400").inc()
    first = f"; first: {res.rejections[0]}" if res.rejections else ""
    err = WriteError(error=f"partial write: {res.rejected} rejected, {res.accepted} samples "
                           f"kept{first}",
                     accepted=res.accepted, rejected=res.rejected,
                     rejections=[_rejection(r) for r in res.rejections])
    return JSONResponse(err.model_dump(), status_code=400)


async def _read_body(request: Request, limit: int) -> bytes:
    too_big = _Refused(413, f"request body exceeds the limit of {limit} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_big  # refused before reading a byte of it
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_big
    return bytes(body)


def _inflate(body: bytes, encoding: str, limit: int) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise _Refused(415, f"unsupported Content-Encoding {encoding!r}; send gzip or none")
    # Bounded inflation: a small gzip bomb must not expand past the body limit in memory.
    out = bytearray()
    rest = body
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += d.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            raise _Refused(400, f"body is not valid gzip: {exc}") from None
        if len(out) > limit or d.unconsumed_tail:
            raise _Refused(413, f"decompressed body exceeds the limit of {limit} bytes")
        if not d.eof:
            raise _Refused(400, "gzip body is truncated")
        rest = d.unused_data  # concatenated gzip members form one stream
    return bytes(out)


def _ingest_lines(st: Running, data: bytes, precision: str, strict: bool) -> IngestResult:
    now = st.clock()
    if math.isnan(now):  # a replay's data clock before its first round
        now = time.time()
    with st.mapper_lock:
        # Lines without a timestamp get the server's time, as InfluxDB does.
        batch = st.mappers[strict].parse(
            data, default_ts_ns=int(now * 1e9), precision=precision,
            max_lines=st.settings.ingest.max_lines_per_request, max_bytes=None)
    t0 = time.perf_counter()
    res = st.pipeline.ingest(batch, now)
    st.metrics.ingest_seconds.labels("write").observe(time.perf_counter() - t0)
    return res


# ---- views: pipeline state to wire shapes -------------------------------------------------------

def _num(x: object) -> float | None:
    """JSON has no NaN: missing or undefined values travel as null."""
    if x is None or isinstance(x, bool) or not isinstance(x, int | float | np.floating):
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def _signal(s: Signal) -> SignalOut:
    return SignalOut(rule=s.rule, signal=s.signal, value=_num(s.value),
                     threshold=_num(s.threshold), risk=s.risk, hard=s.hard)


def _alert(a: Alert) -> AlertOut:
    expl = [SignalOut(rule=str(d.get("rule", "")), signal=str(d.get("signal", "")),
                      value=_num(d.get("value")), threshold=_num(d.get("threshold")),
                      risk=_num(d.get("risk")) or 0.0, hard=bool(d.get("hard", False)))
            for d in a.explanation]
    return AlertOut(id=a.id, entity=a.entity, scope=str(a.scope), node=a.node, level=a.level,
                    peak_level=a.peak_level, state=a.state, risk=a.risk,
                    started_at=a.started_at, updated_at=a.updated_at,
                    resolved_at=a.resolved_at, explanation=expl)


def _rejection(r: Rejection) -> RejectionOut:
    return RejectionOut(line=r.line, reason=r.reason, entity=r.entity, metric=r.metric)


def _entity(risk: RiskState | None, scope: Scope, e: Entity, slot: int,
            levels: dict[str, int]) -> EntityOut:
    r: float | None = None
    expl: list[SignalOut] = []
    if risk is not None and slot < len(risk.scopes[scope].risk):  # else new since the tick
        sr = risk.scopes[scope]
        r = float(sr.risk[slot])
        if r > 0:
            expl = [_signal(s) for s in sr.explain(slot)]
    return EntityOut(entity=e.key, scope=str(scope), risk=r, level=levels.get(e.key, 0),
                     explanation=expl)


def _node_list(p: Pipeline, sort: str, descending: bool, limit: int, offset: int) -> NodeList:
    open_alerts = p.alerts.open_alerts()
    n_alerts: dict[str, int] = defaultdict(int)
    level: dict[str, int] = defaultdict(int)
    for a in open_alerts:
        n_alerts[a.node] += 1
        level[a.node] = max(level[a.node], a.level)
    with p.lock:
        risk = p.risk
        names = list(p.store.registry.nodes)
        counts = {}
        for s in SCOPES:
            w = p.store[s]
            node_of = w.node_of[: len(w)]
            counts[s] = np.bincount(node_of[node_of >= 0], minlength=len(names))
        top = _riskiest(p, risk)
    # Registry order is append-only, so a tick's node list is a prefix of the live one.
    node_risk: list[float | None] = [None] * len(names)
    if risk is not None:
        node_risk[: len(risk.nodes)] = [float(x) for x in risk.nodes]
    ranked = [-1.0 if r is None else r for r in node_risk]  # unscored sorts below zero risk
    order = sorted(range(len(names)), key=lambda i: names[i])  # ties stay in name order
    if sort == "risk":
        order.sort(key=lambda i: ranked[i], reverse=descending)
    elif sort == "alerts":
        order.sort(key=lambda i: n_alerts[names[i]], reverse=descending)
    elif descending:
        order.reverse()
    rows = []
    for i in order[offset: offset + limit]:
        name = names[i]
        rows.append(NodeSummary(
            node=name, risk=node_risk[i], level=level[name], gpus=int(counts[Scope.GPU][i]),
            links=int(counts[Scope.NVLINK][i]), ports=int(counts[Scope.IB_PORT][i]),
            alerts=n_alerts[name], top_signal=top.get(i)))
    return NodeList(total=len(names), limit=limit, offset=offset, nodes=rows)


def _riskiest(p: Pipeline, risk: RiskState | None) -> dict[int, TopSignal]:
    """Per node slot, the top signal of its riskiest entity. Only entities above zero are
    looked at, so a healthy fleet costs a comparison per entity and no Python loop."""
    best: dict[int, tuple[float, Scope, int]] = {}
    if risk is None:
        return {}
    for scope in SCOPES:
        r = risk.scopes[scope].risk
        idx = np.flatnonzero(r > 0)
        if not len(idx):
            continue
        nodes = p.store[scope].node_of[idx]
        order = np.lexsort((-r[idx], nodes))
        uniq, first = np.unique(nodes[order], return_index=True)
        for node, j in zip(uniq.tolist(), first.tolist(), strict=True):
            slot = int(idx[order[j]])
            if node not in best or r[slot] > best[node][0]:
                best[node] = (float(r[slot]), scope, slot)
    out: dict[int, TopSignal] = {}
    for node, (r_max, scope, slot) in best.items():
        signals = risk.scopes[scope].explain(slot)
        if signals:
            out[node] = TopSignal(entity=p.store[scope].entities[slot].key,
                                  rule=signals[0].rule, signal=signals[0].signal, risk=r_max)
    return out


def _node_detail(p: Pipeline, node: str) -> NodeDetail | None:
    alerts = p.alerts.find(state="firing", node=node, limit=ALL)
    levels = {a.entity: a.level for a in alerts}
    lists: dict[Scope, list[EntityOut]] = {}
    with p.lock:
        try:
            node_slot = p.store.registry.nodes.index(node)
        except ValueError:
            return None
        risk = p.risk
        for scope in SCOPES:
            w = p.store[scope]
            slots = np.flatnonzero(w.node_of[: len(w)] == node_slot)
            lists[scope] = [_entity(risk, scope, w.entities[i], i, levels)
                            for i in map(int, slots)]
    return NodeDetail(node=node, risk=None if risk is None else risk.node(node),
                      level=max(levels.values(), default=0), gpus=lists[Scope.GPU],
                      links=lists[Scope.NVLINK], ports=lists[Scope.IB_PORT],
                      alerts=[_alert(a) for a in alerts])


def _gpu_detail(p: Pipeline, key: str) -> GpuDetail | str:
    """The GPU's view, or why there is none (the 404 message)."""
    try:
        e = Entity.parse(key)
    except ValueError:
        e = Entity(Scope.NODE, key)
    if e.scope is not Scope.GPU:
        return f"{key!r} is not a GPU key: expected <node>:gpu<index>, e.g. n001:gpu3"
    e = Entity.gpu(e.node, int(e.unit))  # 'gpu03' and 'gpu3' name one GPU
    mine = [a for a in p.alerts.find(state="firing", node=e.node, limit=ALL)
            if a.entity == e.key or a.entity.startswith(e.key + ":")]
    levels = {a.entity: a.level for a in mine}
    with p.lock:
        w = p.store[Scope.GPU]
        slot = w.slot(e)
        if slot is None:
            return f"GPU {e.key!r} is not known: no sample has named it"
        metrics = [MetricOut(name=m.name, unit=m.unit, kind=str(m.kind),
                             value=_num(w.last_val[slot, j]), ts=_num(w.last_ts[slot, j]))
                   for j, m in enumerate(w.metrics)]
        metrics += _latest_events(p, e.key)
        risk = p.risk
        me = _entity(risk, Scope.GPU, e, slot, levels)
        lw = p.store[Scope.NVLINK]
        links = [_entity(risk, Scope.NVLINK, lw.entities[i], i, levels)
                 for i in map(int, np.flatnonzero(lw.gpu_of[: len(lw)] == slot))]
    return GpuDetail(gpu=e.key, node=e.node, risk=me.risk, level=me.level, metrics=metrics,
                     explanation=me.explanation, links=links, alerts=[_alert(a) for a in mine])


def _latest_events(p: Pipeline, key: str) -> list[MetricOut]:
    """The newest value of each event metric (Xid) of the GPU; call under the pipeline lock."""
    wanted = {m.name: m for m in CATALOG.events(Scope.GPU)}
    found: dict[str, MetricOut] = {}
    for ev in reversed(p.events.events):
        if ev.entity == key and ev.metric in wanted and ev.metric not in found:
            m = wanted[ev.metric]
            found[m.name] = MetricOut(name=m.name, unit=m.unit, kind=str(m.kind),
                                      value=ev.value, ts=ev.ts)
            if len(found) == len(wanted):
                break
    return [found.get(m.name) or MetricOut(name=m.name, unit=m.unit, kind=str(m.kind),
                                           value=None, ts=None) for m in wanted.values()]


# ---- the app ---------------------------------------------------------------------------------

def create_app(
    source: Settings | PipelineFactory | None = None,
    *,
    collectors: Sequence[Collector] | CollectorFactory = (),
    clock: Clock = time.time,
    schedule: bool = True,
) -> FastAPI:
    """The service. `source` is the settings to build a Pipeline from, or a factory that builds
    one; `collectors` (or a factory given the pipeline) feed the scheduler's collect jobs;
    `clock` gives the time ingest and scoring run at. `schedule=False` builds everything but
    leaves the jobs to the caller (app.state.gpuhealth.scheduler), as tests do."""
    if source is None or isinstance(source, Settings):
        settings = source or Settings()

        def factory() -> Pipeline:
            return Pipeline(settings)
    else:
        factory = source

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pipeline = factory()
        scheduler: TickScheduler | None = None
        found: list[Collector] = []
        try:
            found = list(collectors(pipeline) if callable(collectors) else collectors)
            metrics = ServiceMetrics(pipeline)
            svc = pipeline.settings.service
            scheduler = TickScheduler(pipeline, found, clock=clock, metrics=metrics,
                                      collect_interval_s=svc.collect_interval_s,
                                      score_interval_s=svc.score_interval_s)
            metrics.track_collectors(scheduler.statuses)
            for c in found:
                _call_optional(c, "start")
            app.state.gpuhealth = Running(pipeline, scheduler, metrics, clock, found)
            if schedule:
                scheduler.start()
            yield
        finally:
            app.state.gpuhealth = None
            if scheduler is not None:
                # Shutdown waits for a running tick: keep the event loop free meanwhile.
                await run_in_threadpool(scheduler.shutdown)
            for c in found:
                _call_optional(c, "close")
            pipeline.close()

    app = FastAPI(title="gpuhealth", version="0.1.0", lifespan=lifespan,
                  description="Predictive health monitoring for GPU training clusters")
    app.include_router(router)
    return app


def _call_optional(obj: object, name: str) -> None:
    """Collectors may have start()/close() beyond the protocol's collect()."""
    method: Any = getattr(obj, name, None)
    if callable(method):
        try:
            method()
        except Exception:
            log.exception("%s.%s() failed", type(obj).__name__, name)
