"""The FastAPI door of line-protocol writes (InfluxDB v1-compatible `/write` and `/v1/write`,
v2 `/api/v2/write`): the query read and validated (its 422s), the write token checked and
charged (401), an unknown Content-Encoding refused (415), the body read within the limit (413)
or given up by its sender (499). The answer, once the body is read whole, is
service.api.write_answer's, as it is on the lean door (service.api.write_lean), which answers
before FastAPI routes what it fully understands and hands the rest here.

Answered as InfluxDB answers, so Telegraf and InfluxDB clients push unchanged: what the catalog
does not track is ignored (and counted), a point sent again overwrites, and a 400 is a partial
write that keeps every good point and names each refused line."""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from starlette.requests import ClientDisconnect

from service.api import influx_compat, write_answer
from service.api.schemas import WriteError
from service.api.state import State
from service.api.write_arrow import is_arrow
from service.api.write_auth import authorize
from service.errors import GpuhealthError, PayloadTooLarge, UnsupportedMediaType

Precision = Literal["ns", "n", "us", "u", "ms", "s", "m", "h"]  # InfluxDB v1 and v2 spellings
log = logging.getLogger(__name__)
router = APIRouter()
router.include_router(influx_compat.router)
# Where errors answer InfluxDB's way (service.api.problems): these and influx_compat's.
INFLUXDB_PATHS = ("/api/v2/write", "/write", "/v1/write", *influx_compat.PATHS)


_WRITE_DOC = """Line protocol, plain or `Content-Encoding: gzip`: our own schema (`gpu`, `nvlink`,
`ib_port`, `xid`), Telegraf's `nvidia_smi` and `infiniband`, and node agents' collector status
(`gpuhealth_collector`, exported on /metrics). Measurements and fields the catalog does not
track are ignored, as InfluxDB would store them and we have no use for them (counted per name in
`gpuhealth_ignored_fields_total`); a point sent again, or two points of one entity within one
step, overwrite (last write wins). 204 when every line was accepted; 400 (a partial write)
listing each refused line (number and reason: not line protocol, a value of the wrong type, an
invalid host or device name, a timestamp out of range, a number over 64 characters, a gzip body
cut short: its whole lines before the cut are kept) while every valid sample is kept; 503 with
`Retry-After` when a write without a token names more new GPUs than
`ingest.max_new_gpus_per_batch` (the rest was kept: send the same body again; `pending_nodes`
names the nodes still to come); 413 when the body, or what it inflates to, is over the limit,
when gzip inflates to over 100 times its size (past 1 MiB), or holds over 1,000 members.
`strict=true` refuses unknown measurements and fields instead (for checking a sender's
output). Our node agent's Arrow IPC (`Content-Type: application/vnd.apache.arrow.stream`,
gzip or not) is read too and answered the same way, with `X-Gpuhealth-Payload: arrow`; a
malformed one is refused whole (400 `arrow-payload-refused`, nothing written). Errors are
InfluxDB's `{"error": ...}` with the problem-detail members (RFC 9457) beside it, as
`application/json`."""
_WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": WriteError}, 401: {"model": WriteError}, 413: {"model": WriteError},
    415: {"model": WriteError}, 503: {"model": WriteError}}


@router.post("/api/v2/write", tags=["ingest"], status_code=204, response_class=Response,
             operation_id="write_influxdb_v2", summary="Write line protocol (InfluxDB v2 path)",
             description=_WRITE_DOC, responses=_WRITE_ERRORS)
async def write_v2(
    request: Request,
    st: State,
    org: Annotated[str | None, Query(description="accepted for InfluxDB compatibility")] = None,
    bucket: Annotated[str | None, Query(description="accepted for InfluxDB compatibility")] = None,
    precision: Precision = "ns",
    strict: bool = False,
    u: Annotated[str | None, Query(description="InfluxDB v1 user (ignored)")] = None,
    p: Annotated[str | None, Query(description="a write token, as InfluxDB's v1 `p`")] = None,
) -> Response:
    return await write(request, st, None, precision, strict, u, p)


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
    strict: bool = False,
    u: Annotated[str | None, Query(description="InfluxDB v1 user (ignored)")] = None,
    p: Annotated[str | None, Query(description="InfluxDB v1 password: a write token")] = None,
) -> Response:
    path = request.url.path
    try:
        authorize(request, st, u, p)
        try:
            body = await _read_body(request, st.settings.ingest.max_body_bytes)
        except ClientDisconnect:  # the sender went away mid-body: nothing to answer
            log.info("a write's sender disconnected before its body was read")
            st.metrics.write_requests.labels("499").inc()
            return Response(status_code=499)
        gz = _gzip(request.headers.get("content-encoding", ""))
    except GpuhealthError as refused:
        return write_answer.refused(st, refused, path)
    return await write_answer.answer(st, body, gz=gz, precision=precision, strict=strict,
                                     arrow=is_arrow(request.headers.get("content-type", "")),
                                     path=path)


async def _read_body(request: Request, limit: int) -> bytes:
    too_big = PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
    declared = request.headers.get("content-length", "")
    if (declared.isascii() and declared.isdigit()) and int(declared) > limit:
        raise too_big  # refused before reading a byte of it
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_big
    return bytes(body)


def _gzip(encoding: str) -> bool:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return False
    if encoding != "gzip":
        raise UnsupportedMediaType(f"unsupported Content-Encoding {encoding!r}; send gzip or none")
    return True
