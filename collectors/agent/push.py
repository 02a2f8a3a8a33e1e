"""Pushing gzip line protocol to the service or to InfluxDB, and what to do with the answer.

With pyarrow installed (the `agent-arrow` extra) a segment goes to the service as Arrow IPC
(collectors.arrow_batch), which costs the service less CPU to read. The spool keeps line
protocol; each segment is converted when it is sent. A target that does not read Arrow (answers
415, or an older service or InfluxDB that read the body as line protocol and refused it: a 400
without `X-Gpuhealth-Payload: arrow`) is sent the segment again as line protocol at once, and
line protocol from then on (tried again after `arrow_retry_s`). A segment our own mapper cannot
carry whole in Arrow (a line it refuses or fields it ignores) goes as line protocol, so the
target names its lines.
"""

from __future__ import annotations

import gzip
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import httpx

log = logging.getLogger(__name__)
ARROW_TYPE = "application/vnd.apache.arrow.stream"  # collectors.arrow_batch.MEDIA_TYPE


class Outcome(Enum):
    SENT = "sent"  # stored (204), or stored in part with bad lines named (400): do not resend
    RETRY = "retry"  # target down, overloaded or refusing us for now: keep and back off
    DROP = "drop"  # the segment itself can never be stored (413): resending cannot help


@dataclass(frozen=True, slots=True)
class PushResult:
    outcome: Outcome
    status: int | None
    detail: str


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
    # 401/403 (a token being rotated), 404 (a proxy or database mid-deploy), 429 and 5xx: wait.
    return PushResult(Outcome.RETRY, r.status_code, r.text[:500])


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
                 arrow_retry_s: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`arrow`: post Arrow where pyarrow is importable and the target reads it."""
        self.url = url
        self.headers = {"Content-Encoding": "gzip", "Content-Type": "text/plain; charset=utf-8"}
        if token:
            self.headers["Authorization"] = f"Token {token}"
        self.client = client or httpx.Client(timeout=timeout_s)
        self.arrow = arrow and _arrow_available()
        self.arrow_retry_s, self.clock = arrow_retry_s, clock
        self._no_arrow_until = float("-inf")
        self.sent_arrow = self.sent_lines = 0  # segments, by the format that was answered

    def push(self, body: bytes) -> PushResult:
        if self.arrow and self.clock() >= self._no_arrow_until:
            payload = _as_arrow(body)
            if payload is not None:
                res = self._post(payload, {**self.headers, "Content-Type": ARROW_TYPE}, True)
                if res is not None:
                    self.sent_arrow += res.outcome is not Outcome.RETRY
                    return res
        res = self._post(body, self.headers, False)
        assert res is not None
        self.sent_lines += res.outcome is not Outcome.RETRY
        return res

    def _post(self, body: bytes, headers: dict[str, str], arrow: bool) -> PushResult | None:
        """The answer's outcome; None when an Arrow body must go again as line protocol."""
        try:
            r = self.client.post(self.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return PushResult(Outcome.RETRY, None, f"{type(exc).__name__}: {exc}")
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

    def close(self) -> None:
        self.client.close()


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
