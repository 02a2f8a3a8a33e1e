"""The soak's loopback HTTP server, one thread: it serves the dcgm-exporter pages of the dcgm
nodes (`GET /dcgm/<node>/metrics`), and receives what the service sends out: notifications
(`POST /notify`, the webhook receiver's Alertmanager-v4 JSON) and remediation requests
(`POST /remediate`, the webhook hook's drain requests). Everything received is kept in order,
with its arrival time and `webhook-id`, and written to a JSON-lines file for reading after."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol


class Pages(Protocol):
    """Where the dcgm-exporter pages come from (the soak's Fleet; bench.cluster serves none)."""

    def dcgm(self, name: str) -> str | None: ...


class NoPages:
    """No dcgm-exporter nodes: every page is a 404."""

    def dcgm(self, name: str) -> str | None:
        return None


@dataclass(frozen=True, slots=True)
class Received:
    at: float
    path: str
    webhook_id: str
    body: dict[str, Any]


class Receiver:
    def __init__(self, fleet: Pages, log_file: Path) -> None:
        self.fleet = fleet
        self.log_file = log_file
        self.lock = threading.Lock()
        self.received: list[Received] = []
        self.dcgm_scrapes = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="soak-http",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def of(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]

    def _record(self, path: str, webhook_id: str, body: dict[str, Any]) -> None:
        r = Received(time.time(), path, webhook_id, body)
        with self.lock:
            self.received.append(r)
            with self.log_file.open("a") as fh:
                fh.write(json.dumps({"at": r.at, "path": path, "webhook_id": webhook_id,
                                     "body": body}) + "\n")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # no access log
                return

            def _answer(self, code: int, body: bytes = b"",
                        ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                if len(parts) == 3 and parts[0] == "dcgm" and parts[2] == "metrics":
                    page = outer.fleet.dcgm(parts[1])
                    if page is not None:
                        with outer.lock:
                            outer.dcgm_scrapes += 1
                        self._answer(200, page.encode(), "text/plain; version=0.0.4")
                        return
                self._answer(404, b"{}")

            def do_POST(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(size) if size else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._answer(400, b'{"error": "not JSON"}')
                    return
                if self.path not in ("/notify", "/remediate"):
                    self._answer(404, b"{}")
                    return
                outer._record(self.path, self.headers.get("webhook-id", ""), body)
                answer: dict[str, list[str]] = {}
                if self.path == "/remediate":
                    answer = {"moved": [], "left": []}
                self._answer(200, json.dumps(answer).encode())

        return Handler
