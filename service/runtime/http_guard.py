"""Slow and idle HTTP clients cannot hold the server: deadlines for a request's headers and
body, and a connection cap that makes room by closing the stalest idle connection first.

uvicorn's httptools protocol has a keep-alive timeout and nothing else: a connection that never
finishes its headers (one header line every 20 s) is kept for ever, and 1,100 of them used up
a 1,024 open-file limit, so `/healthz` and writes could not even connect. Its
`limit_concurrency` does not help: it counts every open connection, idle ones included, and
then answers 503 to all requests, `/healthz` too.

`guarded_protocol(limits)` is uvicorn's httptools protocol (the C parser the service runs on)
with, per connection:

- headers: a request's headers must be complete within `header_timeout_s` of its first byte
  (of the connection's start, for its first request), however they trickle;
- body: `body_timeout_s`, plus one second per `body_min_bytes_per_s` bytes received (Apache's
  mod_reqtimeout rule); time our own flow control holds reading back is not counted;
- header size: at most MAX_HEADER_BYTES of request line and headers (400 past it), as the
  parser itself keeps no bound;
- the cap: past `max_connections` open connections a new one closes the oldest connection that
  is waiting for a request's headers or idle between requests, so a fresh probe or agent push
  always gets in; only when every connection is inside a request is the newcomer refused.
"""

from __future__ import annotations

import asyncio
import logging
import math
import resource
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.settings import ServiceSettings

log = logging.getLogger(__name__)

# Descriptors kept for everything but client connections: the SQLite files, logs, outgoing
# notification and InfluxDB connections, threads' pipes.
FD_RESERVE = 128
_NOFILE_CEILING = 1 << 20  # an unlimited hard limit is taken as this
_WARN_EVERY_S = 60.0
MAX_HEADER_BYTES = 64 * 1024  # nginx takes 4 x 8 KiB by default; our clients send under 1 KiB

# Connections closed by the guard, by why (exported as gpuhealth_http_connections_closed): an
# operator sees a slow-client flood, or a cap set too low, without reading debug logs.
CLOSED: Counter[str] = Counter()
CLOSE_REASONS = ("header_timeout", "body_timeout", "headers_too_large", "evicted", "refused")


class HeadersTooLarge(Exception):
    """Raised from a parser callback: httptools turns it into the parser error uvicorn answers
    400 to."""


@dataclass(frozen=True, slots=True)
class Limits:
    header_timeout_s: float
    body_timeout_s: float
    body_min_bytes_per_s: float  # 0: the body has body_timeout_s, however large
    max_connections: int


def raise_nofile() -> int:
    """Raise this process's soft open-file limit to its hard limit (systemd starts services at
    a soft 1,024 whatever the hard one); the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = _NOFILE_CEILING if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= want:
        return _NOFILE_CEILING if soft == resource.RLIM_INFINITY else soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ValueError, OSError) as exc:  # e.g. a hard limit above the kernel's nr_open
        log.warning("could not raise the open-file limit from %d to %d: %s", soft, want, exc)
        return soft
    return want


def connection_cap(max_connections: int, nofile: int) -> int:
    """The connections that fit in `nofile` descriptors beside the service's own, at most
    `max_connections` (and at least a few, so a tiny limit still serves probes)."""
    return max(8, min(max_connections, nofile - FD_RESERVE))


def server_options(svc: ServiceSettings) -> dict[str, Any]:
    """uvicorn.run's keyword arguments for the settings' slow-client limits and proxies, after
    raising the open-file limit. Forwarded headers are honoured only from trusted_proxies:
    uvicorn's own default believes them from loopback, so anything local could pick the
    address that failed authentications are charged to."""
    cap = connection_cap(svc.max_connections, raise_nofile())
    limits = Limits(svc.header_timeout_s, svc.body_timeout_s, svc.body_min_bytes_per_s, cap)
    # Not uvicorn's limit_concurrency: it counts idle connections too, then refuses /healthz.
    return {"http": guarded_protocol(limits), "timeout_keep_alive": svc.keep_alive_s,
            "proxy_headers": bool(svc.trusted_proxies),
            "forwarded_allow_ips": list(svc.trusted_proxies)}


def guarded_protocol(limits: Limits) -> type[HttpToolsProtocol]:
    """A protocol class for `uvicorn.Config(http=...)`; one per server, as the class holds the
    server's table of idle connections."""
    return type("GuardedHttpToolsProtocol", (_Guarded,), {"limits": limits, "idle": {}})


class _Guarded(HttpToolsProtocol):
    """Written against uvicorn 0.54's HttpToolsProtocol (requirements.txt pins it); the tests
    run it in the real server."""

    limits: ClassVar[Limits]
    # Connections that may be closed to make room, oldest first (a dict keeps insertion order):
    # those waiting for a request's headers and those idle between requests.
    idle: ClassVar[dict[_Guarded, None]]
    _warned_at: ClassVar[float] = -math.inf

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._body_since = 0.0  # when the body began, moved on by time reading was paused
        self._body_bytes = 0
        self._body_checked = 0.0

    # ---- the connection ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        if len(self.connections) > self.limits.max_connections and not self._make_room():
            self._warn("%d connections, all inside a request: refusing new ones",
                       len(self.connections))
            self._drop("refused")
            return
        self._set_idle()
        self._header_timer = self.loop.call_later(self.limits.header_timeout_s,
                                                  self._headers_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        self.idle.pop(self, None)
        super().connection_lost(exc)

    def _make_room(self) -> bool:
        """Close the oldest idle or unfinished connection; False when there is none."""
        if not self.idle:
            return False
        self._warn("%d connections, the cap (service.max_connections, or the open-file limit): "
                   "closing the oldest idle ones to admit new ones", self.limits.max_connections)
        oldest = next(iter(self.idle))
        oldest._drop("evicted")
        return True

    def _drop(self, reason: str) -> None:
        CLOSED[reason] += 1
        self._cancel_timers()
        self.idle.pop(self, None)
        # Counted out now: its connection_lost comes on a later turn of the loop.
        self.connections.discard(self)
        self.transport.close()

    def _warn(self, msg: str, *args: object) -> None:
        """Once a minute at most: under a flood of connections, every one would be logged."""
        now = self.loop.time()
        if now - _Guarded._warned_at >= _WARN_EVERY_S:
            _Guarded._warned_at = now
            log.warning(msg, *args)

    def _set_idle(self) -> None:
        self.idle.pop(self, None)
        self.idle[self] = None  # to the end: the newest

    def _cancel_timers(self) -> None:
        for timer in (self._header_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._header_timer = self._body_timer = None

    # ---- a request's headers ----------------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0
        if self._header_timer is None:  # a later request on a kept-alive connection
            self._header_timer = self.loop.call_later(self.limits.header_timeout_s,
                                                      self._headers_late)

    def on_url(self, url: bytes) -> None:
        self._count_header(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_header(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count_header(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > MAX_HEADER_BYTES:
            CLOSED["headers_too_large"] += 1
            raise HeadersTooLarge(f"request headers over {MAX_HEADER_BYTES} bytes")

    def on_headers_complete(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        self.idle.pop(self, None)
        self._body_since = self._body_checked = self.loop.time()
        self._body_bytes = 0
        if not self.parser.should_upgrade():  # an upgraded connection is another protocol's
            self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_late)
        super().on_headers_complete()

    def _headers_late(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            log.debug("closing a connection whose headers took over %g s",
                      self.limits.header_timeout_s)
            self._drop("header_timeout")

    # ---- its body ---------------------------------------------------------------------------
    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    def _body_late(self) -> None:
        self._body_timer = None
        now = self.loop.time()
        if self.flow is not None and self.flow.read_paused:
            self._body_since += now - self._body_checked  # we held reading back, not the client
        self._body_checked = now
        allowed = self.limits.body_timeout_s
        if self.limits.body_min_bytes_per_s > 0:
            allowed += self._body_bytes / self.limits.body_min_bytes_per_s
        left = self._body_since + allowed - now
        if left > 0:
            self._body_timer = self.loop.call_later(left, self._body_late)
        elif not self.transport.is_closing():
            log.debug("closing a connection whose body came slower than %g B/s",
                      self.limits.body_min_bytes_per_s)
            self._drop("body_timeout")

    # ---- between requests -------------------------------------------------------------------
    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self.pipeline:
            self._set_idle()  # uvicorn's keep-alive timer closes it when idle too long
