"""Line-protocol writes (InfluxDB v1-compatible `/write` and `/v1/write`, v2 `/api/v2/write`):
bounded body reads, bounded gzip inflation, and parsing and ingest off the event loop.

Answered as InfluxDB answers, so Telegraf and InfluxDB clients push unchanged: what the catalog
does not track is ignored (and counted), a point sent again overwrites, and a 400 is a partial
write that keeps every good point and names each refused line."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from collectors.frames import Batch, Rejection
from service.api import influx_compat
from service.api.inflate import Inflated, inflate
from service.api.schemas import RejectionOut, WriteError
from service.api.state import Running, State
from service.api.write_auth import authorize
from service.errors import (
    BadRequest,
    GpuhealthError,
    PayloadTooLarge,
    ServiceUnavailable,
    UnsupportedMediaType,
)
from service.stages.ingest import IngestResult

Precision = Literal["ns", "n", "us", "u", "ms", "s", "m", "h"]  # InfluxDB v1 and v2 spellings
log = logging.getLogger(__name__)
router = APIRouter()
router.include_router(influx_compat.router)
# Where errors answer InfluxDB's way (service.api.problems): these and influx_compat's.
INFLUXDB_PATHS = ("/api/v2/write", "/write", "/v1/write", *influx_compat.PATHS)
# What a refused write's body says beside the problem members: nothing was written.
ARROW = "application/vnd.apache.arrow.stream"  # service.api.write_arrow.MEDIA_TYPE
_NOTHING_WRITTEN = {"accepted": 0, "rejected": 0, "rejections": [], "truncated": False}


class PartialWrite(BadRequest):
    """Some lines were refused, every valid one kept (InfluxDB's `partial write`)."""

    slug = "partial-write"
    title = "Partial write"


class EntitiesPending(ServiceUnavailable):
    """New entities past one anonymous request's share (ingest.max_new_gpus_per_batch) were
    held back, the rest kept: send the same body again after Retry-After (what was kept
    merges, last write wins). A 503, not a 400: Telegraf's influxdb outputs, InfluxDB clients
    and our agent and relay retry a 503 and drop a 4xx (a 400 here lost a relay's cold start)."""

    slug = "entities-pending"
    title = "New entities pending"


PENDING_RETRY_S = 1  # Retry-After of EntitiesPending: each resend takes the next share


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
output). Errors are InfluxDB's `{"error": ...}` with the problem-detail members (RFC 9457)
beside it, as `application/json`."""
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
    limit = st.settings.ingest.max_body_bytes
    try:
        authorize(request, st, u, p)
        if request.headers.get("content-type", "").split(";", 1)[0].strip().lower() == ARROW:
            # Arrow is read on the lean route only (service.api.write_arrow); a sender that
            # meets this answer sends line protocol instead.
            raise UnsupportedMediaType(f"Content-Type {ARROW} is read only by the lean write "
                                       "route (disabled here); send line protocol")
        try:
            body = await _read_body(request, limit)
        except ClientDisconnect:  # the sender went away mid-body: nothing to answer
            log.info("a write's sender disconnected before its body was read")
            st.metrics.write_requests.labels("499").inc()
            return Response(status_code=499)
        gz = _gzip(request.headers.get("content-encoding", ""))
        # Inflating, parsing and ingest are CPU work (ingest under locks): off the event loop,
        # so health probes and reads are answered while a large write is worked through.
        res, cut = await run_in_threadpool(_write_body, st, body, gz, precision, strict)
    except GpuhealthError as refused:  # answered by service.api.problems
        st.metrics.write_requests.labels(str(refused.status)).inc()
        for name, value in _NOTHING_WRITTEN.items():
            refused.extensions.setdefault(name, value)
        raise
    if not res.rejected:
        st.metrics.write_requests.labels("204").inc()
        return Response(status_code=204)
    answer = refusal(res, cut)
    st.metrics.write_requests.labels(str(answer.status)).inc()
    raise answer


def refusal(res: IngestResult, cut: bool) -> PartialWrite | EntitiesPending:
    """What a write with refused samples is answered: 503 while new entities are pending (the
    sender sends it again), else the partial write's 400."""
    if not (res.pending_nodes or res.pending_more):
        return partial_write(res, cut)
    # `pending_nodes`: the nodes to send again (a relay sends only theirs); absent when there
    # were too many to list: send the whole body again.
    nodes = None if res.pending_more else sorted(res.pending_nodes)
    return EntitiesPending(
        f"{res.rejected} samples not taken yet: more new entities than one request may add "
        f"(ingest.max_new_gpus_per_batch); {res.accepted} samples kept; send the body again "
        f"in {PENDING_RETRY_S} s. {partial_write_message(res)}",
        headers={"Retry-After": str(PENDING_RETRY_S)}, retry_after=PENDING_RETRY_S,
        pending_nodes=nodes, accepted=res.accepted, rejected=res.rejected,
        rejections=[_rejection(r).model_dump() for r in res.rejections], truncated=cut)


def partial_write(res: IngestResult, cut: bool) -> PartialWrite:
    """The 400 of a write with refused lines (every valid sample was kept)."""
    return PartialWrite(partial_write_message(res), accepted=res.accepted, rejected=res.rejected,
                        rejections=[_rejection(r).model_dump() for r in res.rejections],
                        truncated=cut)


def partial_write_message(res: IngestResult, shown: int = 5) -> str:
    """InfluxDB's wording (`partial write: ... dropped=N`), naming the first refused lines:
    what Telegraf logs when it is answered 400."""
    listed = "; ".join(str(r) for r in res.rejections[:shown])
    more = len(res.rejections) - shown
    if more > 0:
        listed += f"; and {more} more listed"
    return (f"partial write: {res.accepted} samples kept, {res.rejected} refused: {listed} "
            f"dropped={res.rejected}")


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


@dataclass(slots=True)
class Parsed:
    """One body inflated and parsed: its Batch (with the parse rejections), the service time
    it was parsed at, and where a gzip body was cut short (its reason and line) if it was."""

    batch: Batch
    now: float
    cut: tuple[str, int] | None = None


def _write_body(st: Running, body: bytes, gz: bool, precision: str, strict: bool
                ) -> tuple[IngestResult, bool]:
    """Inflate (bounded), parse and ingest one body; runs in a worker thread. The flag: the
    gzip body was cut short (a sender may resend it whole; points merge, last write wins)."""
    parsed = parse_body(st, body, gz, precision, strict)
    t0 = time.perf_counter()
    res = st.pipeline.ingest(parsed.batch, parsed.now, from_wire=True)
    st.metrics.ingest_seconds.labels("write").observe(time.perf_counter() - t0)
    return finish(st, parsed, res, strict)


def parse_body(st: Running, body: bytes | Inflated, gz: bool, precision: str, strict: bool
               ) -> Parsed:
    """Inflate (bounded) and parse one body, noting node agents' collector reports. A gzip
    body may come inflated already (`Inflated`: the lean route inflates a small one on the
    event loop, service.api.write_lean)."""
    if isinstance(body, Inflated):
        got = body
    elif not gz:
        return _parse_lines(st, body, precision, strict)
    else:
        got = inflate(body, limit=st.settings.ingest.max_body_bytes)
    parsed = _parse_lines(st, got.data, precision, strict)
    if got.cut is not None:  # the whole lines before the cut were kept; say where it ended
        parsed.cut = (got.cut, got.data.count(b"\n") + 1)
    return parsed


def finish(st: Running, parsed: Parsed, res: IngestResult, strict: bool
           ) -> tuple[IngestResult, bool]:
    """After a body's ingest: a cut gzip body's refusal, and the mapper kept bounded."""
    if parsed.cut is not None:
        res.refuse(1, parsed.cut[0], line=parsed.cut[1])
    held = sum(len(w) for w in st.pipeline.store.scopes.values())
    mapper = st.mappers[strict]
    # Names the store turned away must not live on in the mapper: past twice what the store
    # holds it starts over, so a flood of names costs neither memory nor the garbage
    # collector's time (a full collection scans every object held). Looked at first without
    # the lock: this may run on the event loop, which must not wait for a parse.
    if mapper.remembered > 2 * held + MAPPER_SLACK:
        with st.mapper_lock:
            if mapper.remembered > 2 * held + MAPPER_SLACK:
                mapper.forget_entities()
    return res, parsed.cut is not None


def _parse_lines(st: Running, data: bytes, precision: str, strict: bool) -> Parsed:
    now = st.now()
    mapper = st.mappers[strict]
    with st.mapper_lock:
        # Lines without a timestamp get the server's time, as InfluxDB does.
        batch = mapper.parse(
            data, default_ts_ns=int(now * 1e9), precision=precision,
            max_lines=st.settings.ingest.max_lines_per_request, max_bytes=None)
        reports = mapper.take_reports()
        ignored = mapper.take_ignored()
    st.metrics.ignored.note(ignored)
    if reports:  # node agents' collector status: not samples, kept for /metrics
        st.remote.record(reports)
    return Parsed(batch, now)


MAPPER_SLACK = 10_000  # entities a mapper may remember beyond twice what the store holds


def _rejection(r: Rejection) -> RejectionOut:
    return RejectionOut(line=r.line, reason=r.reason, entity=r.entity, metric=r.metric)
