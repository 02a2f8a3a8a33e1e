"""History endpoints: a GPU's, link's, port's or node's metrics and risk over time, from
InfluxDB when it is configured, else from the embedded SQLite store (service.history.history)."""

from __future__ import annotations

import threading
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request

from collectors.catalog import Scope
from collectors.frames import Entity
from service.api.bounded import I64_MAX
from service.api.schemas import HistoryOut, SeriesPoints
from service.api.state import Running, State
from service.errors import NotFound
from service.history.histories import open_history, source_name
from service.history.history import (
    MAX_POINTS,
    Agg,
    History,
    ValueOrigin,
    build_query,
    parse_time,
    valid_metrics,
)
from service.tick import Closable

router = APIRouter(tags=["history"])
_build_lock = threading.Lock()


def _history(request: Request, st: State) -> History:
    """One History per running service, built on first use and kept on the app: the API's
    state stays what the lifespan built, and a restarted lifespan gets a fresh one."""
    found = _cached(request, st)
    if found is not None:
        return found
    with _build_lock:
        found = _cached(request, st)
        if found is None:
            old: tuple[Running, History] | None = getattr(request.app.state, "history", None)
            if old is not None:
                _close(old[1])
            found = open_history(st.settings.storage.influxdb, st.settings.storage.sqlite_path)
            request.app.state.history = (st, found)
        return found


def _cached(request: Request, st: Running) -> History | None:
    cached: tuple[Running, History] | None = getattr(request.app.state, "history", None)
    return cached[1] if cached is not None and cached[0] is st else None


def close_history(app: FastAPI) -> None:
    """At shutdown: the cached store's connections go with the lifespan that used them."""
    cached: tuple[Running, History] | None = getattr(app.state, "history", None)
    app.state.history = None
    if cached is not None:
        _close(cached[1])


def _close(h: History) -> None:
    if isinstance(h, Closable):
        h.close()


HistoryDep = Annotated[History, Depends(_history)]
_TIME_DOC = "epoch seconds or RFC 3339 (2023-11-14T22:13:20Z)"
From = Annotated[str | None, Query(alias="from", description=_TIME_DOC + "; default to - 1 h")]
To = Annotated[str | None, Query(alias="to", description=_TIME_DOC + "; default now")]
Step = Annotated[int | None, Query(le=I64_MAX, description=(
    "bucket width in whole seconds; default: at most 720 buckets over the range"))]
Agg_ = Annotated[Agg | None, Query(description="override the aggregation by kind (gauges "
                                               "mean, counters max or mean rate, states, risk "
                                               "and level max); events are always counted")]
Metrics = Annotated[list[str] | None, Query(alias="metric", description=(
    "catalog metric names (repeat the parameter); default: all the scope's sampled metrics"))]


def _answer(st: Running, history: History, scope: Scope, key: str, metrics: list[str],
            start: str | None, end: str | None, step: int | None, rate: bool,
            agg: Agg | None) -> HistoryOut:
    entity = _entity(scope, key)
    # QueryError (400), NotStored (501) and HistoryUnavailable (502) answer for themselves.
    q = build_query(entity, metrics, start=None if start is None else parse_time(start),
                    end=None if end is None else parse_time(end), step=step, rate=rate,
                    agg=agg, now=st.clock())
    found = history.series(q)
    series = [SeriesPoints(metric=s.metric.name, unit=s.metric.unit, kind=s.metric.kind,
                           rate=s.metric.origin is ValueOrigin.RATE, agg=s.metric.agg.value,
                           times=s.times, values=s.values) for s in found]
    return HistoryOut(entity=q.entity.key, scope=scope.value, start=q.start, end=q.end,
                      step=q.step, source=source_name(st.settings.storage.influxdb), series=series)


_NOUN = {Scope.GPU: ("a GPU", "n1:gpu3"), Scope.NVLINK: ("an NVLink link", "n1:gpu3:nvlink7"),
         Scope.IB_PORT: ("an InfiniBand port", "n1:mlx5_0:1"), Scope.NODE: ("a node", "n1"),
         Scope.PSU: ("a power supply", "n1:psu0"), Scope.FAN: ("a fan", "n1:fan3")}


def _entity(scope: Scope, key: str) -> Entity:
    noun, example = _NOUN[scope]
    try:
        e = Entity.parse(key)
    except ValueError:
        e = None
    if e is None or e.scope is not scope:
        raise NotFound(f"{key!r} is not {noun} key (like {example})")
    return e


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "Unknown metric, metric of another scope, bad time range, or a step "
                         f"giving more than {MAX_POINTS} points"},
    404: {"description": "Not a key of this kind of entity"},
    501: {"description": "Not kept by the configured store (ib_ber, derived at ingest, "
                         "needs InfluxDB)"},
    502: {"description": "InfluxDB could not answer"},
}

_RISK_DOC = ("From the scoring tick's `risk` measurement in InfluxDB, or the embedded SQLite "
             "store's risk history (one value a minute, carried to the next row); a bucket's "
             "maximum by default.")


def _metrics_doc(scope: Scope) -> str:
    return (f"Metrics: {', '.join(valid_metrics(scope))}. `rate=true` gives counters as "
            "per-second rates (reset-aware). Buckets align to multiples of `step` since the "
            "epoch.")


def _risk(st: Running, history: History, scope: Scope, key: str, start: str | None,
          end: str | None, step: int | None, agg: Agg | None) -> HistoryOut:
    return _answer(st, history, scope, key, ["risk", "level"], start, end, step, False, agg)


@router.get("/v1/gpus/{gpu}/metrics", response_model=HistoryOut, responses=_ERRORS,
            summary="A GPU's metrics over time", description=_metrics_doc(Scope.GPU))
def gpu_metrics(st: State, history: HistoryDep, gpu: str, metric: Metrics = None,
                start: From = None, end: To = None, step: Step = None, rate: bool = False,
                agg: Agg_ = None) -> HistoryOut:
    return _answer(st, history, Scope.GPU, gpu, metric or [], start, end, step, rate, agg)


@router.get("/v1/links/{link}/metrics", response_model=HistoryOut, responses=_ERRORS,
            summary="An NVLink link's metrics over time", description=_metrics_doc(Scope.NVLINK))
def link_metrics(st: State, history: HistoryDep, link: str, metric: Metrics = None,
                 start: From = None, end: To = None, step: Step = None, rate: bool = False,
                 agg: Agg_ = None) -> HistoryOut:
    return _answer(st, history, Scope.NVLINK, link, metric or [], start, end, step, rate, agg)


@router.get("/v1/ports/{port}/metrics", response_model=HistoryOut, responses=_ERRORS,
            summary="An InfiniBand port's metrics over time",
            description=_metrics_doc(Scope.IB_PORT))
def port_metrics(st: State, history: HistoryDep, port: str, metric: Metrics = None,
                 start: From = None, end: To = None, step: Step = None, rate: bool = False,
                 agg: Agg_ = None) -> HistoryOut:
    return _answer(st, history, Scope.IB_PORT, port, metric or [], start, end, step, rate, agg)


@router.get("/v1/nodes/{node}/metrics", response_model=HistoryOut, responses=_ERRORS,
            summary="A node's own metrics (chassis sensors, host errors) over time",
            description=_metrics_doc(Scope.NODE))
def node_metrics(st: State, history: HistoryDep, node: str, metric: Metrics = None,
                 start: From = None, end: To = None, step: Step = None, rate: bool = False,
                 agg: Agg_ = None) -> HistoryOut:
    return _answer(st, history, Scope.NODE, node, metric or [], start, end, step, rate, agg)


@router.get("/v1/psus/{psu}/metrics", response_model=HistoryOut, responses=_ERRORS,
            summary="A power supply's metrics over time", description=_metrics_doc(Scope.PSU))
def psu_metrics(st: State, history: HistoryDep, psu: str, metric: Metrics = None,
                start: From = None, end: To = None, step: Step = None,
                agg: Agg_ = None) -> HistoryOut:
    return _answer(st, history, Scope.PSU, psu, metric or [], start, end, step, False, agg)


@router.get("/v1/fans/{fan}/metrics", response_model=HistoryOut, responses=_ERRORS,
            summary="A chassis fan's metrics over time", description=_metrics_doc(Scope.FAN))
def fan_metrics(st: State, history: HistoryDep, fan: str, metric: Metrics = None,
                start: From = None, end: To = None, step: Step = None,
                agg: Agg_ = None) -> HistoryOut:
    return _answer(st, history, Scope.FAN, fan, metric or [], start, end, step, False, agg)


@router.get("/v1/gpus/{gpu}/risk", response_model=HistoryOut, responses=_ERRORS,
            summary="A GPU's risk and alert level over time", description=_RISK_DOC)
def gpu_risk(st: State, history: HistoryDep, gpu: str, start: From = None, end: To = None,
             step: Step = None, agg: Agg_ = None) -> HistoryOut:
    return _risk(st, history, Scope.GPU, gpu, start, end, step, agg)


@router.get("/v1/links/{link}/risk", response_model=HistoryOut, responses=_ERRORS,
            summary="An NVLink link's risk and alert level over time", description=_RISK_DOC)
def link_risk(st: State, history: HistoryDep, link: str, start: From = None, end: To = None,
              step: Step = None, agg: Agg_ = None) -> HistoryOut:
    return _risk(st, history, Scope.NVLINK, link, start, end, step, agg)


@router.get("/v1/ports/{port}/risk", response_model=HistoryOut, responses=_ERRORS,
            summary="An InfiniBand port's risk and alert level over time",
            description=_RISK_DOC)
def port_risk(st: State, history: HistoryDep, port: str, start: From = None, end: To = None,
              step: Step = None, agg: Agg_ = None) -> HistoryOut:
    return _risk(st, history, Scope.IB_PORT, port, start, end, step, agg)


@router.get("/v1/nodes/{node}/risk", response_model=HistoryOut, responses=_ERRORS,
            summary="A node's risk over time", description=_RISK_DOC)
def node_risk(st: State, history: HistoryDep, node: str, start: From = None, end: To = None,
              step: Step = None, agg: Agg_ = None) -> HistoryOut:
    return _risk(st, history, Scope.NODE, node, start, end, step, agg)


@router.get("/v1/psus/{psu}/risk", response_model=HistoryOut, responses=_ERRORS,
            summary="A power supply's risk and alert level over time", description=_RISK_DOC)
def psu_risk(st: State, history: HistoryDep, psu: str, start: From = None, end: To = None,
             step: Step = None, agg: Agg_ = None) -> HistoryOut:
    return _risk(st, history, Scope.PSU, psu, start, end, step, agg)


@router.get("/v1/fans/{fan}/risk", response_model=HistoryOut, responses=_ERRORS,
            summary="A chassis fan's risk and alert level over time", description=_RISK_DOC)
def fan_risk(st: State, history: HistoryDep, fan: str, start: From = None, end: To = None,
             step: Step = None, agg: Agg_ = None) -> HistoryOut:
    return _risk(st, history, Scope.FAN, fan, start, end, step, agg)
