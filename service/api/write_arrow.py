"""Arrow IPC writes from our own node agent (collectors.arrow_batch), read by either write door
(the answer is service.api.write_answer's).

A body of `Content-Type: application/vnd.apache.arrow.stream` (gzip or not) is inflated within
the body limit, decoded and validated whole before anything is ingested: a malformed payload is
refused with a 400 naming the problem and nothing of it is written (the agent resends the
segment as line protocol, whose lines the service can name one by one). A valid one goes
through the same (coalesced) ingest as line protocol and gets the same answers: 204, or the
partial write's 400 listing the samples the ingest stage refused by entity.

A body is decoded without the parsers' lock (line-protocol writes go on meanwhile), within
limits set by what the window store can hold (`make_decoder`): dictionaries listing more keys
than it could ever hold are refused whole (400, saying so), and keys no row names are not
decoded (issue 29: 500,000 keys behind one row cost 380 MB and 10 s under that lock).

Every answer to an Arrow body read whole (on either door) carries `X-Gpuhealth-Payload: arrow`,
so a sender tells a refusal of its payload by a service that reads Arrow from an older service
(or InfluxDB) that read the body as line protocol and refused every line: that one is a reason
to send line protocol.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, cast

from collectors.catalog import Scope
from service.api.inflate import Inflated, inflate
from service.api.state import Running
from service.api.write_parse import Parsed
from service.errors import BadRequest, UnsupportedMediaType
from service.settings import IngestSettings

if TYPE_CHECKING:
    from collectors.arrow_batch import Decoder

MEDIA_TYPE = "application/vnd.apache.arrow.stream"  # collectors.arrow_batch.MEDIA_TYPE
PAYLOAD_HEADER = "x-gpuhealth-payload"


class ArrowRefused(BadRequest):
    """The Arrow payload is malformed: refused whole, nothing written."""

    slug = "arrow-payload-refused"
    title = "Arrow payload refused"


def is_arrow(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == MEDIA_TYPE


def parse_arrow(st: Running, body: bytes | Inflated, gz: bool, max_new: int | None = None
                ) -> Parsed:
    """Inflate (bounded) and decode one body (a gzip one may come inflated already). Decoded
    without the parsers' lock (`mapper_lock`, which line-protocol writes take): the decoder is
    safe from many threads, so no other write waits on an Arrow body."""
    try:
        from collectors.arrow_batch import ArrowPayloadError
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
    try:
        decoded = decoder(st).decode(body, max_new)  # OverBudget passes up to the caller
    except ArrowPayloadError as exc:
        raise ArrowRefused(f"Arrow payload refused, nothing written: {exc}") from None
    if decoded.reports:  # another shard's node's collectors are its owner's to report
        st.remote.record(r for r in decoded.reports if st.pipeline.ownership.owns(r.host))
    return Parsed(decoded.batch, now)


_MADE = threading.Lock()


def decoder(st: Running) -> Decoder:
    """The service's decoder, made on the first Arrow body (pyarrow is imported only then)."""
    if st.arrow is None:
        with _MADE:
            if st.arrow is None:
                st.arrow = make_decoder(st.settings.ingest)
    return cast("Decoder", st.arrow)


def make_decoder(ingest: IngestSettings) -> Decoder:
    """A decoder bounded by what the window store can hold: a body's dictionaries may list
    at most every entity it could hold (KEY_BYTES a key on average), and the entity tables
    kept cost at most twice those entities (a relay's roster table beside its nodes' own)."""
    from collectors.arrow_batch import ENTRY_BYTES, Decoder, Limits

    limits = ingest.limits()
    keys = sum(limits.total(s) for s in Scope)
    return Decoder(Limits(max_rows=ingest.max_lines_per_request, max_keys=keys,
                          max_key_bytes=keys * KEY_BYTES),
                   max_tables=max(1024, ingest.max_gpus),  # about three per node agent
                   max_table_bytes=2 * keys * ENTRY_BYTES)


KEY_BYTES = 128  # a key's bytes as sent, on average at most: its offset and its text
