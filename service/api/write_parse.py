"""A line-protocol write body inflated (bounded) and parsed into a Batch, and what follows a
body's ingest (a cut gzip body's refusal, the mapper kept bounded): the steps of a write's
answer (service.api.write_answer) that read the body itself. Arrow bodies are decoded by
service.api.write_arrow into the same `Parsed`."""

from __future__ import annotations

import time
from dataclasses import dataclass

from collectors.frames import Batch
from service.api.inflate import Inflated, inflate
from service.api.state import Running
from service.stages.ingest import IngestResult

MAPPER_SLACK = 10_000  # entities a mapper may remember beyond twice what the store holds


@dataclass(slots=True)
class Parsed:
    """One body inflated and parsed: its Batch (with the parse rejections), the service time
    it was parsed at, and where a gzip body was cut short (its reason and line) if it was."""

    batch: Batch
    now: float
    cut: tuple[str, int] | None = None


def write_body(st: Running, body: bytes, gz: bool, precision: str, strict: bool
               ) -> tuple[IngestResult, bool]:
    """Inflate (bounded), parse and ingest one body alone; runs in a worker thread. The flag:
    the gzip body was cut short (a sender may resend it whole; points merge, last write
    wins)."""
    parsed = parse_body(st, body, gz, precision, strict)
    return finish(st, parsed, ingest_alone(st, parsed), strict)


def ingest_alone(st: Running, parsed: Parsed) -> IngestResult:
    """One parsed body through its own `Pipeline.ingest` (not coalesced); timed."""
    t0 = time.perf_counter()
    res = st.pipeline.ingest(parsed.batch, parsed.now, from_wire=True)
    st.metrics.ingest_seconds.labels("write").observe(time.perf_counter() - t0)
    return res


def parse_body(st: Running, body: bytes | Inflated, gz: bool, precision: str, strict: bool
               ) -> Parsed:
    """Inflate (bounded) and parse one body, noting node agents' collector reports. A gzip
    body may come inflated already (`Inflated`: a small one is inflated on the event loop,
    service.api.write_answer)."""
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
