"""Arrow IPC writes from our own node agent (collectors.arrow_batch), on the lean route.

A body of `Content-Type: application/vnd.apache.arrow.stream` (gzip or not) is inflated within
the body limit, decoded and validated whole before anything is ingested: a malformed payload is
refused with a 400 naming the problem and nothing of it is written (the agent resends the
segment as line protocol, whose lines the service can name one by one). A valid one goes
through the same (coalesced) ingest as line protocol and gets the same answers: 204, or the
partial write's 400 listing the samples the ingest stage refused by entity.

Every answer to an Arrow body carries `X-Gpuhealth-Payload: arrow`, so a sender tells a refusal
of its payload by a service that reads Arrow from an older service (or InfluxDB) that read the
body as line protocol and refused every line: that one is a reason to send line protocol.
"""

from __future__ import annotations

from service.api.inflate import Inflated, inflate
from service.api.state import Running
from service.api.write import Parsed
from service.errors import BadRequest, UnsupportedMediaType

MEDIA_TYPE = "application/vnd.apache.arrow.stream"  # collectors.arrow_batch.MEDIA_TYPE
PAYLOAD_HEADER = "x-gpuhealth-payload"


class ArrowRefused(BadRequest):
    """The Arrow payload is malformed: refused whole, nothing written."""

    slug = "arrow-payload-refused"
    title = "Arrow payload refused"


def is_arrow(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == MEDIA_TYPE


def parse_arrow(st: Running, body: bytes | Inflated, gz: bool) -> Parsed:
    """Inflate (bounded) and decode one body (a gzip one may come inflated already)."""
    try:
        from collectors.arrow_batch import ArrowPayloadError, Decoder, Limits
    except ImportError:  # pyarrow missing from this install: the agent falls back
        raise UnsupportedMediaType("this service cannot read Arrow payloads (pyarrow is not "
                                   "installed); send line protocol") from None
    if isinstance(body, Inflated) or gz:
        got = body if isinstance(body, Inflated) else inflate(
            body, limit=st.settings.ingest.max_body_bytes)
        if got.cut is not None:  # an Arrow body cut short has nothing worth keeping
            raise ArrowRefused(f"Arrow payload refused, nothing written: {got.cut}")
        body = got.data
    now = st.now()
    with st.mapper_lock:
        if st.arrow is None:  # tables kept: about three per node agent (one per scope)
            st.arrow = Decoder(Limits(max_rows=st.settings.ingest.max_lines_per_request),
                               max_tables=max(1024, st.settings.ingest.max_gpus))
        try:
            decoded = st.arrow.decode(body)
        except ArrowPayloadError as exc:
            raise ArrowRefused(f"Arrow payload refused, nothing written: {exc}") from None
    if decoded.reports:  # another shard's node's collectors are its owner's to report
        st.remote.record(r for r in decoded.reports if st.pipeline.ownership.owns(r.host))
    return Parsed(decoded.batch, now)
