"""Alerting and remediation endpoints: notification groups, acknowledgements, silences,
remediation actions (approve, abort, release) and the breaker. Reads need the read scope when
`api.read_requires_token` is set; every mutating route needs an operate (or, for the breaker
reset, admin) token, is rate-limited and accepts an `Idempotency-Key`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel, Field

from service.api.auth import Reader
from service.api.guards import IdempotentAdmin, IdempotentOperate
from service.api.idempotency import MUTATING_RESPONSES
from service.api.state import Running, State
from service.errors import Conflict, NotFound, ServiceUnavailable, Unprocessable
from service.notify.build import Notification
from service.remediation.actions import Action
from service.remediation.controller import RemediationController

router = APIRouter()


class AckIn(BaseModel):
    comment: str = Field(min_length=1, max_length=1000)


class SilenceIn(BaseModel):
    matchers: list[str] = Field(min_length=1, description='e.g. ["node=n0012", "level>=2"]')
    comment: str = Field(min_length=1, max_length=1000)
    duration_s: float | None = Field(default=None, gt=0)
    ends_at: float | None = Field(default=None, description="unix seconds; or duration_s")
    starts_at: float | None = None


class ActorIn(BaseModel):
    comment: str = Field(default="", max_length=1000)


def _notification(st: Running) -> Notification:
    n = st.pipeline.notification
    if n is None:
        raise ServiceUnavailable("notification is off in this service")
    return n


def _controller(st: Running) -> RemediationController:
    ctl = st.pipeline.controller
    if ctl is None:
        raise ServiceUnavailable("remediation is off (remediation.mode: off)")
    return ctl


@router.get("/v1/groups", tags=["alerting"],
            summary="Notification groups: their alerts, muted alerts and timers")
def list_groups(st: State, who: Reader) -> dict[str, Any]:
    n = _notification(st)
    groups = [{"receiver": rcv, "group_key": key, "labels": g.labels,
               "alerts": sorted(g.alerts), "muted": g.muted, "next_flush": g.next_flush,
               "created_at": g.created_at}
              for (rcv, key), g in sorted(n.dispatcher.groups.items())]
    return {"groups": groups, "held": n.dispatcher.held()}


@router.post("/v1/alerts/{alert_id}/ack", tags=["alerting"], responses=MUTATING_RESPONSES,
             summary="Acknowledge a firing alert until it resolves (no repeats meanwhile)")
async def ack_alert(st: State, alert_id: int, body: AckIn, idem: IdempotentOperate) -> Response:
    def run() -> dict[str, Any]:
        try:
            a = st.pipeline.alerts.ack(alert_id, idem.principal.name, body.comment, st.clock())
        except KeyError:
            raise NotFound(f"alert {alert_id} does not exist") from None
        except ValueError as e:  # not firing
            raise Conflict(str(e)) from None
        if st.pipeline.notification is not None:
            st.pipeline.notification.dispatcher.mark()
        return a.as_dict()

    return await idem.run(run)


@router.get("/v1/silences", tags=["alerting"], summary="Silences, newest first")
def list_silences(st: State, who: Reader) -> dict[str, Any]:
    n, now = _notification(st), st.clock()
    return {"silences": [s.as_dict(now) for s in n.silences.all()]}


@router.post("/v1/silences", tags=["alerting"], status_code=201, responses=MUTATING_RESPONSES,
             summary="Mute matching alerts until an expiry (author from the token)")
async def create_silence(st: State, body: SilenceIn, idem: IdempotentOperate) -> Response:
    n = _notification(st)

    def run() -> dict[str, Any]:
        now = st.clock()
        start = body.starts_at if body.starts_at is not None else now
        if (body.ends_at is None) == (body.duration_s is None):
            raise Unprocessable("give exactly one of ends_at and duration_s")
        ends = body.ends_at if body.ends_at is not None else start + (body.duration_s or 0)
        try:
            s = n.silences.create(body.matchers, idem.principal.name, body.comment, now,
                                  ends_at=ends, starts_at=start)
        except ValueError as e:  # a bad matcher, or a silence that ends before it starts
            raise Unprocessable(str(e)) from None
        n.dispatcher.mark()
        return s.as_dict(now)

    return await idem.run(run, status_code=201)


@router.delete("/v1/silences/{silence_id}", tags=["alerting"], responses=MUTATING_RESPONSES,
               summary="Expire a silence now (kept for the record)")
async def expire_silence(st: State, silence_id: str, idem: IdempotentOperate) -> Response:
    n = _notification(st)

    def run() -> dict[str, Any]:
        now = st.clock()
        try:
            s = n.silences.expire(silence_id, idem.principal.name, now)
        except KeyError:
            raise NotFound(f"silence {silence_id} does not exist") from None
        n.dispatcher.mark()
        return s.as_dict(now)

    return await idem.run(run)


@router.get("/v1/actions", tags=["remediation"], summary="Remediation actions, newest first")
def list_actions(st: State, who: Reader, state: str | None = None, node: str | None = None,
                 limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
    ctl = _controller(st)
    found = ctl.store.find(state=state, node=node, limit=limit)
    return {"actions": [a.as_dict() for a in found], "status": ctl.status(st.clock())}


@router.get("/v1/actions/{action_id}", tags=["remediation"],
            summary="One action with its audit trail")
def get_action(st: State, who: Reader, action_id: str) -> dict[str, Any]:
    ctl = _controller(st)
    a = ctl.store.get(action_id)
    if a is None:
        raise NotFound(f"action {action_id} does not exist")
    return {**a.as_dict(), "audit": [e.as_dict() for e in ctl.store.audit(action_id=action_id)]}


_VERBS: dict[str, Callable[[RemediationController, str, str, float], Action]] = {
    "approve": RemediationController.approve, "abort": RemediationController.abort,
    "release": RemediationController.release}


def _act(st: Running, verb: str, target: str, actor: str) -> dict[str, Any]:
    ctl = _controller(st)
    # ActionNotFound (404) and ActionConflict (409) answer for themselves.
    a = _VERBS[verb](ctl, target, actor, st.clock())
    out: dict[str, Any] = a.as_dict()
    return out


@router.post("/v1/actions/{action_id}/approve", tags=["remediation"],
             responses=MUTATING_RESPONSES, summary="Approve an action awaiting approval")
async def approve_action(st: State, action_id: str, idem: IdempotentOperate) -> Response:
    return await idem.run(lambda: _act(st, "approve", action_id, idem.principal.name))


@router.post("/v1/actions/{action_id}/abort", tags=["remediation"],
             responses=MUTATING_RESPONSES, summary="Abort an action (never retried after)")
async def abort_action(st: State, action_id: str, idem: IdempotentOperate) -> Response:
    return await idem.run(lambda: _act(st, "abort", action_id, idem.principal.name))


@router.post("/v1/nodes/{node}/release", tags=["remediation"], responses=MUTATING_RESPONSES,
             summary="Resume a node we drained (never one drained by someone else)")
async def release_node(st: State, node: str, idem: IdempotentOperate) -> Response:
    return await idem.run(lambda: _act(st, "release", node, idem.principal.name))


@router.get("/v1/breaker", tags=["remediation"], summary="The blast-radius circuit breaker")
def breaker_status(st: State, who: Reader) -> dict[str, Any]:
    ctl = _controller(st)
    status: dict[str, Any] = ctl.status(st.clock())["breaker"]
    return status


@router.post("/v1/breaker/reset", tags=["remediation"], responses=MUTATING_RESPONSES,
             summary="Close a tripped breaker (admin); actions queued before stay expired")
async def reset_breaker(st: State, idem: IdempotentAdmin) -> Response:
    def run() -> dict[str, Any]:
        ctl = _controller(st)
        now = st.clock()
        ctl.breaker.reset(idem.principal.name, now)
        status: dict[str, Any] = ctl.status(now)["breaker"]
        return status

    return await idem.run(run)
