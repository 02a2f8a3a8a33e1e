"""The relay: one per rack (or pod), taking its node agents' pushes and sending the service one
body per interval (`gpuhealth agent relay`).

Every node agent posting every round costs the service a request each (an HTTP exchange, a
decode, a plan and a merge in the coalescer: `python -m bench.collectors`, section 3); the
field's answer for many small senders is a relay tier (Telegraf, the OpenTelemetry collector,
Prometheus in agent mode). This relay reads exactly what the service reads from agents on
/write, /v1/write and /api/v2/write (gzip or plain line protocol, Arrow IPC with its content
type: collectors.arrow_batch), with the same tokens' rules, body limit and line limit
(collectors.agent.relay_wire), and PARSES each push with the agent's own mapper
(collectors.schema.SchemaMapper) or decoder, so it answers each agent as the service would:
204; a 400 naming each refused line while the good ones are kept; 413; 401. What the ingest
stage refuses (a value out of range, a timestamp too old) only the service can say: those
refusals come back in the relay's forward and are logged and counted here.

Accepted pushes are held in memory and, every flush interval, joined into one body per batch
of distinct nodes (collectors.agent.relay_batch), spooled on disk as gzip Arrow
(collectors.agent.spool: bounded, oldest dropped and counted) and sent oldest first with the
agent's Pusher (collectors.agent.push): Arrow, line protocol for a target that reads no Arrow
or refuses a body; retried with backoff while the service is away, so an outage loses
nothing until the spool bound. A push is answered once it is parsed and held;
it is on disk within one flush interval (a relay killed in that interval loses it; SIGTERM
flushes first). Each sample keeps its node's tags and timestamp: the service sees exactly the
samples the agents sent. A body holds many nodes, so the relay names none (`X-Gpuhealth-Node`):
a sharded service splits it by owner (service.api.shard_split).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from collectors.agent.push import Pusher
from collectors.agent.relay_batch import (
    Push,
    arrow_body,
    bodies,
    lines_body,
    only_nodes,
    read_arrow,
)
from collectors.agent.relay_roster import Roster, RosterLimits, bound_push
from collectors.agent.relay_wire import (
    PATHS,
    Query,
    Refusal,
    authorize,
    bad_request,
    inflate,
    partial_write,
    read_query,
    unsupported,
)
from collectors.agent.spool import Spool
from collectors.agent.target import Target
from collectors.compat import dataclass
from collectors.frames import Rejection
from collectors.node_names import DEFAULT_ORDER
from collectors.schema import SchemaMapper

log = logging.getLogger(__name__)
ARROW_TYPE = "application/vnd.apache.arrow.stream"  # collectors.arrow_batch.MEDIA_TYPE
PAYLOAD_HEADER = "X-Gpuhealth-Payload"  # service.api.write_arrow: "this was read as Arrow"
SPOOL_SUFFIX = ".arrow.gz"
BODY_ROWS = 500_000  # rows per forwarded body at most (a relay of 10,000 GPUs: ~200,000)


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: dict[str, object] | None = None
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class RelayStats:
    pushes: int = 0  # answered 204 or 400 (something kept)
    refused: int = 0  # answered with an error, nothing kept
    lines_refused: int = 0  # named to agents in 400s
    bodies_spooled: int = 0
    bodies_sent: int = 0
    bodies_refused_in_part: int = 0  # the service's 400: its ingest refused some samples
    bodies_dropped: int = 0  # the service's 413, or lost to the spool bound
    forward_failures: int = 0
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class Limits:
    max_body_bytes: int = 25_000_000  # the service's ingest.max_body_bytes
    max_lines: int = 1_000_000  # ingest.max_lines_per_request


class Relay:
    """Answers pushes (`answer`), joins and spools them (`flush`), sends the spool on
    (`forward`); `run` does the last two every interval. `answer` is safe from many threads."""

    def __init__(self, spool: Spool, pusher: Pusher, *, tokens: Sequence[str] = (),
                 limits: Limits = Limits(), flush_s: float = 1.0,
                 backoff_s: tuple[float, float] = (1.0, 60.0),
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 roster: RosterLimits | None = None,
                 node_name_from: Sequence[str] = DEFAULT_ORDER) -> None:
        self.spool, self.pusher = spool, pusher
        self.tokens = [t.encode() for t in tokens if t]
        self.limits, self.flush_s = limits, flush_s
        self.clock, self.wall = clock, wall
        self.target = Target(spool, pusher, backoff_s=backoff_s, clock=clock,
                             send=lambda body: pusher.push_as(lambda: body, _as_lines(body)),
                             narrow=_narrowed)
        self.stats = RelayStats()
        # Parsed as the service would, with the site's node-name order (ingest.node_name_from).
        self._mappers = {strict: SchemaMapper(strict=strict, node_name_from=node_name_from)
                         for strict in (False, True)}
        self._decoder: Any = None  # collectors.arrow_batch.Decoder, made when needed
        self._parse_lock = threading.Lock()
        self._pending: list[Push] = []
        self._pending_lock = threading.Lock()
        self._forward_lock = threading.Lock()
        self._refused_whole = 0  # bodies the service answered 413
        # the one table per scope every body shares
        self.roster = Roster(limits=roster or RosterLimits(), clock=clock)

    # ---- answering agents ---------------------------------------------------------------

    def check(self, path: str, query: str, headers: Mapping[str, str],
              length: int | None = None) -> Query:
        """What can be answered from the request head alone, before a byte of the body is
        read (collectors.agent.relay_http): the path, the query, the token, the encoding and
        a declared length over the limit. Raises the Refusal."""
        params = PATHS.get(path)
        if params is None:
            raise Refusal(404, "not-found", "Not found", f"no write endpoint at {path[:200]}")
        q = read_query(query, params)
        authorize(headers, self.tokens, q.p)
        encoding = headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity", "gzip"):
            raise unsupported(f"unsupported Content-Encoding {encoding[:40]!r}; send gzip "
                              f"or none")
        if length is not None and length > self.limits.max_body_bytes:
            raise too_big(self.limits.max_body_bytes)
        return q

    def refused(self, refusal: Refusal, path: str, headers: Mapping[str, str]) -> Answer:
        """A request refused before its body was read (or with it), counted."""
        self.stats.refused += 1
        return Answer(refusal.status, refusal.body(path),
                      (*refusal.headers.items(), *_payload(headers)))

    def answer(self, path: str, query: str, headers: Mapping[str, str], body: bytes) -> Answer:
        """One POST, its headers' names in lower case, its body read whole within the limit
        (the HTTP side refuses a larger one, 413, before reading it)."""
        arrow = headers.get("content-type", "").split(";", 1)[0].strip().lower() == ARROW_TYPE
        extra = _payload(headers)
        try:
            q = self.check(path, query, headers, len(body))
            encoding = headers.get("content-encoding", "").strip().lower()
            got = (inflate(body, limit=self.limits.max_body_bytes) if encoding == "gzip"
                   else None)
            if arrow:
                push = self._arrow(got.data if got else body, got.cut if got else None)
                # identity values the decoder refused, the body's other rows kept
                rejections: list[Rejection] = push.batch.rejected
                push.batch.rejected = []
                cut = False
            else:
                push, rejections, cut = self._lines(got.data if got else body,
                                                    got.cut if got else None, q.precision,
                                                    q.strict)
        except Refusal as refusal:
            return self.refused(refusal, path, headers)
        # One agent names its own node: names past the roster's bounds per push are refused
        # here, so no sender can swell the table every body carries (relay_roster).
        rejections += bound_push(push.batch, self.roster.limits)
        if push.rows or push.reports:
            with self._pending_lock:
                self._pending.append(push)
        self.stats.pushes += 1
        if not rejections:
            return Answer(204, None, extra)
        self.stats.lines_refused += len(rejections)
        partial = partial_write(push.batch.samples, rejections, cut)
        return Answer(400, partial.body(path), extra)

    def _lines(self, data: bytes, cut: str | None, precision: str, strict: bool
               ) -> tuple[Push, list[Rejection], bool]:
        mapper = self._mappers[strict]
        with self._parse_lock:
            batch = mapper.parse(data, default_ts_ns=int(self.wall() * 1e9), precision=precision,
                                 max_lines=self.limits.max_lines, max_bytes=None)
            reports = mapper.take_reports()
            mapper.take_ignored()  # unknown names, as the service ignores them
        rejections = list(batch.rejected)
        batch.rejected = []
        if cut is not None:  # the whole lines before the cut were kept; say where it ended
            rejections.append(Rejection(cut, line=data.count(b"\n") + 1))
        return Push(batch, reports), rejections, cut is not None

    def _arrow(self, data: bytes, cut: str | None) -> Push:
        try:
            from collectors.arrow_batch import ArrowPayloadError, Decoder, Limits
        except ImportError:
            raise unsupported("this relay cannot read Arrow payloads (pyarrow is not "
                              "installed); send line protocol") from None
        if cut is not None:  # an Arrow body cut short has nothing worth keeping
            raise arrow_refused(cut)
        with self._parse_lock:
            if self._decoder is None:
                self._decoder = Decoder(Limits(max_rows=self.limits.max_lines))
            try:
                got = self._decoder.decode(data)
            except ArrowPayloadError as exc:
                raise arrow_refused(str(exc)) from None
        return Push(got.batch, got.reports)

    # ---- to the service -------------------------------------------------------------------

    def flush(self) -> int:
        """Join what agents pushed since the last flush into bodies and spool them; returns
        how many bodies were spooled."""
        with self._pending_lock:
            pending, self._pending = self._pending, []
        n = 0
        self.roster.prune()
        for body in bodies(pending, BODY_ROWS, self.roster):
            self.spool.append_bytes(arrow_body(body))
            n += 1
        self.stats.bodies_spooled += n
        self.stats.bodies_dropped = self.spool.stats.dropped_segments + self._refused_whole
        return n

    def forward(self) -> int:
        """Send spooled bodies oldest first until one fails (then back off); returns how many
        went."""
        with self._forward_lock:
            got = self.target.flush()
        self.stats.bodies_sent += got.sent
        self.stats.bodies_refused_in_part += got.rejected_lines
        self._refused_whole += got.dropped
        self.stats.bodies_dropped += got.dropped
        if got.failed:
            self.stats.forward_failures += 1
            self.stats.last_error = got.error
        return got.sent

    def run(self, stop: Callable[[], bool], sleep: Callable[[float], None] = time.sleep) -> None:
        """Every flush interval: spool what came, send the spool; once more when stopped."""
        next_at = self.clock()
        while not stop():
            next_at += self.flush_s
            delay = next_at - self.clock()
            if delay > 0:
                sleep(delay)
            else:
                next_at = self.clock()
            self.flush()
            self.forward()
        self.flush()
        self.target.retry_now()
        self.forward()


def _payload(headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """`X-Gpuhealth-Payload: arrow` on every answer to an Arrow body, as the service says it."""
    arrow = headers.get("content-type", "").split(";", 1)[0].strip().lower() == ARROW_TYPE
    return ((PAYLOAD_HEADER, "arrow"),) if arrow else ()


def _narrowed(body: bytes, nodes: tuple[str, ...]) -> bytes:
    """A spooled body cut to the nodes the service has not taken yet (a 503 naming them)."""
    return arrow_body(only_nodes(read_arrow(body), nodes))


def _as_lines(body: bytes) -> Callable[[], bytes]:
    return lambda: lines_body(read_arrow(body))


def too_big(limit: int) -> Refusal:
    from collectors.agent.relay_wire import too_large

    return too_large(f"request body exceeds the limit of {limit} bytes")


def arrow_refused(why: str) -> Refusal:
    return bad_request(f"Arrow payload refused, nothing written: {why}",
                       "arrow-payload-refused", "Arrow payload refused")
