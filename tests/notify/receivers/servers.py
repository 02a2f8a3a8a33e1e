"""Real servers on loopback for the receiver tests: an HTTP server that records requests and
answers a scripted sequence of replies (including one that hangs past the client's timeout),
an SMTP server (aiosmtpd) that can answer DATA with a chosen status, and a throwaway CA."""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs

import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A port nothing listens on right now (bound then released)."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


# ---------------------------------------------------------------------------------- HTTP


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: Any = b""  # bytes, str, or anything JSON-serialisable
    headers: dict[str, str] = field(default_factory=dict)
    hang_s: float = 0.0  # wait this long before answering (longer than a client timeout)
    # A huge answer instead of `body`: this many bytes of filler, written as the client reads
    # (never held whole); `chunked`: without a content-length, so only reading finds its size.
    size: int = 0
    chunked: bool = False

    def encoded(self) -> tuple[bytes, str]:
        if isinstance(self.body, bytes):
            return self.body, "text/plain"
        if isinstance(self.body, str):
            return self.body.encode(), "text/plain; charset=utf-8"
        return json.dumps(self.body).encode(), "application/json"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def form(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self.body.decode(), strict_parsing=True).items()}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        self.do_POST()

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        self.server.owner.record(Request(self.command, self.path,
                                         {k.lower(): v for k, v in self.headers.items()},
                                         body))
        reply = self.server.owner.next_reply()
        if reply.hang_s and self.server.owner.stopping.wait(reply.hang_s):
            return
        if reply.size:
            self._flood(reply)
            return
        data, ctype = reply.encoded()
        try:
            self.send_response(reply.status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            for k, v in reply.headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (timeout) and closed the connection
            self.close_connection = True

    def _flood(self, reply: Reply) -> None:
        block = b"x" * (256 * 1024)
        try:
            self.send_response(reply.status)
            self.send_header("content-type", "application/json")
            if reply.chunked:
                self.send_header("transfer-encoding", "chunked")
            else:
                self.send_header("content-length", str(reply.size))
            self.end_headers()
            left = reply.size
            while left > 0 and not self.server.owner.stopping.is_set():
                part = block[:left]
                if reply.chunked:
                    self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                else:
                    self.wfile.write(part)
                left -= len(part)
                self.server.owner.flooded += len(part)
            if reply.chunked:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client stopped reading and closed: what a bounded read does
            pass
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: HttpRecorder


class HttpRecorder:
    """`with HttpRecorder([Reply(500), Reply(202, {...})]) as srv:` then post to srv.url."""

    def __init__(self, replies: Iterable[Reply] = (), default: Reply | None = None) -> None:
        self._replies: deque[Reply] = deque(replies)
        self._default = default or Reply(200)
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        self.flooded = 0  # filler bytes written by huge answers (the client may not read them)
        self.stopping = threading.Event()
        self._server = _Server((LOOPBACK, 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def record(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    def next_reply(self) -> Reply:
        with self._lock:
            return self._replies.popleft() if self._replies else self._default

    def __enter__(self) -> HttpRecorder:
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stopping.set()  # releases hanging handlers
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# ---------------------------------------------------------------------------------- SMTP


class SmtpSink:
    """An aiosmtpd handler keeping what it accepts, or answering DATA with `reply`."""

    def __init__(self, reply: str | None = None) -> None:
        self.reply = reply
        self.envelopes: list[Envelope] = []

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        if self.reply is not None:
            return self.reply
        self.envelopes.append(envelope)
        return "250 2.0.0 OK"


@contextmanager
def smtp_server(handler: SmtpSink, *, starttls: ssl.SSLContext | None = None,
                implicit: ssl.SSLContext | None = None) -> Iterator[int]:
    """A real SMTP server on loopback; yields its port. `starttls`: offer and require
    STARTTLS with this context; `implicit`: TLS from the first byte."""
    kwargs: dict[str, Any] = {}
    if starttls is not None:
        kwargs.update(tls_context=starttls, require_starttls=True)
    for attempt in range(3):  # aiosmtpd needs a concrete port; another process may take it
        ctl = Controller(handler, hostname=LOOPBACK, port=free_port(), ssl_context=implicit,
                         ready_timeout=5.0, **kwargs)
        try:
            ctl.start()
            break
        except OSError:
            if attempt == 2:
                raise
    try:
        yield ctl.port
    finally:
        ctl.stop()


# ----------------------------------------------------------------------------------- TLS


@dataclass(frozen=True)
class Tls:
    ca_file: Path  # PEM of the CA a client must be told to trust
    server: ssl.SSLContext  # server side: a loopback certificate that CA issued


def make_tls(directory: Path) -> Tls:
    ca = trustme.CA()
    cert = ca.issue_cert(LOOPBACK, "localhost")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server)
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return Tls(ca_file, server)
