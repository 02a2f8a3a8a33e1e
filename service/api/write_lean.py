"""The lean door for writes: node agents' POSTs answered before FastAPI routes.

Every node agent posts every round, so the write endpoints take most of the service's requests;
FastAPI's routing, dependency solving, query validation and exception middleware cost more CPU
per request than inflating, parsing and ingesting one 8-GPU body (`python -m bench.collectors`,
section 3). This ASGI middleware reads the body of a write whose query it can read in full (the
same parameters, value sets and body limit as service.api.write) and hands it to the one answer
both doors share (service.api.write_answer): the same work, the same answers.

Anything else it hands to the FastAPI routes unchanged, with the body bytes it already read
replayed: a request without a valid token (their 401), a query FastAPI would refuse or read
differently (a repeated or unknown value: their 422), an unsupported Content-Encoding (415), a
body over the limit (413), a sender that went away, or a service not running (503). So every
error a sender can provoke before its body is read is answered by the FastAPI door, and the
lean door only ever answers what it fully understands.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

from starlette.datastructures import Headers
from starlette.requests import Request

from service.api import write_answer, write_arrow
from service.api.state import Running
from service.api.write_auth import authorize
from service.errors import GpuhealthError

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

# Per path, the query parameters the FastAPI route declares (service.api.write).
_PARAMS = {
    "/write": frozenset({"db", "precision", "strict", "u", "p"}),
    "/v1/write": frozenset({"db", "precision", "strict", "u", "p"}),
    "/api/v2/write": frozenset({"org", "bucket", "precision", "strict", "u", "p"}),
}
_PRECISIONS = frozenset({"ns", "n", "us", "u", "ms", "s", "m", "h"})
_STRICT = {"true": True, "false": False}  # other spellings FastAPI reads go to FastAPI


class LeanWrite:
    """ASGI middleware: POSTs to the write paths that it can answer in full, answered here."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive,
                       send: Send) -> None:
        params = _PARAMS.get(scope.get("path", "")) if scope["type"] == "http" else None
        if params is None or scope["method"] != "POST" or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        st = getattr(scope["app"].state, "gpuhealth", None) if "app" in scope else None
        query = _query(scope.get("query_string", b""), params)
        headers = Headers(scope=scope)
        if not isinstance(st, Running) or query is None or not _authorized(scope, st, query):
            await self.app(scope, receive, send)
            return
        encoding = headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity", "gzip"):
            await self.app(scope, receive, send)
            return
        limit = st.settings.ingest.max_body_bytes
        declared = headers.get("content-length", "")
        if (declared.isascii() and declared.isdigit()) and int(declared) > limit:
            await self.app(scope, receive, send)
            return
        body, whole, replay = await _read(receive, limit)
        if not whole:  # over the limit or a disconnect: FastAPI answers, seeing what we saw
            await self.app(scope, _replay(replay, receive), send)
            return
        response = await write_answer.answer(
            st, body, gz=encoding == "gzip", precision=query.get("precision", "ns"),
            strict=_STRICT[query.get("strict", "false")],
            arrow=write_arrow.is_arrow(headers.get("content-type", "")), path=scope["path"])
        await response(scope, receive, send)


def _query(raw: bytes, params: frozenset[str]) -> dict[str, str] | None:
    """The declared parameters, or None where FastAPI might read the query otherwise."""
    try:
        pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
    except ValueError:
        return None
    out: dict[str, str] = {}
    for k, v in pairs:
        if k in params:
            if k in out:
                return None
            out[k] = v
    if out.get("precision", "ns") not in _PRECISIONS or out.get("strict", "false") not in _STRICT:
        return None
    return out


def _authorized(scope: MutableMapping[str, Any], st: Running, query: dict[str, str]) -> bool:
    try:  # not charged: the FastAPI route that answers a refusal charges it, once
        authorize(Request(scope), st, query.get("u"), query.get("p"), charge=False)
    except GpuhealthError:
        return False  # answered (401) by the FastAPI route, as it always was
    return True


async def _read(receive: Receive, limit: int) -> tuple[bytes, bool, list[Message]]:
    """The body; whether it was read whole within `limit`; if not, the messages to replay
    (what was read as one message, then the one that stopped the read: a disconnect)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            return b"".join(chunks), False, [_request(chunks, True), msg]
        chunk = msg.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = bool(msg.get("more_body", False))
        if size > limit:
            return b"".join(chunks), False, [_request(chunks, more)]
        if not more:
            return b"".join(chunks), True, []


def _request(chunks: list[bytes], more: bool) -> Message:
    return {"type": "http.request", "body": b"".join(chunks), "more_body": more}


def _replay(queue: list[Message], receive: Receive) -> Receive:
    """A receive that gives `queue` first, then what `receive` gives."""

    async def again() -> Message:
        return queue.pop(0) if queue else await receive()

    return again
