"""A write's answer, once its body is read whole: the one path behind both doors (the FastAPI
routes, service.api.write, and the lean ASGI route, service.api.write_lean).

Line protocol or our agent's Arrow (service.api.write_arrow), gzip or not; parsed on the event
loop when small and cheap, else in a worker thread; ingested with other senders' writes
(service.api.coalesce, when `ingest.coalesce_ms` > 0) or alone. Answered as InfluxDB answers:
204 when every line was accepted; the partial write's 400 naming each refused line while every
valid sample is kept; 503 with Retry-After while new entities are pending; a refusal (400, 413,
415) with nothing written; an unexpected failure as a 500. Errors are InfluxDB's `{"error":
...}` beside the problem-detail members (service.api.problems), counted per status in
`gpuhealth_write_requests_total`; every answer to an Arrow body says `X-Gpuhealth-Payload:
arrow`, so a sender tells it from a target that read the body as line protocol.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from anyio.to_thread import run_sync
from starlette.responses import Response

from collectors.frames import Rejection
from service.api import problems, write_arrow
from service.api.coalesce import Coalescer
from service.api.inflate import Inflated, inflate_small
from service.api.schemas import RejectionOut
from service.api.state import Running
from service.api.write_parse import Parsed, finish, ingest_alone, parse_body, write_body
from service.errors import BadRequest, GpuhealthError, ServiceUnavailable
from service.stages.ingest import IngestResult

log = logging.getLogger(__name__)
_T = TypeVar("_T")
Plan = tuple[frozenset[str], int, bool]  # service.api.coalesce.plan

# An uncompressed body this small (a node agent's round is ~17 KiB of Arrow, ~60 KiB of lines)
# is parsed on the event loop: the parse costs less than handing it to a worker thread and
# back, and with hundreds of agents a second the thread hops and the threads' GIL handovers
# were most of such a request's CPU (`python -m bench.collectors`, section 3). Its work is
# bounded by its size, known before anything is read. A gzip body is inflated on the loop
# only as far as INLINE_INFLATED_BYTES (work bounded by that cap, whatever the body claims):
# one that inflates past it (or holds several members, or is not gzip) goes to a worker
# thread, which inflates it in full as before (tests/api/test_write_hostile.py); so does
# a larger body. The hop to a worker thread cost a node agent's gzip body more CPU than
# inflating and parsing it (`python -m bench.collectors`: Arrow gzip against uncompressed).
# Nor is the parse's cost bounded by size alone: a line naming a new entity costs ~20 µs on
# the reference path, so a 256 KiB flood of new names held the event loop (and /healthz) for
# hundreds of ms. A body with more than INLINE_NEW_LINES lines the mapper has not learned (or
# Arrow keys the decoder has not met) goes to a worker thread (a node agent's first round
# does; its later ones stay inline). Without coalescing every body goes to a worker thread.
INLINE_BODY_BYTES = 64 * 1024
INLINE_INFLATED_BYTES = 256 * 1024
INLINE_NEW_LINES = 256

# What a refused write's body says beside the problem members: nothing was written.
NOTHING_WRITTEN = {"accepted": 0, "rejected": 0, "rejections": [], "truncated": False}
PENDING_RETRY_S = 1  # Retry-After of EntitiesPending: each resend takes the next share


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


async def answer(st: Running, body: bytes, *, gz: bool, precision: str, strict: bool,
                 arrow: bool, path: str) -> Response:
    """The answer to one write whose body was read whole (within the body limit) and whose
    sender was authorized; `path` is the request's (the problem's `instance`)."""
    response = await _answer(st, body, gz, precision, strict, arrow, path)
    if arrow:  # this service read it as Arrow (a sender tells us from one that did not)
        response.headers[write_arrow.PAYLOAD_HEADER] = "arrow"
    return response


def refused(st: Running, exc: GpuhealthError, path: str) -> Response:
    """A write refused with nothing written (either door's: a bad token, a body over the
    limit, an unsupported encoding, a malformed body): counted, and answered InfluxDB's way."""
    st.metrics.write_requests.labels(str(exc.status)).inc()
    for name, value in NOTHING_WRITTEN.items():
        exc.extensions.setdefault(name, value)
    return problems.influx_response(exc, path)


async def _answer(st: Running, body: bytes, gz: bool, precision: str, strict: bool,
                  arrow: bool, path: str) -> Response:
    coalescer = coalescing(st)
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
                   await run_sync(ingest_alone, st, parsed))
            res, cut = finish(st, parsed, got, strict)
        elif coalescer is None:
            res, cut = await run_sync(write_body, st, body, gz, precision, strict)
        else:  # parsed alone, ingested with other senders' batches (service.api.coalesce)
            text = payload.data if isinstance(payload, Inflated) else payload
            mapper = st.mappers[strict]
            parsed, plan = await _off_loop(
                st, inline, lambda: not mapper.unfamiliar(text, INLINE_NEW_LINES),
                _parse, st, payload, gz, precision, strict, coalescer)
            res, cut = finish(st, parsed, await coalescer.ingest(parsed.batch, plan), strict)
    except GpuhealthError as exc:
        return refused(st, exc, path)
    except Exception:  # as FastAPI's last handler answers it (service.api.problems)
        log.exception("a write failed")
        return problems.influx_response(
            GpuhealthError("the service failed to answer this request"), path)
    if not res.rejected:
        st.metrics.write_requests.labels("204").inc()
        return Response(status_code=204)
    refusal_ = refusal(res, cut)
    st.metrics.write_requests.labels(str(refusal_.status)).inc()
    return problems.influx_response(refusal_, path)


def coalescing(st: Running) -> Coalescer | None:
    """The running service's coalescer; None when writes are ingested alone."""
    window = st.settings.ingest.coalesce_ms / 1e3
    if window <= 0:
        return None
    if st.coalescer is None:
        st.coalescer = Coalescer(st.pipeline, window, st.now,
                                 st.metrics.ingest_seconds.labels("write").observe)
    return st.coalescer


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


def _rejection(r: Rejection) -> RejectionOut:
    return RejectionOut(line=r.line, reason=r.reason, entity=r.entity, metric=r.metric)


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
                 max_new: int | None = None) -> tuple[Parsed, Plan | None]:
    parsed = write_arrow.parse_arrow(st, body, gz, max_new)
    return parsed, coalescer.plan(parsed.batch) if coalescer is not None else None


def _inline_arrow(st: Running, body: bytes | Inflated, gz: bool, coalescer: Coalescer | None
                  ) -> tuple[Parsed, Plan | None] | None:
    """Decoded here, on the event loop, unless it names more than INLINE_NEW_LINES entities
    not met before (None: decode it in a worker thread)."""
    try:
        from collectors.arrow_batch import OverBudget  # pyarrow: imported with the first body
    except ImportError:  # no pyarrow in this install: parse_arrow refuses it (415)
        return _parse_arrow(st, body, gz, coalescer, INLINE_NEW_LINES)
    try:
        return _parse_arrow(st, body, gz, coalescer, INLINE_NEW_LINES)
    except OverBudget:
        return None


def _parse(st: Running, body: bytes | Inflated, gz: bool, precision: str, strict: bool,
           coalescer: Coalescer) -> tuple[Parsed, Plan]:
    parsed = parse_body(st, body, gz, precision, strict)
    return parsed, coalescer.plan(parsed.batch)
