"""The API's one exception handler: every error leaves as a problem detail (RFC 9457).

What is translated: a `GpuhealthError` (the domain errors, service.errors), FastAPI's and
Starlette's `HTTPException` (an unknown route, a method not allowed), a request FastAPI could not
read (`RequestValidationError`, 422, with its field errors as the `errors` member) and anything
else (500, logged). Nothing a route raises leaves in another shape.

The InfluxDB endpoints (line-protocol writes, `/query`) answer the same members as
`application/json` with InfluxDB's `error` member beside them: InfluxDB clients read `error`
(Telegraf logs it), and some parse an error body only when it is `application/json`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from service.api.auth import ApiAuth, authenticate
from service.api.principals import Permission
from service.api.schemas import Problem
from service.errors import PROBLEM_JSON, GpuhealthError, Unprocessable, generic_problem

log = logging.getLogger(__name__)


class RequestNotValid(Unprocessable):
    """A request FastAPI could not read: a malformed body, a wrong field or parameter."""

    slug = "request-not-valid"


def install(app: FastAPI, influxdb_paths: Iterable[str] = ()) -> None:
    """Register the handler on `app`; `influxdb_paths` answer InfluxDB's way (see above)."""
    influx = frozenset(influxdb_paths)

    def respond(request: Request, body: dict[str, Any], status: int,
                headers: dict[str, str] | None = None) -> Response:
        if request.url.path in influx:
            return _influx(body, status, headers)
        return JSONResponse(jsonable_encoder(body), status_code=status, headers=headers,
                            media_type=PROBLEM_JSON)

    def domain(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, GpuhealthError)
        if exc.status >= 500 and str(exc) != exc.detail:
            # The client got the redacted detail; the operator's log gets the whole reason.
            log.warning("%s %s: %s", request.method, request.url.path, exc)
        return respond(request, exc.problem(request.url.path), exc.status, exc.headers)

    def http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code < 400 or exc.status_code in (204, 304):
            return Response(status_code=exc.status_code, headers=exc.headers)
        return respond(request, generic_problem(exc.status_code, exc.detail, request.url.path),
                       exc.status_code, dict(exc.headers or {}))

    async def not_valid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        denied = await _authenticate_first(request)
        if denied is not None:
            return domain(request, denied)
        errors = _json_safe(exc.errors())
        where = ", ".join(".".join(str(p) for p in e.get("loc", ())) for e in errors[:5])
        problem = RequestNotValid(f"the request is not valid: {len(errors)} error(s) at {where}",
                                  errors=errors)
        return domain(request, problem)

    def unexpected(request: Request, exc: Exception) -> Response:
        # Starlette logs and re-raises it after this answer; say nothing of its insides.
        return domain(request, GpuhealthError("the service failed to answer this request"))

    app.add_exception_handler(GpuhealthError, domain)
    app.add_exception_handler(HTTPException, http)
    app.add_exception_handler(RequestValidationError, not_valid)
    app.add_exception_handler(Exception, unexpected)


def _json_safe(value: Any) -> Any:
    """Field errors as JSON can carry them: a body's NaN or Infinity (which Python's JSON
    reader takes) is echoed as the `input` of its error, and JSON has no such number, so the
    answer itself failed (a 500 for a 422). Non-finite numbers become their text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def influx_response(exc: GpuhealthError, path: str) -> Response:
    """`exc` answered InfluxDB's way, as the handler answers it on an InfluxDB path (for the
    answer to a write, service.api.write_answer, which either write door sends as it is)."""
    return _influx(exc.problem(path), exc.status, exc.headers)


def _influx(body: dict[str, Any], status: int, headers: dict[str, str] | None) -> Response:
    return JSONResponse(jsonable_encoder({"error": body["detail"], **body}), status_code=status,
                        headers=headers)


async def _authenticate_first(request: Request) -> GpuhealthError | None:
    """On the API's mutating routes, authentication is answered before the body is read: a
    caller without a valid token learns nothing of a route's body schema (its 401 or 429,
    not the 422). Reads without a token stay as they are (422); the write endpoints have their
    own tokens and answer a bad query parameter as InfluxDB does."""
    auth: ApiAuth | None = getattr(request.app.state, "gpuhealth_auth", None)
    path = request.url.path
    api_route = path.startswith("/v1/") and path != "/v1/write"
    if auth is None or not api_route or request.method in ("GET", "HEAD", "OPTIONS"):
        return None
    try:
        await run_in_threadpool(authenticate, request, auth, Permission.OPERATE)
    except GpuhealthError as denied:
        if denied.status in (401, 429):
            return denied
    return None


def problem_responses(*statuses: int, description: str | None = None
                      ) -> dict[int | str, dict[str, Any]]:
    """A route's `responses` entry declaring problem-detail answers (service.api.openapi
    files them under `application/problem+json`)."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {"model": Problem}
        if description is not None:
            entry["description"] = description
        elif status == 400:
            entry["description"] = "A cursor that is not valid here, or `offset` (retired)"
        out[status] = entry
    return out


# Where a read token is required (`api.read_requires_token`): what the token check answers.
READ_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "missing, malformed, unknown, expired or revoked "
                                           "bearer token (with api.read_requires_token)"},
    403: {"model": Problem, "description": "the token's scope is too low for this route"},
    429: {"model": Problem, "description": "rate limit exceeded; see Retry-After"},
}
