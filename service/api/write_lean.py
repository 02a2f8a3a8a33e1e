"""The lean route for line-protocol writes: node agents' POSTs answered before FastAPI routes.

Every node agent posts every round, so the write endpoints take most of the service's requests;
FastAPI's routing, dependency solving, query validation and exception middleware cost more CPU
per request than inflating, parsing and ingesting one 8-GPU body (`python -m bench.collectors`,
section 3). This ASGI middleware answers a write whose query it can read in full (the same
parameters, value sets and body limit as service.api.write) with the same work
(`write._write_body`, or parsing alone and a coalesced ingest with other senders' writes:
service.api.coalesce) and the same answers: 204, or the partial write's 400 with every refused
line named, or a refusal (413, 400) in InfluxDB's shape (service.api.problems).

Anything else it hands to the FastAPI routes unchanged, with the body bytes it already read
replayed: a request without a valid token (their 401), a query FastAPI would refuse or read
differently (a repeated or unknown value: their 422), an unsupported Content-Encoding (415), a
body over the limit (413), a sender that went away, or a service not running (503). So every
error a sender can provoke before its body is parsed is answered by the one code path it
always was, and the lean path only ever answers what it fully understands.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from anyio.to_thread import run_sync
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response

from service.api import problems, write, write_arrow
from service.api.coalesce import Coalescer
from service.api.inflate import Inflated, inflate_small
from service.api.state import Running
from service.api.write_auth import authorize
from service.errors import GpuhealthError
from service.stages.ingest import IngestResult

log = logging.getLogger(__name__)

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
_T = TypeVar("_T")
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

# Per path, the query parameters the FastAPI route declares (service.api.write).
_PARAMS = {
    "/write": frozenset({"db", "precision", "strict", "u", "p"}),
    "/v1/write": frozenset({"db", "precision", "strict", "u", "p"}),
    "/api/v2/write": frozenset({"org", "bucket", "precision", "strict", "u", "p"}),
}
_PRECISIONS = frozenset({"ns", "n", "us", "u", "ms", "s", "m", "h"})
_STRICT = {"true": True, "false": False}  # other spellings FastAPI reads go to FastAPI
# An uncompressed body this small (a node agent's round is ~17 KiB of Arrow, ~60 KiB of lines)
# is parsed on the event loop: the parse costs less than handing it to a worker thread and
# back, and with hundreds of agents a second the thread hops and the threads' GIL handovers
# were most of such a request's CPU (`python -m bench.collectors`, section 3). Its work is
# bounded by its size, known before anything is read. A gzip body is inflated on the loop
# only as far as INLINE_INFLATED_BYTES (work bounded by that cap, whatever the body claims):
# one that inflates past it (or holds several members, or is not gzip) goes to a worker
# thread, which inflates it in full as before (tests/service/test_write_hostile.py); so does
# a larger body. The hop to a worker thread cost a node agent's gzip body more CPU than
# inflating and parsing it (`python -m bench.collectors`: Arrow gzip against uncompressed).
# Nor is the parse's cost bounded by size alone: a line naming a new entity costs ~20 µs on
# the reference path, so a 256 KiB flood of new names held the event loop (and /healthz) for
# hundreds of ms. A body with more than INLINE_NEW_LINES lines the mapper has not learned (or
# Arrow keys the decoder has not met) goes to a worker thread (a node agent's first round
# does; its later ones stay inline).
INLINE_BODY_BYTES = 64 * 1024
INLINE_INFLATED_BYTES = 256 * 1024
INLINE_NEW_LINES = 256


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
        arrow = write_arrow.is_arrow(headers.get("content-type", ""))
        response = await _answer(st, body, encoding == "gzip", query, scope["path"],
                                 _coalescing(st), arrow)
        if arrow:  # this service read it as Arrow (a sender tells us from one that did not)
            response.headers[write_arrow.PAYLOAD_HEADER] = "arrow"
        await response(scope, receive, send)


def _coalescing(st: Running) -> Coalescer | None:
    """The running service's coalescer; None when writes are ingested alone."""
    window = st.settings.ingest.coalesce_ms / 1e3
    if window <= 0:
        return None
    if st.coalescer is None:
        st.coalescer = Coalescer(st.pipeline, window, st.now,
                                 st.metrics.ingest_seconds.labels("write").observe)
    return st.coalescer


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


async def _answer(st: Running, body: bytes, gz: bool, query: dict[str, str],
                  path: str, coalescer: Coalescer | None, arrow: bool = False) -> Response:
    precision = query.get("precision", "ns")
    strict = _STRICT[query.get("strict", "false")]
    inline = coalescer is not None and len(body) <= INLINE_BODY_BYTES
    payload: bytes | Inflated = body
    if inline and gz:
        # Never past the body limit: one over it is refused (413) by the full inflate.
        small = inflate_small(body, cap=min(INLINE_INFLATED_BYTES,
                                            st.settings.ingest.max_body_bytes))
        if small is None:
            inline = False  # inflated (and answered) in a worker thread, in full
        else:
            payload = small
    try:
        if arrow:  # our agent's columnar payload (service.api.write_arrow): decoded without
            # the parsers' lock, so never waiting for (nor holding up) a line-protocol parse
            here = _inline_arrow(st, payload, gz, coalescer) if inline else None
            if here is None:
                here = await run_sync(_parse_arrow, st, payload, gz, coalescer, None)
            parsed, plan_ = here
            got = (await coalescer.ingest(parsed.batch, plan_)
                   if coalescer is not None and plan_ is not None else
                   await run_sync(_ingest_alone, st, parsed))
            res, cut = write.finish(st, parsed, got, strict)
        elif coalescer is None:
            res, cut = await run_sync(write._write_body, st, body, gz, precision, strict)
        else:  # parsed alone, ingested with other senders' batches (service.api.coalesce)
            text = payload.data if isinstance(payload, Inflated) else payload
            mapper = st.mappers[strict]
            parsed, plan = await _off_loop(
                st, inline, lambda: not mapper.unfamiliar(text, INLINE_NEW_LINES),
                _parse, st, payload, gz, precision, strict, coalescer)
            res, cut = write.finish(st, parsed, await coalescer.ingest(parsed.batch, plan),
                                    strict)
    except GpuhealthError as refused:
        st.metrics.write_requests.labels(str(refused.status)).inc()
        for name, value in write._NOTHING_WRITTEN.items():
            refused.extensions.setdefault(name, value)
        return problems.influx_response(refused, path)
    except Exception:  # as the FastAPI route's last handler answers it (service.api.problems)
        log.exception("a write failed")
        return problems.influx_response(
            GpuhealthError("the service failed to answer this request"), path)
    if not res.rejected:
        st.metrics.write_requests.labels("204").inc()
        return Response(status_code=204)
    answer = write.refusal(res, cut)
    st.metrics.write_requests.labels(str(answer.status)).inc()
    return problems.influx_response(answer, path)


async def _off_loop(st: Running, inline: bool, cheap: Callable[[], bool],
                    fn: Callable[..., _T], *args: Any) -> _T:
    """fn(*args) here when `inline`, the parsers are free (never waiting for a worker
    thread's parse on the event loop) and `cheap()` (asked under their lock), else in a
    worker thread."""
    if inline and st.mapper_lock.acquire(blocking=False):
        try:
            if cheap():
                return fn(*args)
        finally:
            st.mapper_lock.release()
    return await run_sync(fn, *args)


def _parse_arrow(st: Running, body: bytes | Inflated, gz: bool, coalescer: Coalescer | None,
                 max_new: int | None = None
                 ) -> tuple[write.Parsed, tuple[frozenset[str], int, bool] | None]:
    parsed = write_arrow.parse_arrow(st, body, gz, max_new)
    return parsed, coalescer.plan(parsed.batch) if coalescer is not None else None


def _inline_arrow(st: Running, body: bytes | Inflated, gz: bool, coalescer: Coalescer | None
                  ) -> tuple[write.Parsed, tuple[frozenset[str], int, bool] | None] | None:
    """Decoded here, on the event loop, unless it names more than INLINE_NEW_LINES entities
    not met before (None: decode it in a worker thread)."""
    from collectors.arrow_batch import OverBudget  # pyarrow: imported with the first body

    try:
        return _parse_arrow(st, body, gz, coalescer, INLINE_NEW_LINES)
    except OverBudget:
        return None


def _ingest_alone(st: Running, parsed: write.Parsed) -> IngestResult:
    t0 = time.perf_counter()
    res = st.pipeline.ingest(parsed.batch, parsed.now, from_wire=True)
    st.metrics.ingest_seconds.labels("write").observe(time.perf_counter() - t0)
    return res


def _parse(st: Running, body: bytes | Inflated, gz: bool, precision: str, strict: bool,
           coalescer: Coalescer) -> tuple[write.Parsed, tuple[frozenset[str], int, bool]]:
    parsed = write.parse_body(st, body, gz, precision, strict)
    return parsed, coalescer.plan(parsed.batch)
