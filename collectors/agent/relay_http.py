"""The relay's HTTP side (`gpuhealth agent relay`): the standard library's threading HTTP/1.1
server, keep-alive, a thread per agent connection (a rack's 30-odd agents).

A body is read whole within the limit before the relay (collectors.agent.relay) answers it: a
declared Content-Length over the limit is refused (413) before a byte is read, and so is a
chunked body once it passes the limit; the connection is then closed, as the rest of the body
is not read. `GET /health` answers the relay's counters.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from collectors.agent.relay import Answer, Relay, too_big
from collectors.agent.relay_wire import Refusal, bad_request

log = logging.getLogger(__name__)
IDLE_S = 120.0  # an agent's keep-alive connection idle this long is closed
_MAX_CHUNK_LINE = 1024


class RelayServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, relay: Relay, host: str, port: int) -> None:
        self.relay = relay
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> threading.Thread:
        """Serve in a daemon thread; stop with shutdown() and server_close()."""
        t = threading.Thread(target=self.serve_forever, name="relay-http", daemon=True)
        t.start()
        return t


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gpuhealth-relay"
    timeout = IDLE_S
    server: RelayServer

    def do_POST(self) -> None:
        relay = self.server.relay
        path, _, query = self.path.partition("?")
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            body = self._body(relay.limits.max_body_bytes)
        except Refusal as refused:
            self.close_connection = True  # what is left of the body is not read
            relay.stats.refused += 1
            self._send(Answer(refused.status, refused.body(path), tuple(refused.headers.items())))
            return
        self._send(relay.answer(path, query, headers, body))

    def do_GET(self) -> None:
        if self.path.partition("?")[0] == "/health":
            s = self.server.relay.stats
            spool = self.server.relay.spool.stats
            self._send(Answer(200, {"status": "ok", "spooled_bodies": spool.segments,
                                    "spooled_bytes": spool.bytes, **_fields(s)}))
        else:
            self._send(Answer(404, {"error": "not found", "status": 404}))

    def _body(self, limit: int) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            return self._chunked(limit)
        declared = self.headers.get("content-length", "0").strip() or "0"
        if not declared.isdigit():
            raise bad_request(f"Content-Length {declared[:20]!r} is not a number")
        if int(declared) > limit:
            raise too_big(limit)  # refused before reading a byte of it
        return self.rfile.read(int(declared))

    def _chunked(self, limit: int) -> bytes:
        out = bytearray()
        while True:
            line = self.rfile.readline(_MAX_CHUNK_LINE)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise bad_request("malformed chunked body") from None
            if size == 0:
                while self.rfile.readline(_MAX_CHUNK_LINE) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(out)
            if len(out) + size > limit:
                raise too_big(limit)
            out += self.rfile.read(size)
            self.rfile.readline(_MAX_CHUNK_LINE)

    def _send(self, a: Answer) -> None:
        data = b"" if a.body is None else json.dumps(a.body).encode()
        self.send_response(a.status)
        for k, v in a.headers:
            self.send_header(k, v)
        if a.body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if data:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def _fields(stats: Any) -> dict[str, Any]:
    return {name: getattr(stats, name) for name in stats.__dataclass_fields__}
