"""The dependencies of mutating routes: authenticated at a permission level, rate-limited per
token, and, for routes that create or change something, made safe to retry by an
Idempotency-Key (service.api.idempotency). One dependency gives a route all of it:

    @router.post("/v1/breaker/reset")
    async def reset(idem: IdempotentAdmin) -> ...

`mutating(permission)` returns the same callable for the same permission, so a route that also
asks for `idempotent(permission)` is charged once.
"""

# No `from __future__ import annotations`: FastAPI resolves string annotations in module
# globals, and the dependencies below are closures over their permission.

import math
from collections.abc import Awaitable, Callable
from functools import cache
from typing import Annotated

from fastapi import Depends, Header, Request

from service.api.auth import ApiAuth, api_auth, require
from service.api.idempotency import (
    _KEY_DOC,
    HEADER,
    Idempotency,
    KeyMissing,
    fingerprint,
    parse_key,
)
from service.api.principals import Permission, Principal
from service.errors import TooManyRequests


def mutating(permission: Permission | str) -> Callable[..., Awaitable[Principal]]:
    """The dependency for a mutating route: authenticated at `permission`, then rate-limited."""
    return _mutating(Permission.parse(permission))


@cache
def _mutating(permission: Permission) -> Callable[..., Awaitable[Principal]]:
    async def dependency(who: Annotated[Principal, Depends(require(permission))],
                         auth: Annotated[ApiAuth, Depends(api_auth)]) -> Principal:
        wait = auth.limiter.acquire(who.token_id)
        if wait > 0:
            retry = max(1, math.ceil(wait))
            raise TooManyRequests(f"rate limit exceeded for token {who.token_id}: retry in "
                                  f"{retry} s", retry_after=retry)
        return who

    return dependency


Operator = Annotated[Principal, Depends(mutating(Permission.OPERATE))]
Admin = Annotated[Principal, Depends(mutating(Permission.ADMIN))]


def idempotent(permission: Permission | str, *,
               required: bool = False) -> Callable[..., Awaitable[Idempotency]]:
    """The dependency for a mutating route: authenticated at `permission`, rate-limited, and
    with the request's Idempotency-Key (see the module docstring)."""
    return _idempotent(Permission.parse(permission), required)


@cache
def _idempotent(permission: Permission,
                required: bool) -> Callable[..., Awaitable[Idempotency]]:
    async def dependency(request: Request,
                         who: Annotated[Principal, Depends(mutating(permission))],
                         auth: Annotated[ApiAuth, Depends(api_auth)],
                         _: Annotated[str | None, Header(alias=HEADER,
                                                         description=_KEY_DOC)] = None,
                         ) -> Idempotency:
        # `_` only documents the header in OpenAPI; parse_key sees every value it was sent.
        key = parse_key(request.headers.getlist(HEADER))  # KeyInvalid (400) if malformed
        if key is None and required:
            raise KeyMissing(f"this route needs an {HEADER} header")
        fp = "" if key is None else fingerprint(request.method, request.url.path,
                                                request.url.query, await request.body())
        return Idempotency(who, key, fp, auth.idempotency, auth.clock)

    return dependency


IdempotentOperate = Annotated[Idempotency, Depends(idempotent(Permission.OPERATE))]
IdempotentAdmin = Annotated[Idempotency, Depends(idempotent(Permission.ADMIN))]
