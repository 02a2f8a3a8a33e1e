"""Scoped bearer tokens for the API: the token store, and the dependency a route asks for.

Tokens read `ghk_<id>_<secret>`. The id is not secret (lists, logs and audit name tokens by
it); the secret is 32 random bytes, stored only as its SHA-256 (a fast hash is enough for a
high-entropy secret, unlike a password) and compared in constant time.

A token's scope is a `Permission`, a level, read < operate < admin: a token passes a route
that needs its own permission or a lower one. A route asks for a principal with one dependency:

    @router.get("/v1/alerts")
    async def alerts(who: Reader) -> ...    # Reader: Annotated[Principal, Depends(require("read"))]

Mutating routes add the rate limit (service.api.ratelimit.mutating) and idempotency keys
(service.api.idempotency.idempotent) to the same chain.

The app attaches an `ApiAuth` as `app.state.gpuhealth_auth` (e.g. in its lifespan:
`ApiAuth.open(settings.storage.state_target, settings.api)`, then `close()` on the way out).
Without one, every guarded route answers 503: failing closed.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.api.auth_failures import AuthFailures, identity
from service.api.idempotency import IdempotencyStore
from service.api.principals import ANONYMOUS, Permission, Principal
from service.api.ratelimit import RateLimiter
from service.errors import Forbidden, ServiceUnavailable, TooManyRequests, Unauthorized
from service.settings import ApiSettings
from service.storage.state_db import StateStore, StateTarget

PREFIX = "ghk_"
_ID_BYTES = 6  # 12 hex digits: unique enough to name a token, and never an underscore
_SECRET_BYTES = 32
_TOKEN = re.compile(r"ghk_([0-9a-f]{12})_([A-Za-z0-9_-]{43,})")
_BEARER = re.compile(r"Bearer +([A-Za-z0-9._~+/=-]+)", re.IGNORECASE)  # RFC 6750 b64token
# Declares the scheme in OpenAPI (the docs' "Authorize" button) and nothing more: _presented
# parses the header itself, to tell a malformed one from a missing one.
_SCHEME = HTTPBearer(auto_error=False, scheme_name="bearer", bearerFormat="ghk_<id>_<secret>",
                     description="an API token, from `gpuhealth token create`")
# Recording every use would be a write per request; once a minute is precise enough to tell
# a token in use from a forgotten one.
_LAST_USED_RESOLUTION_S = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    scope TEXT NOT NULL,
    secret_sha256 TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL,
    revoked_at REAL,
    last_used_at REAL
);
"""


@dataclass(frozen=True, slots=True)
class Token:
    """A token as stored: everything but its secret."""

    id: str
    name: str
    scope: Permission
    created_at: float
    expires_at: float | None
    revoked_at: float | None
    last_used_at: float | None

    def active(self, now: float) -> bool:
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "scope": str(self.scope),
                "created_at": self.created_at, "expires_at": self.expires_at,
                "revoked_at": self.revoked_at, "last_used_at": self.last_used_at}


_COLS = "id, name, scope, created_at, expires_at, revoked_at, last_used_at"


def _row(r: tuple[Any, ...]) -> Token:
    return Token(r[0], r[1], Permission.parse(r[2]), r[3], r[4], r[5], r[6])


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenStore(StateStore):
    def __init__(self, target: StateTarget = ":memory:") -> None:
        super().__init__(target, _SCHEMA)  # requests authenticate from worker threads

    def create(self, name: str, scope: Permission | str, now: float,
               expires_at: float | None = None) -> tuple[Token, str]:
        """A new token and its plaintext, which is not kept: show it once."""
        scope = Permission.parse(scope)
        if not name.strip():
            raise ValueError("a token needs a name")
        if expires_at is not None and expires_at <= now:
            raise ValueError("a token must expire in the future")
        secret = secrets.token_urlsafe(_SECRET_BYTES)
        with self._lock:
            while True:  # an id collision (one in 2**48): draw again
                token_id = secrets.token_hex(_ID_BYTES)
                if self._db.execute(
                        "INSERT INTO api_tokens (id, name, scope, secret_sha256, created_at, "
                        "expires_at) VALUES (?,?,?,?,?,?) ON CONFLICT (id) DO NOTHING "
                        "RETURNING id",
                        (token_id, name, str(scope), _digest(secret), now, expires_at)
                ).fetchone() is not None:
                    break
        token = Token(token_id, name, scope, now, expires_at, None, None)
        return token, f"{PREFIX}{token_id}_{secret}"

    def get(self, token_id: str) -> Token | None:
        with self._lock:
            r = self._db.execute(f"SELECT {_COLS} FROM api_tokens WHERE id = ?",
                                 (token_id,)).fetchone()
        return None if r is None else _row(r)

    def list(self) -> list[Token]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLS} FROM api_tokens ORDER BY created_at, id").fetchall()
        return [_row(r) for r in rows]

    def revoke(self, token_id: str, now: float) -> Token | None:
        """The token, revoked (a second revoke keeps the first time); None if there is none."""
        with self._lock:
            self._db.execute("UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND "
                             "revoked_at IS NULL", (now, token_id))
        return self.get(token_id)

    def authenticate(self, presented: str, now: float) -> Principal | None:
        """Who the token is, or None when it is malformed, unknown, wrong, revoked or expired."""
        m = _TOKEN.fullmatch(presented)
        if m is None:
            return None
        token_id, secret = m.groups()
        with self._lock:
            r = self._db.execute(f"SELECT {_COLS}, secret_sha256 FROM api_tokens WHERE id = ?",
                                 (token_id,)).fetchone()
            if r is None or not hmac.compare_digest(_digest(secret), r[-1]):
                return None
            token = _row(r[:-1])
            if not token.active(now):
                return None
            if token.last_used_at is None or now - token.last_used_at >= _LAST_USED_RESOLUTION_S:
                self._db.execute("UPDATE api_tokens SET last_used_at = ? WHERE id = ?",
                                 (now, token_id))
        return Principal(token.id, token.name, token.scope)


@dataclass(slots=True)
class ApiAuth:
    """What the guarded routes need, found on `app.state.gpuhealth_auth`."""

    tokens: TokenStore
    limiter: RateLimiter
    idempotency: IdempotencyStore
    settings: ApiSettings
    clock: Callable[[], float] = time.time  # wall time: expiry and limits are not data time
    failures: AuthFailures | None = None  # failed authentications per credential and address

    @classmethod
    def open(cls, target: StateTarget, settings: ApiSettings | None = None,
             clock: Callable[[], float] = time.time) -> ApiAuth:
        """Both stores on the shared state (`storage.state_target`: the SQLite file, or
        PostgreSQL shared by replicas; ":memory:" in tests)."""
        settings = settings or ApiSettings()
        return cls(TokenStore(target),
                   RateLimiter(settings.rate_limit_per_min, settings.rate_limit_burst, clock),
                   IdempotencyStore(target, settings.idempotency_ttl_s), settings, clock,
                   AuthFailures(settings.auth_failures_per_min, settings.auth_failures_burst,
                                clock))

    def close(self) -> None:
        self.tokens.close()
        self.idempotency.close()


def api_auth(request: Request) -> ApiAuth:
    auth: ApiAuth | None = getattr(request.app.state, "gpuhealth_auth", None)
    if auth is None:
        raise ServiceUnavailable("authentication is not configured yet")
    return auth


def _unauthorized(message: str, error: str | None = None) -> Unauthorized:
    challenge = 'Bearer realm="gpuhealth"' + (f', error="{error}"' if error else "")
    return Unauthorized(message, challenge=challenge)


def _presented(request: Request) -> str | None:
    """The bearer token of the request, None without an Authorization header."""
    values = request.headers.getlist("authorization")
    if not values:
        return None
    m = _BEARER.fullmatch(values[0].strip()) if len(values) == 1 else None
    if m is None:
        raise _unauthorized("malformed Authorization header: send 'Authorization: Bearer "
                            "<token>'", "invalid_request")
    return m.group(1)


def authenticate(request: Request, auth: ApiAuth, permission: Permission) -> Principal:
    """The request's principal if it may act at `permission`; 401 or 403 if not, 429 for a
    credential locked out by its own failures (service.api.auth_failures). A valid token and a
    read without one are never refused for others' failures. Messages never repeat what was
    sent."""
    address = request.client.host if request.client else "?"
    try:
        token = _presented(request)
    except Unauthorized:
        _fail(auth, identity(",".join(request.headers.getlist("authorization"))), address)
        raise
    if token is None:
        if permission == Permission.READ and not auth.settings.read_requires_token:
            return ANONYMOUS
        raise _unauthorized("authorization required: send 'Authorization: Bearer <token>'")
    ident = identity(token)
    # API tokens hold 256 random bits: checking one answers nothing a guesser can use, so a
    # valid one passes even from an address that is guessing.
    _refuse_if_locked(auth, ident, address)
    who = auth.tokens.authenticate(token, auth.clock())
    if who is None:
        if auth.failures is not None:
            auth.failures.failed(ident, address)
        raise _unauthorized("invalid, expired or revoked token", "invalid_token")
    if not who.allows(permission):
        raise Forbidden(f"token {who.token_id} has scope {who.scope}; this needs {permission}",
                        headers={"WWW-Authenticate": f'Bearer realm="gpuhealth", '
                                                     f'error="insufficient_scope", '
                                                     f'scope="{permission}"'})
    return who


def _fail(auth: ApiAuth, ident: str, address: str) -> None:
    """A malformed credential: 429 while it is locked out, else charged (then 401)."""
    _refuse_if_locked(auth, ident, address)
    if auth.failures is not None:
        auth.failures.failed(ident, address)


def _refuse_if_locked(auth: ApiAuth, ident: str, address: str) -> None:
    if auth.failures is None:
        return
    wait = auth.failures.refusal(ident, address, guessable=False)
    if wait > 0:
        retry = max(1, math.ceil(wait))
        raise TooManyRequests(f"too many failed authentications with this credential: retry "
                              f"in {retry} s", retry_after=retry)


def require(permission: Permission | str) -> Callable[..., Awaitable[Principal]]:
    """The dependency that authenticates a request at `permission` (one callable per
    permission, so FastAPI runs it once per request however many dependencies ask for it)."""
    return _require(Permission.parse(permission))


@cache
def _require(permission: Permission) -> Callable[..., Awaitable[Principal]]:
    async def dependency(
            request: Request, auth: Annotated[ApiAuth, Depends(api_auth)],
            _: Annotated[HTTPAuthorizationCredentials | None, Depends(_SCHEME)]) -> Principal:
        # SQLite may wait on another writer of the same file: keep the event loop free.
        return await run_in_threadpool(authenticate, request, auth, permission)

    return dependency


Reader = Annotated[Principal, Depends(require(Permission.READ))]
