"""The models: `GET /v1/models` shows the active model and a challenger in shadow side by side
(their scores against the labels that arrived, and the judgement a promotion would get);
admin routes put a model in shadow, stop it, promote it and roll back
(service.learning.promotion)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, Field

from service.api.auth import Reader
from service.api.guards import IdempotentAdmin
from service.api.idempotency import MUTATING_RESPONSES
from service.api.principals import ANONYMOUS
from service.api.problems import READ_ERRORS, problem_responses
from service.api.state import Running, State
from service.api.timefmt import stamp_fields
from service.errors import Conflict, ServiceUnavailable, Unprocessable
from service.learning import promotion
from service.learning.model_registry import ModelRegistry, RegistryError
from service.learning.model_roles import ModelRoles
from service.pipeline import Pipeline
from service.runtime.retrain import learning_status

router = APIRouter(responses=READ_ERRORS | problem_responses(
    503, description="this service does not follow a model registry"))
_CONFLICT = MUTATING_RESPONSES | problem_responses(
    409, description="refused: nothing to promote or roll back to, or the challenger is worse")


class ShadowIn(BaseModel):
    path: str = Field(min_length=1, max_length=1000,
                      description="an artifact directory written by `gpuhealth train`, on the "
                                  "service's host")


class PromoteIn(BaseModel):
    force: bool = Field(default=False, description="promote even when the challenger is worse")
    reason: str = Field(default="", max_length=1000)


class ReasonIn(BaseModel):
    reason: str = Field(default="", max_length=1000)


def _parts(st: Running) -> tuple[Pipeline, ModelRegistry, ModelRoles]:
    p = st.pipeline
    if p.registry is None or p.roles is None:
        raise ServiceUnavailable("this service does not follow a model registry")
    return p, p.registry, p.roles


def _changed(p: Pipeline, roles: ModelRoles) -> None:
    with p.lock:  # the slot and the shadow are the tick's; switch them between ticks
        roles.check(force=True)


def _entry(d: dict[str, Any]) -> dict[str, Any]:
    return stamp_fields(d, extra=("since",))


@router.get("/v1/models", tags=["models"],
            summary="The active model and a challenger in shadow side by side, with the audit")
def list_models(st: State, who: Reader) -> dict[str, Any]:
    p, reg, roles = _parts(st)
    policy = p.settings.detectors.model.promotion
    out = promotion.compare(reg, p.labels, policy, st.clock(), roles.active())
    status = p.model.status if p.model is not None else None
    out["active"] |= {"loaded": bool(status and status.loaded),
                      "reason": status.reason if status else "no model slot"}
    if out["challenger"] is not None:
        out["challenger"] = _entry(out["challenger"]) | {
            "running": roles.shadow is not None, "error": roles.challenger_error}
    if out["run"] is not None:
        out["run"] = stamp_fields(out["run"], extra=("started_at", "updated_at", "ended_at"))
    out["audit"] = [stamp_fields(a.as_dict(), extra=("at",)) for a in reg.audit(50)]
    learning = learning_status(p, st.clock())
    learning["history"] = [stamp_fields(a, extra=("at",)) for a in learning["history"]]
    out["learning"] = learning  # what the fleet has taught the model (docs/learning.md)
    return _for_anonymous(out) if who == ANONYMOUS else out


# An absolute path (a directory on the service's host) inside a reason or an error.
_PATH = re.compile(r"(?<![\w.])/[^\s'\",;:)]+")


def _for_anonymous(out: dict[str, Any]) -> dict[str, Any]:
    """The comparison without what only a token holder may read: where artifacts lie on the
    service's host, and the names of the tokens that added, promoted or rolled back."""
    def clean(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: None if k in ("path", "added_by", "actor") else clean(x)
                    for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return _PATH.sub("<path>", v) if isinstance(v, str) else v

    return {k: clean(v) for k, v in out.items()}


@router.post("/v1/models/challenger", tags=["models"], responses=MUTATING_RESPONSES,
             summary="Run a model in shadow beside the active one (no alerts, no actions)")
async def put_challenger(st: State, body: ShadowIn, idem: IdempotentAdmin) -> Response:
    p, reg, roles = _parts(st)

    def run() -> dict[str, Any]:
        try:
            e = promotion.shadow(reg, Path(body.path), idem.principal.name, st.clock())
        except (OSError, ValueError) as exc:  # ArtifactError is a ValueError
            raise Unprocessable(f"{body.path}: {exc}") from None
        _changed(p, roles)
        return _entry(e.as_dict())

    return await idem.run(run)


@router.delete("/v1/models/challenger", tags=["models"], responses=_CONFLICT,
               summary="End the shadow run without promoting")
async def stop_challenger(st: State, idem: IdempotentAdmin,
                          body: ReasonIn | None = None) -> Response:
    p, reg, roles = _parts(st)

    def run() -> dict[str, Any]:
        try:
            e = reg.stop(idem.principal.name, st.clock(), body.reason if body else "")
        except RegistryError as exc:
            raise Conflict(str(exc)) from None
        _changed(p, roles)
        return _entry(e.as_dict())

    return await idem.run(run)


@router.post("/v1/models/promote", tags=["models"], responses=_CONFLICT,
             summary="Make the challenger the active model (refused when it is worse on the "
                     "agreed metrics, unless forced); audited, reversible by rollback")
async def promote_challenger(st: State, body: PromoteIn, idem: IdempotentAdmin) -> Response:
    p, reg, roles = _parts(st)

    def run() -> dict[str, Any]:
        try:
            e = promotion.promote(reg, p.labels, p.settings.detectors.model.promotion,
                                  actor=idem.principal.name, force=body.force,
                                  reason=body.reason, now=st.clock(), current=roles.active())
        except RegistryError as exc:
            raise Conflict(str(exc)) from None
        _changed(p, roles)
        return _entry(e.as_dict())

    return await idem.run(run)


@router.post("/v1/models/rollback", tags=["models"], responses=_CONFLICT,
             summary="Make the model active before the last promotion or rollback active again")
async def rollback_model(st: State, body: ReasonIn, idem: IdempotentAdmin) -> Response:
    p, reg, roles = _parts(st)

    def run() -> dict[str, Any]:
        try:
            e = promotion.rollback(reg, actor=idem.principal.name, reason=body.reason,
                                   now=st.clock(), current=roles.active())
        except RegistryError as exc:
            raise Conflict(str(exc)) from None
        _changed(p, roles)
        return _entry(e.as_dict())

    return await idem.run(run)
