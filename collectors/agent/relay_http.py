"""The relay's HTTP side (`gpuhealth agent relay`): HTTP/1.1 with keep-alive on one asyncio
event loop in a thread, the relay's parsing in a small thread pool.

Bounded against slow and hostile clients (issue 29: the threading server it replaces read a
25 MB body before checking the token and started a thread per connection, however slow):
- a request's head is answered before its body is read: a missing or wrong token (401), an
  unknown path (404), a bad query (422), an unknown encoding (415) or a declared length over
  the limit (413) is answered from the head and the connection closed, the body unread;
- a head must arrive within `head_s` of its first byte (a connection idle between requests
  waits at most `idle_s`), a body within `body_s`; past them the connection is closed;
- at most `max_connections` are open: a new one closes the connection that has waited
  longest for a request head (one that never sent a request first), so connections that send
  nothing cannot keep an agent out; a coroutine per connection, not a thread;
- parsing runs in `workers` threads (collectors.agent.relay serialises it anyway).
`GET /health` answers the relay's counters and these.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import resource
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from collectors.agent.relay import Answer, Relay, too_big
from collectors.agent.relay_wire import Refusal, bad_request
from collectors.compat import dataclass

log = logging.getLogger(__name__)
_MAX_CHUNK_LINE = 1024
_REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 401: "Unauthorized",
            404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
            413: "Payload Too Large", 415: "Unsupported Media Type",
            422: "Unprocessable Entity", 431: "Request Header Fields Too Large",
            501: "Not Implemented"}


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_connections: int = 1_024  # and never past the open-file limit, less a margin
    head_s: float = 10.0  # from a head's first byte to its end
    idle_s: float = 120.0  # a keep-alive connection waiting for its next request
    body_s: float = 60.0  # a whole body
    max_head_bytes: int = 64 * 1024
    workers: int = 4


@dataclass(slots=True)
class ServerStats:
    connections: int = 0  # open now
    connections_total: int = 0
    connections_evicted: int = 0  # closed to make room for a new one
    timeouts: int = 0  # heads or bodies that did not arrive in time
    body_bytes_read: int = 0


@dataclass(slots=True)
class _Conn:
    writer: asyncio.StreamWriter
    since: float  # when it began waiting for a head
    waiting: bool = True  # for a request head (not in a request)
    served: bool = False  # answered a request before


class _Close(Exception):
    """End this connection (after answering, if `answer`)."""

    def __init__(self, answer: Answer | None = None) -> None:
        self.answer = answer


class RelayServer:
    """Bound at construction (OSError there, as a socket bind raises it); `start` serves in a
    daemon thread; stop with shutdown() and server_close()."""

    def __init__(self, relay: Relay, host: str, port: int,
                 limits: ServerLimits | None = None) -> None:
        self.relay, self.limits = relay, limits or ServerLimits()
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        cap = self.limits.max_connections
        if soft != resource.RLIM_INFINITY:
            cap = max(16, min(cap, soft - 64))
        self.max_connections = cap
        self.stats = ServerStats()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))
            self._sock.listen(1024)
        except OSError:
            self._sock.close()
            raise
        self._sock.setblocking(False)
        self._pool = ThreadPoolExecutor(self.limits.workers, thread_name_prefix="relay-parse")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._conns: dict[int, _Conn] = {}
        self._started = threading.Event()

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self._run, name="relay-http", daemon=True)
        self._thread.start()
        self._started.wait(10)
        return self._thread

    def shutdown(self) -> None:
        if self._loop is not None and self._stopped is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def server_close(self) -> None:
        self._sock.close()

    # ---- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        server = await asyncio.start_server(self._serve, sock=self._sock,
                                            limit=self.limits.max_head_bytes)
        self._started.set()
        async with server:
            await self._stopped.wait()
            server.close()
            for c in list(self._conns.values()):
                c.writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(writer, time.monotonic())
        self._conns[id(conn)] = conn
        self.stats.connections_total += 1
        self.stats.connections = len(self._conns)
        if len(self._conns) > self.max_connections:
            self._evict(conn)
        try:
            while True:
                conn.waiting, conn.since = True, time.monotonic()
                try:
                    head = await self._head(reader, conn.served)
                except _Close as c:
                    if c.answer is not None:
                        await self._send(writer, c.answer, close=True)
                    return
                conn.waiting = False
                try:
                    answer, keep = await self._request(reader, writer, head)
                except _Close as c:
                    if c.answer is not None:
                        await self._send(writer, c.answer, close=True)
                    return
                await self._send(writer, answer, close=not keep)
                conn.served = True
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            return
        finally:
            self._conns.pop(id(conn), None)
            self.stats.connections = len(self._conns)
            writer.transport.abort()

    def _evict(self, new: _Conn) -> None:
        """Make room: the connection waiting longest for a head (never served first)."""
        waiting = [c for c in self._conns.values() if c.waiting and c is not new]
        if not waiting:
            new.writer.transport.abort()
            return
        victim = min(waiting, key=lambda c: (c.served, c.since))
        self.stats.connections_evicted += 1
        self._conns.pop(id(victim), None)  # gone now, though its coroutine ends later
        self.stats.connections = len(self._conns)
        victim.writer.transport.abort()

    async def _head(self, reader: asyncio.StreamReader, served: bool
                    ) -> tuple[str, str, str, dict[str, str]]:
        """(method, target, version, headers in lower case), read within the bounds."""
        try:
            first = await asyncio.wait_for(reader.readexactly(1),
                                           self.limits.idle_s if served else self.limits.head_s)
            rest = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.limits.head_s)
        except TimeoutError:
            self.stats.timeouts += 1
            raise _Close() from None
        except asyncio.LimitOverrunError:
            raise _Close(Answer(431, {"error": "request head too large", "status": 431})
                         ) from None
        except asyncio.IncompleteReadError:
            raise _Close() from None
        lines = (first + rest).decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _Close(Answer(400, {"error": "malformed request line", "status": 400}))
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            name = name.strip().lower()
            if not sep or not name or name != name.strip() or " " in name:
                raise _Close(Answer(400, {"error": "malformed header", "status": 400}))
            if name in headers:
                if name in ("content-length", "transfer-encoding", "authorization"):
                    raise _Close(Answer(400, {"error": f"{name} given twice", "status": 400}))
                headers[name] += ", " + value.strip()
            else:
                headers[name] = value.strip()
        return parts[0], parts[1], parts[2], headers

    async def _request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       head: tuple[str, str, str, dict[str, str]]) -> tuple[Answer, bool]:
        method, target, version, headers = head
        path, _, query = target.partition("?")
        keep = headers.get("connection", "").lower() != "close" and (
            version != "HTTP/1.0" or headers.get("connection", "").lower() == "keep-alive")
        if method == "GET":
            if headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in \
                    headers:
                raise _Close(Answer(400, {"error": "a GET with a body", "status": 400}))
            return self._get(path), keep
        if method != "POST":
            raise _Close(Answer(405, {"error": f"{method[:20]} not allowed", "status": 405}))
        relay = self.relay
        chunked = "transfer-encoding" in headers
        try:
            if chunked and (headers["transfer-encoding"].lower() != "chunked"
                            or "content-length" in headers):
                raise bad_request("Transfer-Encoding: only chunked, and never with "
                                  "Content-Length")
            declared = headers.get("content-length", "0") or "0"
            if not (declared.isascii() and declared.isdigit()):
                raise bad_request(f"Content-Length {declared[:20]!r} is not a number")
            # Everything the head can say is answered before a byte of the body is read.
            relay.check(path, query, headers, None if chunked else int(declared))
        except Refusal as refused:
            raise _Close(relay.refused(refused, path, headers)) from None
        if headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        limit = relay.limits.max_body_bytes
        try:
            body = await asyncio.wait_for(
                self._chunked(reader, limit) if chunked else reader.readexactly(int(declared)),
                self.limits.body_s)
        except TimeoutError:
            self.stats.timeouts += 1
            raise _Close(Answer(408, {"error": "the body did not arrive in time", "status": 408})
                         ) from None
        except Refusal as refused:  # a chunked body past the limit: the rest is not read
            raise _Close(relay.refused(refused, path, headers)) from None
        self.stats.body_bytes_read += len(body)
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(self._pool, relay.answer, path, query, headers,
                                            body)
        return answer, keep

    async def _chunked(self, reader: asyncio.StreamReader, limit: int) -> bytes:
        out = bytearray()
        while True:
            line = await reader.readline()
            if len(line) > _MAX_CHUNK_LINE:
                raise bad_request("malformed chunked body")
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise bad_request("malformed chunked body") from None
            if size < 0:
                raise bad_request("malformed chunked body")
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(out)
            if len(out) + size > limit:
                raise too_big(limit)
            out += await reader.readexactly(size)
            self.stats.body_bytes_read += size
            await reader.readline()

    def _get(self, path: str) -> Answer:
        if path != "/health":
            return Answer(404, {"error": "not found", "status": 404})
        s, spool = self.relay.stats, self.relay.spool.stats
        return Answer(200, {"status": "ok", "spooled_bodies": spool.segments,
                            "spooled_bytes": spool.bytes, **_fields(s), **_fields(self.stats)})

    async def _send(self, writer: asyncio.StreamWriter, a: Answer, close: bool) -> None:
        data = b"" if a.body is None else json.dumps(a.body).encode()
        head = [f"HTTP/1.1 {a.status} {_REASONS.get(a.status, 'Error')}",
                "Server: gpuhealth-relay", f"Content-Length: {len(data)}"]
        head += [f"{k}: {v}" for k, v in a.headers]
        if a.body is not None:
            head.append("Content-Type: application/json")
        if close:
            head.append("Connection: close")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
        try:
            await asyncio.wait_for(writer.drain(), self.limits.body_s)
        except TimeoutError:
            self.stats.timeouts += 1
            raise ConnectionError("the answer was not read in time") from None


def _fields(stats: Any) -> dict[str, Any]:
    return {name: getattr(stats, name) for name in stats.__dataclass_fields__}
