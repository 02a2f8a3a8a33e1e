"""Pushing gzip line protocol to the service or to InfluxDB, and what to do with the answer.

With pyarrow installed (the `agent-arrow` extra) a segment goes to the service as Arrow IPC
(collectors.arrow_batch), which costs the service less CPU to read. The spool keeps line
protocol; each segment is converted when it is sent. A target that does not read Arrow (answers
415, or an older service or InfluxDB that read the body as line protocol and refused it: a 400
without `X-Gpuhealth-Payload: arrow`) is sent the segment again as line protocol at once, and
line protocol from then on (tried again after `arrow_retry_s`). An Arrow segment the service
refuses (`arrow-payload-refused`: nothing of it was written) is sent again at once as line
protocol, whose lines the service names one by one. A segment our own mapper cannot carry
whole in Arrow (a line it refuses or fields it ignores) goes as line protocol, so the target
names its lines.

A sharded service (docs/design.md, "Sharding") owns each node on one shard. The agent names
its node in `X-Gpuhealth-Node`; a shard that does not own it answers `307`/`308` with the
owner's URL, and the same body is posted there (at most `MAX_HOPS` moves, http(s) only; the
token goes along only when the new URL's scheme is the configured one's, so it never leaves
https for http). The owner is then the target until a push there fails, when the configured
URL is tried again (it redirects once more if ownership still holds). A `421` (a shard that
was forwarded a part it does not own) is a retry.

A retry waits as long as the target's `Retry-After` says (bounded), else backs off. A service
that takes a write's new entities a share at a time (no token: `ingest.max_new_gpus_per_batch`)
answers the rest 503 `entities-pending` naming the nodes still to come: the whole segment goes
again (what was kept merges), or, from the relay, only those nodes' samples (target.Target).
"""

from __future__ import annotations

import gzip
import logging
import time
import zlib
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from enum import Enum

import httpx

from collectors.compat import dataclass

log = logging.getLogger(__name__)
NODE_HEADER = "X-Gpuhealth-Node"  # service.api.shard_route.NODE_HEADER
MAX_HOPS = 3
ARROW_TYPE = "application/vnd.apache.arrow.stream"  # collectors.arrow_batch.MEDIA_TYPE


class Outcome(Enum):
    SENT = "sent"  # stored (204), or stored in part with bad lines named (400): do not resend
    RETRY = "retry"  # target down, overloaded or refusing us for now: keep and back off
    DROP = "drop"  # the segment itself can never be stored (413): resending cannot help


MAX_RETRY_AFTER_S = 300.0  # a Retry-After past this is taken as this


@dataclass(frozen=True, slots=True)
class PushResult:
    outcome: Outcome
    status: int | None
    detail: str
    # RETRY only: the wait the target asked for (Retry-After), and the nodes whose samples it
    # has not taken yet (a 503 `entities-pending`: the rest was kept); None: resend it all.
    retry_after: float | None = None
    pending_nodes: tuple[str, ...] | None = None


def outcome_of(r: httpx.Response, body: bytes | None = None) -> PushResult:
    """What an InfluxDB-style write answer means for the segment sent. A 400 saying the body
    arrived cut short is a transport fault when the segment itself is whole gzip: send it again
    (what was kept merges, last write wins). A segment cut on our own disk stays sent."""
    if r.status_code in (200, 204):
        return PushResult(Outcome.SENT, r.status_code, "")
    if r.status_code == 400:
        if body is not None and _said_truncated(r) and _whole_gzip(body):
            return PushResult(Outcome.RETRY, 400, "body arrived cut short: " + r.text[:400])
        return PushResult(Outcome.SENT, 400, r.text[:500])
    if r.status_code == 413:
        return PushResult(Outcome.DROP, 413, r.text[:500])
    # 401/403 (a token being rotated), 404 (a proxy or database mid-deploy), 429 and 5xx: wait,
    # as long as the target says (a service taking new entities a share at a time says 1 s).
    pending = _pending_nodes(r) if r.status_code == 503 else None
    return PushResult(Outcome.RETRY, r.status_code, r.text[:500], retry_after(r), pending)


def retry_after(r: httpx.Response) -> float | None:
    """Retry-After in seconds (RFC 9110: a number of seconds or an HTTP date), bounded."""
    raw = r.headers.get("retry-after", "").strip()
    if not raw:
        return None
    try:
        wait = float(raw) if (raw.isascii() and raw.isdigit()) else (
            parsedate_to_datetime(raw).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None
    return min(max(wait, 0.0), MAX_RETRY_AFTER_S)


def _pending_nodes(r: httpx.Response) -> tuple[str, ...] | None:
    """The nodes a 503 `entities-pending` says are still to come (service.api.write)."""
    try:
        said = r.json()
    except ValueError:
        return None
    if not isinstance(said, dict) or not str(said.get("type", "")).endswith(
            "/entities-pending"):
        return None
    nodes = said.get("pending_nodes")
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        return None
    return tuple(nodes)


def _said_truncated(r: httpx.Response) -> bool:
    try:
        said = r.json()
    except ValueError:
        return False
    return isinstance(said, dict) and said.get("truncated") is True


def _whole_gzip(body: bytes) -> bool:
    try:
        gzip.decompress(body)
    except (OSError, EOFError, zlib.error):
        return False
    return True


class Pusher:
    """POSTs one gzip segment. A 400 is a partial write, as InfluxDB answers it: the good lines
    were kept, so the segment is done (a segment resent after a lost reply merges there, last
    write wins, so nothing is doubled)."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 10.0,
                 client: httpx.Client | None = None, arrow: bool = True,
                 arrow_retry_s: float = 3600.0, host: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`arrow`: post Arrow where pyarrow is importable and the target reads it. `host`:
        this node's name, sent as `X-Gpuhealth-Node` so a sharded service redirects the
        push to its owner before reading the body (the body must hold this node only)."""
        self.url = self.configured = url
        self.headers = {"Content-Encoding": "gzip", "Content-Type": "text/plain; charset=utf-8"}
        self.host: str | None = None
        if host:
            self.set_host(host)
        if token:
            self.headers["Authorization"] = f"Token {token}"
        self.client = client or httpx.Client(timeout=timeout_s)
        self.arrow = arrow and _arrow_available()
        self.arrow_retry_s, self.clock = arrow_retry_s, clock
        self._no_arrow_until = float("-inf")
        self.sent_arrow = self.sent_lines = 0  # segments, by the format that was answered

    def set_host(self, host: str) -> None:
        """Name this node in every push (`X-Gpuhealth-Node`)."""
        self.host = host
        self.headers[NODE_HEADER] = host

    def push(self, body: bytes) -> PushResult:
        """Send one spooled gzip line-protocol segment (as Arrow where it can)."""
        return self.push_as(lambda: _as_arrow(body), lambda: body)

    def push_as(self, arrow: Callable[[], bytes | None], lines: Callable[[], bytes]
                ) -> PushResult:
        """Send one segment given its two spellings: `arrow()`, gzip Arrow (None when it has
        none), and `lines()`, gzip line protocol, made only when the target is to be sent
        lines (the relay, collectors.agent.relay, spools Arrow and writes lines only for a
        target that does not read it or a segment it refused)."""
        if self.arrow and self.clock() >= self._no_arrow_until:
            payload = arrow()
            if payload is not None:
                arrow_headers = {**self.headers, "Content-Type": ARROW_TYPE}
                res = self._post(payload, arrow_headers, True)
                if res is not None:
                    self.sent_arrow += res.outcome is not Outcome.RETRY
                    return res
        body = lines()
        res = self._post(body, self.headers, False)
        assert res is not None
        self.sent_lines += res.outcome is not Outcome.RETRY
        return res

    def _post(self, body: bytes, headers: dict[str, str], arrow: bool) -> PushResult | None:
        """The answer's outcome; None when an Arrow body must go again as line protocol."""
        try:
            r = self._send(body, headers)
        except httpx.HTTPError as exc:
            self._forget_owner()
            return PushResult(Outcome.RETRY, None, f"{type(exc).__name__}: {exc}")
        except _BadRedirect as exc:
            self._forget_owner()
            return PushResult(Outcome.RETRY, exc.status, str(exc))
        if r.status_code >= 500 or r.status_code in (401, 403, 404, 421, 429):
            self._forget_owner()
        if arrow and r.status_code in (400, 415):
            if r.headers.get("x-gpuhealth-payload") != "arrow" or r.status_code == 415:
                log.warning("%s does not read Arrow (%s); sending line protocol", self.url,
                            r.status_code)
                self._no_arrow_until = self.clock() + self.arrow_retry_s
                return None
            if _slug(r) == "arrow-payload-refused":  # nothing of it was written
                log.error("the target refused an Arrow segment: %s; sending it as line "
                          "protocol", r.text[:300])
                return None
        return outcome_of(r, body)

    def _send(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        """POST to the current target, following 307/308 to a shard that owns this node."""
        url, sent = self.url, headers
        for _ in range(MAX_HOPS + 1):
            r = self.client.post(url, content=body, headers=sent)
            if r.status_code not in (307, 308):
                if url != self.url:
                    log.info("this node's samples now go to %s (the shard that owns it)", url)
                    self.url = url
                return r
            url, sent = _moved(url, r, headers, self.configured)
        raise _BadRedirect(r.status_code, f"more than {MAX_HOPS} redirects; last to {url}")

    def _forget_owner(self) -> None:
        if self.url != self.configured:
            log.info("a push to %s failed; going back to %s", self.url, self.configured)
            self.url = self.configured

    def close(self) -> None:
        self.client.close()


class _BadRedirect(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


def _moved(url: str, r: httpx.Response, headers: dict[str, str], configured: str
           ) -> tuple[str, dict[str, str]]:
    """Where a 307/308 sends the body, and the headers it goes with: the token only when the
    new URL's scheme is the configured one's (never from https to http)."""
    location = r.headers.get("location", "")
    if not location:
        raise _BadRedirect(r.status_code, "a redirect without a Location")
    target = httpx.URL(url).join(location)
    if target.scheme not in ("http", "https") or not target.host:
        raise _BadRedirect(r.status_code, f"a redirect to {location[:200]!r}, not http(s)")
    sent = dict(headers)
    if target.scheme != httpx.URL(configured).scheme:
        sent.pop("Authorization", None)
    log.info("redirected (%s) from %s to %s", r.status_code, url, target)
    return str(target), sent


def _arrow_available() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def _as_arrow(body: bytes) -> bytes | None:
    """A spooled gzip segment as gzip Arrow, or None when it does not convert whole."""
    from collectors.arrow_batch import encode
    from collectors.schema import SchemaMapper

    try:
        text = gzip.decompress(body)
    except (OSError, EOFError, zlib.error):
        return None  # a damaged segment: the target says which lines it could read
    mapper = SchemaMapper()
    batch = mapper.parse(text, max_bytes=None)
    if batch.rejected or mapper.take_ignored():
        return None
    return gzip.compress(encode(batch, mapper.take_reports()), compresslevel=6, mtime=0)


def _slug(r: httpx.Response) -> str:
    try:
        said = r.json()
    except ValueError:
        return ""
    return str(said.get("type", "")).rsplit("/", 1)[-1] if isinstance(said, dict) else ""
