"""Line-protocol writes (InfluxDB v1-compatible `/write` and `/v1/write`): bounded body reads,
bounded gzip inflation, and parsing and ingest off the event loop."""

from __future__ import annotations

import base64
import binascii
import hmac
import time
import zlib
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from collectors.frames import Rejection
from service.api.schemas import RejectionOut, WriteError
from service.api.state import Running, State
from service.ingest import IngestResult

Precision = Literal["ns", "n", "us", "u", "ms", "s", "m", "h"]  # InfluxDB v1 and v2 spellings
router = APIRouter()


_WRITE_DOC = """Line protocol, plain or `Content-Encoding: gzip`: our own schema (`gpu`, `nvlink`,
`ib_port`, `xid`), Telegraf's `nvidia_smi` and `infiniband`, and node agents' collector status
(`gpuhealth_collector`, exported on /metrics). 204 when every line was
accepted; 400 listing each rejected line (number and reason) while every valid sample is kept;
413 when the body, or what it inflates to, is over the limit. `strict=false` ignores
measurements and fields the catalog does not track instead of rejecting them."""
_WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": WriteError}, 401: {"model": WriteError}, 413: {"model": WriteError},
    415: {"model": WriteError}}


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _authorize(request: Request, st: Running, u: str | None, p: str | None) -> None:
    """Accept a write token the ways InfluxDB clients send it: `Authorization: Token T` (v2
    clients, Telegraf's influxdb_v2 output), `Bearer T`, `Basic base64(user:T)` or `?u=&p=T`
    (v1 clients, Telegraf's influxdb output with a password)."""
    tokens = [t.get_secret_value().encode() for t in st.settings.ingest.tokens]
    if not tokens:
        return
    header = request.headers.get("authorization", "")
    scheme, _, cred = header.partition(" ")
    given: str | None = None
    if scheme.lower() in ("token", "bearer"):
        given = cred.strip()
    elif scheme.lower() == "basic":
        try:
            given = base64.b64decode(cred.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            raise _Refused(401, "malformed Basic authorization header") from None
    elif p is not None:
        given = p
    if not given:
        raise _Refused(401, "authorization required: send 'Authorization: Token <token>'")
    # Constant-time comparison against every token, so timing tells nothing.
    if not any(hmac.compare_digest(given.encode(), t) for t in tokens):
        raise _Refused(401, "invalid token")


@router.post("/api/v2/write", tags=["ingest"], status_code=204, response_class=Response,
             operation_id="write_influxdb_v2", summary="Write line protocol (InfluxDB v2 path)",
             description=_WRITE_DOC, responses=_WRITE_ERRORS)
async def write_v2(
    request: Request,
    st: State,
    org: Annotated[str | None, Query(description="accepted for InfluxDB compatibility")] = None,
    bucket: Annotated[str | None, Query(description="accepted for InfluxDB compatibility")] = None,
    precision: Precision = "ns",
    strict: bool = True,
) -> Response:
    return await write(request, st, None, precision, strict)


@router.post("/write", tags=["ingest"], status_code=204, response_class=Response,
             operation_id="write_influxdb_v1", summary="Write line protocol (InfluxDB v1 path)",
             description=_WRITE_DOC, responses=_WRITE_ERRORS)
@router.post("/v1/write", tags=["ingest"], status_code=204, response_class=Response,
             operation_id="write", summary="Write line protocol", description=_WRITE_DOC,
             responses=_WRITE_ERRORS)
async def write(
    request: Request,
    st: State,
    db: Annotated[str | None, Query(description="accepted for InfluxDB compatibility")] = None,
    precision: Precision = "ns",
    strict: bool = True,
    u: Annotated[str | None, Query(description="InfluxDB v1 user (ignored)")] = None,
    p: Annotated[str | None, Query(description="InfluxDB v1 password: a write token")] = None,
) -> Response:
    limit = st.settings.ingest.max_body_bytes
    try:
        _authorize(request, st, u, p)
        body = await _read_body(request, limit)
        data = _inflate(body, request.headers.get("content-encoding", ""), limit)
    except _Refused as r:
        st.metrics.write_requests.labels(str(r.status)).inc()
        headers = {"WWW-Authenticate": 'Token realm="gpuhealth"'} if r.status == 401 else None
        return JSONResponse(WriteError(error=r.message).model_dump(), status_code=r.status,
                            headers=headers)
    # Parsing and ingest are CPU work under locks: keep them off the event loop.
    res = await run_in_threadpool(_ingest_lines, st, data, precision, strict)
    if not res.rejected:
        st.metrics.write_requests.labels("204").inc()
        return Response(status_code=204)
    st.metrics.write_requests.labels("400").inc()
    first = f"; first: {res.rejections[0]}" if res.rejections else ""
    err = WriteError(error=f"partial write: {res.rejected} rejected, {res.accepted} samples "
                           f"kept{first}",
                     accepted=res.accepted, rejected=res.rejected,
                     rejections=[_rejection(r) for r in res.rejections])
    return JSONResponse(err.model_dump(), status_code=400)


async def _read_body(request: Request, limit: int) -> bytes:
    too_big = _Refused(413, f"request body exceeds the limit of {limit} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_big  # refused before reading a byte of it
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_big
    return bytes(body)


def _inflate(body: bytes, encoding: str, limit: int) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise _Refused(415, f"unsupported Content-Encoding {encoding!r}; send gzip or none")
    # Bounded inflation: a small gzip bomb must not expand past the body limit in memory.
    out = bytearray()
    rest = body
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += d.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            raise _Refused(400, f"body is not valid gzip: {exc}") from None
        if len(out) > limit or d.unconsumed_tail:
            raise _Refused(413, f"decompressed body exceeds the limit of {limit} bytes")
        if not d.eof:
            raise _Refused(400, "gzip body is truncated")
        rest = d.unused_data  # concatenated gzip members form one stream
    return bytes(out)


def _ingest_lines(st: Running, data: bytes, precision: str, strict: bool) -> IngestResult:
    now = st.now()
    mapper = st.mappers[strict]
    with st.mapper_lock:
        # Lines without a timestamp get the server's time, as InfluxDB does.
        batch = mapper.parse(
            data, default_ts_ns=int(now * 1e9), precision=precision,
            max_lines=st.settings.ingest.max_lines_per_request, max_bytes=None)
        reports = mapper.take_reports()
    if reports:  # node agents' collector status: not samples, kept for /metrics
        st.remote.record(reports)
    t0 = time.perf_counter()
    res = st.pipeline.ingest(batch, now)
    st.metrics.ingest_seconds.labels("write").observe(time.perf_counter() - t0)
    return res


def _rejection(r: Rejection) -> RejectionOut:
    return RejectionOut(line=r.line, reason=r.reason, entity=r.entity, metric=r.metric)
