"""Alerting and remediation endpoints: notification groups, acknowledgements, silences,
remediation actions (approve, abort, release) and the breaker. Reads need the read scope when
`api.read_requires_token` is set; every mutating route needs an operate (or, for the breaker
reset, admin) token, is rate-limited and accepts an `Idempotency-Key`."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel, Field

from service.api.auth import Reader
from service.api.bounded import AlertId
from service.api.guards import IdempotentAdmin, IdempotentOperate
from service.api.idempotency import MUTATING_RESPONSES
from service.api.paging import PageDep
from service.api.problems import READ_ERRORS, problem_responses
from service.api.state import Running, State
from service.api.timefmt import TIME_DOC, TimeIn, stamp_fields
from service.errors import Conflict, NotFound, ServiceUnavailable, Unprocessable
from service.notify.build import Notification
from service.remediation.actions import Action
from service.remediation.controller import RemediationController

# Every route answers 503 while its feature is off; those naming a resource 404 when unknown.
router = APIRouter(responses=problem_responses(
    503, description="notification (or remediation) is off in this service") | READ_ERRORS)
_UNKNOWN = problem_responses(404, description="No such alert, silence, action or node")
_MUTATING_UNKNOWN = MUTATING_RESPONSES | _UNKNOWN


class AckIn(BaseModel):
    comment: str = Field(min_length=1, max_length=1000)


class SilenceIn(BaseModel):
    matchers: list[str] = Field(min_length=1, description='e.g. ["node=n0012", "level>=2"]')
    comment: str = Field(min_length=1, max_length=1000)
    duration_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    ends_at: TimeIn | None = Field(default=None, description=TIME_DOC + "; or duration_s")
    starts_at: TimeIn | None = Field(default=None, description=TIME_DOC + "; default now")


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


@router.get("/v1/groups", tags=["alerting"], responses=problem_responses(400),
            summary="Notification groups (by receiver, then group key): their alerts, muted "
                    "alerts and timers")
def list_groups(st: State, who: Reader, page: PageDep) -> dict[str, Any]:
    n = _notification(st)
    found = sorted(n.dispatcher.groups.items())
    after = page.after("groups", (str, str))
    start = 0 if after is None else bisect.bisect_right([k for k, _ in found], tuple(after))
    rows, next_cursor = page.slice("groups", found, lambda kv: kv[0], start)
    groups = [stamp_fields({"receiver": rcv, "group_key": key, "labels": g.labels,
                            "alerts": sorted(g.alerts), "muted": g.muted,
                            "next_flush": g.next_flush, "created_at": g.created_at},
                           extra=("next_flush",))
              for (rcv, key), g in rows]
    return {"limit": page.limit, "next_cursor": next_cursor, "groups": groups,
            "held": n.dispatcher.held()}


@router.post("/v1/alerts/{alert_id}/ack", tags=["alerting"], responses=_MUTATING_UNKNOWN,
             summary="Acknowledge a firing alert until it resolves (no repeats meanwhile)")
async def ack_alert(st: State, alert_id: AlertId, body: AckIn, idem: IdempotentOperate) -> Response:
    def run() -> dict[str, Any]:
        try:
            a = st.pipeline.alerts.ack(alert_id, idem.principal.name, body.comment, st.clock())
        except KeyError:
            raise NotFound(f"alert {alert_id} does not exist") from None
        except ValueError as e:  # not firing
            raise Conflict(str(e)) from None
        if st.pipeline.notification is not None:
            st.pipeline.notification.dispatcher.mark()
        return stamp_fields(a.as_dict())

    return await idem.run(run)


@router.get("/v1/silences", tags=["alerting"], responses=problem_responses(400),
            summary="Silences, newest first")
def list_silences(st: State, who: Reader, page: PageDep) -> dict[str, Any]:
    n, now = _notification(st), st.clock()
    found = sorted(n.silences.all(), key=lambda s: (-s.created_at, s.id))
    after = page.after("silences", (float, str))
    start = 0
    if after is not None:
        cut = (-float(after[0]), after[1])
        start = next((i for i, s in enumerate(found) if (-s.created_at, s.id) > cut),
                     len(found))
    rows, next_cursor = page.slice("silences", found, lambda s: (s.created_at, s.id), start)
    return {"limit": page.limit, "next_cursor": next_cursor,
            "silences": [stamp_fields(s.as_dict(now)) for s in rows]}


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
        return stamp_fields(s.as_dict(now))

    return await idem.run(run, status_code=201)


@router.delete("/v1/silences/{silence_id}", tags=["alerting"], responses=_MUTATING_UNKNOWN,
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
        return stamp_fields(s.as_dict(now))

    return await idem.run(run)


@router.get("/v1/actions", tags=["remediation"], responses=problem_responses(400),
            summary="Remediation actions, newest first")
def list_actions(st: State, who: Reader, page: PageDep, state: str | None = None,
                 node: str | None = None) -> dict[str, Any]:
    ctl = _controller(st)
    after = page.after("actions", (float, str))
    found = ctl.store.find(state=state, node=node, limit=page.limit + 1,
                           after=None if after is None else (float(after[0]), after[1]))
    rows, next_cursor = page.slice("actions", found, lambda a: (a.requested_at, a.id), 0)
    return {"limit": page.limit, "next_cursor": next_cursor,
            "actions": [_action(a) for a in rows], "status": _status(ctl, st.clock())}


def _action(a: Action) -> dict[str, Any]:
    return stamp_fields(a.as_dict(), extra=("deadline",))


def _status(ctl: RemediationController, now: float) -> dict[str, Any]:
    status = ctl.status(now)
    return {**status, "breaker": stamp_fields(status["breaker"])}


@router.get("/v1/actions/{action_id}", tags=["remediation"], responses=_UNKNOWN,
            summary="One action with its audit trail")
def get_action(st: State, who: Reader, action_id: str) -> dict[str, Any]:
    ctl = _controller(st)
    a = ctl.store.get(action_id)
    if a is None:
        raise NotFound(f"action {action_id} does not exist")
    return {**_action(a), "audit": [stamp_fields(e.as_dict(), extra=("at",))
                                    for e in ctl.store.audit(action_id=action_id)]}


_VERBS: dict[str, Callable[[RemediationController, str, str, float], Action]] = {
    "approve": RemediationController.approve, "abort": RemediationController.abort}


def _act(st: Running, verb: str, target: str, actor: str) -> dict[str, Any]:
    ctl = _controller(st)
    # ActionNotFound (404) and ActionConflict (409) answer for themselves.
    a = _VERBS[verb](ctl, target, actor, st.clock())
    return _action(a)


@router.post("/v1/actions/{action_id}/approve", tags=["remediation"],
             responses=_MUTATING_UNKNOWN, summary="Approve an action awaiting approval")
async def approve_action(st: State, action_id: str, idem: IdempotentOperate) -> Response:
    return await idem.run(lambda: _act(st, "approve", action_id, idem.principal.name))


@router.post("/v1/actions/{action_id}/abort", tags=["remediation"],
             responses=_MUTATING_UNKNOWN, summary="Abort an action (never retried after)")
async def abort_action(st: State, action_id: str, idem: IdempotentOperate) -> Response:
    return await idem.run(lambda: _act(st, "abort", action_id, idem.principal.name))


@router.post("/v1/nodes/{node}/release", tags=["remediation"], responses=_MUTATING_UNKNOWN,
             summary="Resume a node we drained (never one drained by someone else)")
async def release_node(st: State, node: str, idem: IdempotentOperate,
                       skip_gate: str = Query("", max_length=500,
                                              description="release without the return-to-"
                                              "service gate's tests; the reason, audited")
                       ) -> Response:
    def release() -> dict[str, Any]:
        ctl = _controller(st)
        return _action(ctl.release(node, idem.principal.name, st.clock(), skip_gate=skip_gate))
    return await idem.run(release)


@router.get("/v1/breaker", tags=["remediation"], summary="The blast-radius circuit breaker")
def breaker_status(st: State, who: Reader) -> dict[str, Any]:
    ctl = _controller(st)
    status: dict[str, Any] = _status(ctl, st.clock())["breaker"]
    return status


@router.post("/v1/breaker/reset", tags=["remediation"], responses=MUTATING_RESPONSES,
             summary="Close a tripped breaker (admin); actions queued before stay expired")
async def reset_breaker(st: State, idem: IdempotentAdmin) -> Response:
    def run() -> dict[str, Any]:
        ctl = _controller(st)
        now = st.clock()
        ctl.breaker.reset(idem.principal.name, now)
        status: dict[str, Any] = _status(ctl, now)["breaker"]
        return status

    return await idem.run(run)
