"""Idempotency keys for mutating routes, as the IETF draft "The Idempotency-Key HTTP Header
Field" (draft-ietf-httpapi-idempotency-key-header) has them.

A client that may retry sends `Idempotency-Key: <key>` (a structured-field string, quoted or
not; 1-255 printable ASCII characters). Keys are scoped to the token that sent them, so one
client can never see another's response. For a key:

* the first request runs and its response is kept;
* the same request again (method, path and query, body) gets the kept response, status and
  body, with `Idempotent-Replayed: true`, and the handler does not run again;
* a different request with the key: 422; the same while the first still runs: 409;
* a malformed key: 400 (and a missing one, where a route requires keys);
* keys expire `api.idempotency_ttl_s` (24 h by default) after their first request.

A handler that raises, or answers 5xx, keeps nothing: a retry runs again. Requests without a
key just run. Usage, authentication and the rate limit included in the one dependency:

    @router.post("/v1/silences", status_code=201, response_model=SilenceOut,
                 responses=MUTATING_RESPONSES)
    async def create_silence(body: SilenceIn, st: State, idem: IdempotentOperate) -> Response:
        return await idem.run(lambda: silences.create(body, by=idem.principal.name),
                              status_code=201)

`IdempotentOperate` and `IdempotentAdmin` are `Annotated[Idempotency,
Depends(idempotent(...))]`; `idem.principal` is who sent the request. `run` takes a sync
callable (run in the thread pool) or an async one; it may return a Response (kept as sent,
streaming excepted) or anything `jsonable_encoder` takes (sent as JSON with `status_code`).
`service.api.guards.idempotent(scope, required=True)` makes the key mandatory.
"""

# No `from __future__ import annotations`: FastAPI resolves string annotations in module
# globals, and the dependencies below are closures over their scope.

import hashlib
import inspect
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from fastapi import Response
from fastapi.concurrency import run_in_threadpool
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse

from service.api.principals import Principal
from service.errors import BadRequest, Conflict, Unprocessable
from service.storage.state_db import StateStore, StateTarget

HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
MAX_KEY = 255
_PRINTABLE = re.compile(r"[\x20-\x7e]+")
_ESCAPE = re.compile(r"\\([\"\\])")

_KEY_DOC = (f"makes retries safe: a repeat within the expiry (24 h by default) gets the first "
            f"response; 1-{MAX_KEY} printable ASCII characters, unique per request")
# For a mutating route's `responses=`: what the dependency chain may answer besides the route.
MUTATING_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"description": "malformed (or required and missing) Idempotency-Key"},
    401: {"description": "missing, malformed, unknown, expired or revoked bearer token"},
    403: {"description": "the token's scope is too low for this route"},
    409: {"description": "a request with this Idempotency-Key is still in progress"},
    429: {"description": "rate limit exceeded; see Retry-After"},
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_idempotency (
    principal TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status INTEGER,
    headers TEXT,
    body BLOB,
    created_at REAL NOT NULL,
    PRIMARY KEY (principal, key)
);
CREATE INDEX IF NOT EXISTS api_idempotency_created ON api_idempotency (created_at);
"""


class KeyInvalid(BadRequest, ValueError):
    slug = "idempotency-key-invalid"


class KeyMissing(BadRequest):
    slug = "idempotency-key-missing"


class KeyInProgress(Conflict):
    slug = "idempotency-key-in-progress"


class KeyReused(Unprocessable):
    """The key came back with a different request (the draft's 422)."""

    slug = "idempotency-key-reused"


class Begin(Enum):
    """How a key's first look went, when there is nothing to replay."""

    STARTED = "started"  # the caller runs the request, then finish() or abandon()
    IN_PROGRESS = "in_progress"
    MISMATCH = "mismatch"  # the key was used for a different request


@dataclass(frozen=True, slots=True)
class Stored:
    """A kept response."""

    status: int
    headers: list[tuple[str, str]]  # as sent, less content-length
    body: bytes


# A request still running after this long was cut off (a replica killed mid-request): its key
# is freed for the retry: far above the time any request should take.
IN_FLIGHT_MAX_S = 600.0


class IdempotencyStore(StateStore):
    """Keys and their responses on the shared state, by (principal, key). Status NULL: still
    running."""

    def __init__(self, target: StateTarget = ":memory:", ttl_s: float = 86400.0,
                 now: float | None = None) -> None:
        self.ttl_s = ttl_s
        super().__init__(target, _SCHEMA)
        # A request a restart cut off would otherwise hold its key at 409 until it expired.
        # Alone on its SQLite file nothing is in flight at start-up; replicas sharing
        # PostgreSQL may be running requests of their own, so only stale ones go.
        if self._db.dialect == "sqlite":
            self._db.execute("DELETE FROM api_idempotency WHERE status IS NULL")
        else:
            at = time.time() if now is None else now
            self._db.execute("DELETE FROM api_idempotency WHERE status IS NULL AND "
                             "created_at <= ?", (at - IN_FLIGHT_MAX_S,))

    def begin(self, principal: str, key: str, fingerprint: str, now: float) -> Begin | Stored:
        with self.transaction() as db:
            db.execute("DELETE FROM api_idempotency WHERE created_at <= ?",
                       (now - self.ttl_s,))
            r = db.execute(
                "SELECT fingerprint, status, headers, body FROM api_idempotency "
                "WHERE principal = ? AND key = ?", (principal, key)).fetchone()
            if r is None:
                db.execute(
                    "INSERT INTO api_idempotency (principal, key, fingerprint, created_at) "
                    "VALUES (?,?,?,?)", (principal, key, fingerprint, now))
        if r is None:
            return Begin.STARTED
        if r[0] != fingerprint:
            return Begin.MISMATCH
        if r[1] is None:
            return Begin.IN_PROGRESS
        return Stored(r[1], [(k, v) for k, v in json.loads(r[2])], bytes(r[3]))

    def finish(self, principal: str, key: str, response: Stored) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE api_idempotency SET status = ?, headers = ?, body = ? "
                "WHERE principal = ? AND key = ?",
                (response.status, json.dumps(response.headers), response.body, principal, key))

    def abandon(self, principal: str, key: str) -> None:
        """Forget a key whose request failed, so that a retry runs."""
        with self._lock:
            self._db.execute("DELETE FROM api_idempotency WHERE principal = ? AND key = ? "
                             "AND status IS NULL", (principal, key))


def fingerprint(method: str, path: str, query: str, body: bytes) -> str:
    """What makes two requests the same one: a JSON body by its content (a retry that
    re-serialises with other whitespace or key order is the same request), any other by its
    bytes."""
    h = hashlib.sha256(f"{method.upper()} {path}?{query}\n".encode())
    h.update(hashlib.sha256(_canonical(body)).digest())
    return h.hexdigest()


def _canonical(body: bytes) -> bytes:
    if not body.strip():
        return b""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return body
    return json.dumps(value, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode()


def parse_key(values: list[str]) -> str | None:
    """The key from the header's values (None without one); KeyInvalid if malformed."""
    if not values:
        return None
    if len(values) > 1:
        raise KeyInvalid(f"send one {HEADER} header, not {len(values)}")
    key = values[0].strip()
    if len(key) >= 2 and key[0] == key[-1] == '"':  # the draft's sf-string form
        key = _ESCAPE.sub(r"\1", key[1:-1])
    if not key or len(key) > MAX_KEY or not _PRINTABLE.fullmatch(key):
        raise KeyInvalid(f"{HEADER} must be 1 to {MAX_KEY} printable ASCII characters")
    return key


def _to_response(result: object, status_code: int) -> Response:
    if isinstance(result, Response):
        return result
    if result is None and status_code == 204:
        return Response(status_code=204)
    return JSONResponse(jsonable_encoder(result), status_code=status_code)


def _keep(response: Response) -> Stored:
    body = getattr(response, "body", None)
    if not isinstance(body, bytes | memoryview):
        raise TypeError(f"an idempotent route cannot keep a {type(response).__name__}")
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers
               if k.lower() != b"content-length"]
    return Stored(response.status_code, headers, bytes(body))


def _replay(stored: Stored) -> Response:
    response = Response(content=stored.body, status_code=stored.status)
    response.raw_headers.extend((k.encode("latin-1"), v.encode("latin-1"))
                                for k, v in stored.headers)
    response.headers[REPLAYED] = "true"
    return response


@dataclass(slots=True)
class Idempotency:
    """One request's idempotency: `run` its handler through it."""

    principal: Principal
    key: str | None
    fingerprint: str
    store: IdempotencyStore
    clock: Callable[[], float]

    async def run(self, handler: Callable[[], object], status_code: int = 200) -> Response:
        if self.key is None:
            return await self._call(handler, status_code)
        who, key = self.principal.token_id, self.key
        begun = await run_in_threadpool(self.store.begin, who, key, self.fingerprint,
                                        self.clock())
        if isinstance(begun, Stored):
            return _replay(begun)
        if begun is Begin.IN_PROGRESS:
            raise KeyInProgress(f"a request with this {HEADER} is still in progress")
        if begun is Begin.MISMATCH:
            raise KeyReused(f"this {HEADER} was used for a different request")
        try:
            response = await self._call(handler, status_code)
            if response.status_code >= 500:  # likely transient: let a retry run again
                self.store.abandon(who, key)
            else:
                self.store.finish(who, key, _keep(response))
        except BaseException:
            # Called directly, not awaited: a cancelled request must still release its key.
            self.store.abandon(who, key)
            raise
        return response

    @staticmethod
    async def _call(handler: Callable[[], object], status_code: int) -> Response:
        is_async = inspect.iscoroutinefunction(handler)  # a bool: no narrowing of handler
        result = handler() if is_async else await run_in_threadpool(handler)
        if inspect.isawaitable(result):  # e.g. a lambda that returns a coroutine
            result = await result
        return _to_response(result, status_code)
