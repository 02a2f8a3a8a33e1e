"""Hostile clients for bench.fuzz and the service's tests: connections that trickle a request
and never finish it, and requests with bad credentials.

    with SlowClients("127.0.0.1", port, n=300, mode="headers") as slow:
        ...                      # the service must still answer /healthz and writes
    slow.closed                  # how many the service closed (it should close them all)

    codes = auth_failures(client, url, n=200)    # {status: count}: 401 then 429, never 5xx

    hostile_clients(url, n_slow=300, n_auth=200)  # both at once, /healthz probed throughout
"""

from __future__ import annotations

import base64
import contextlib
import errno
import secrets
import selectors
import socket
import threading
import time
from collections import Counter
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

Mode = Literal["headers", "body", "idle"]


class SlowClients:
    """`n` connections that each send a request's first line, then one more header line (mode
    "headers"), one body byte ("body": complete headers announcing 1 MB) or nothing ("idle")
    every `every_s`, from a background thread. `closed` counts those the server closed or
    reset; `refused` those that could not connect."""

    def __init__(self, host: str, port: int, n: int, mode: Mode = "headers",
                 every_s: float = 1.0) -> None:
        self.host, self.port, self.n, self.mode, self.every_s = host, port, n, mode, every_s
        self.closed = self.refused = 0
        self.opened = 0
        self._socks: list[socket.socket] = []
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def open_now(self) -> int:
        with self._lock:
            return len(self._socks)

    def __enter__(self) -> SlowClients:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self) -> None:
        first = b"POST /write HTTP/1.1\r\nHost: fuzz\r\n"
        if self.mode == "body":
            first += b"Content-Length: 1000000\r\nContent-Type: text/plain\r\n\r\n"
        for _ in range(self.n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(5.0)
            try:
                s.connect((self.host, self.port))
                s.sendall(first)
            except OSError:
                s.close()
                self.refused += 1
                continue
            s.setblocking(False)
            self._socks.append(s)
            self._sel.register(s, selectors.EVENT_READ)
            self.opened += 1
        self._thread = threading.Thread(target=self._run, name="slow-clients", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for s in self._socks:
                s.close()
            self._socks.clear()
        self._sel.close()

    def wait_closed(self, timeout_s: float) -> bool:
        """Until the server closed every connection; False if some were open at `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while self.open_now and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.open_now == 0

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            i += 1
            piece = {"headers": f"X-Slow-{i}: {i}\r\n".encode(), "body": b"x",
                     "idle": b""}[self.mode]
            with self._lock:
                live = list(self._socks)
            for s in live:
                if piece:
                    try:
                        s.send(piece)
                    except OSError:
                        self._gone(s)
            end = time.monotonic() + self.every_s
            while not self._stop.is_set() and (left := end - time.monotonic()) > 0:
                if not self._sel.get_map():
                    time.sleep(min(left, 0.1))
                    continue
                for key, _ in self._sel.select(timeout=min(left, 0.1)):
                    self._readable(key.fileobj)  # type: ignore[arg-type]

    def _readable(self, s: socket.socket) -> None:
        try:
            data = s.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self._gone(s)
            return
        if not data:  # EOF; an answer (400, 408) is followed by one
            self._gone(s)

    def _gone(self, s: socket.socket) -> None:
        with self._lock:
            if s not in self._socks:
                return
            self._socks.remove(s)
            self.closed += 1
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(s)
        with contextlib.suppress(OSError):
            s.close()


def bad_credentials(i: int) -> dict[str, str]:
    """The headers of the i-th bad credential: a well-formed API token with a wrong secret, one
    repeated bad token, garbage, a malformed header, a Basic password (InfluxDB v1 clients)."""
    kind = i % 5
    if kind == 0:
        return {"Authorization": f"Bearer ghk_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"}
    if kind == 1:
        return {"Authorization": "Bearer ghk_000000000000_" + "A" * 43}
    if kind == 2:
        return {"Authorization": f"Bearer {secrets.token_hex(8)}"}
    if kind == 3:
        return {"Authorization": "Bearer"}
    pw = base64.b64encode(f"u:{secrets.token_hex(8)}".encode()).decode()
    return {"Authorization": f"Basic {pw}"}


def auth_failures(client: httpx.Client, url: str, n: int,
                  spoof_forwarded: bool = True) -> Counter[int]:
    """`n` requests with bad credentials against admin, read and write routes (some with an
    X-Forwarded-For that must not pick the address charged), as {status: count}. A 5xx is the
    service's fault; 401, 403 and 429 are what such clients should get."""
    routes = [("POST", "/v1/breaker/reset"), ("GET", "/v1/alerts"), ("POST", "/write")]
    codes: Counter[int] = Counter()
    for i in range(n):
        method, path = routes[i % len(routes)]
        headers = bad_credentials(i)
        if spoof_forwarded and i % 2:
            headers["X-Forwarded-For"] = f"198.51.100.{i % 250}"
        try:
            r = client.request(method, url + path, headers=headers,
                               content=b"fuzz,host=auth gpu_temp=1\n" if path == "/write" else None,
                               timeout=10.0)
        except httpx.HTTPError as exc:
            codes[-errno.ECONNRESET if "reset" in str(exc).lower() else -1] += 1
            continue
        codes[r.status_code] += 1
    return codes


def hostile_clients(url: str, n_slow: int = 300, n_auth: int = 200,
                    close_within_s: float = 60.0) -> dict[str, Any]:
    """Slow clients of every mode (n_slow in all) held open while `n_auth` bad-credential
    requests go, with /healthz probed every 0.2 s throughout; then waits up to `close_within_s`
    for the service to close every slow connection (its header and body deadlines: 10 s and
    30 s by default). The goals: every probe 200, every slow connection closed, no 5xx."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    probes: Counter[int] = Counter()
    worst_ms = 0.0
    halt = threading.Event()

    def probe() -> None:
        nonlocal worst_ms
        with httpx.Client(timeout=10.0) as c:
            while not halt.is_set():
                t0 = time.perf_counter()
                try:
                    probes[c.get(f"{url}/healthz").status_code] += 1
                except httpx.HTTPError:
                    probes[-1] += 1
                worst_ms = max(worst_ms, (time.perf_counter() - t0) * 1e3)
                halt.wait(0.2)

    prober = threading.Thread(target=probe, name="healthz-probe", daemon=True)
    prober.start()
    modes: tuple[Mode, ...] = ("headers", "body", "idle")
    slow = [SlowClients(host, port, n_slow // len(modes), mode) for mode in modes]
    try:
        for s in slow:
            s.start()
        with httpx.Client() as client:
            codes = auth_failures(client, url, n_auth)
        closed_all = all(s.wait_closed(close_within_s) for s in slow)
    finally:
        for s in slow:
            s.stop()
        halt.set()
        prober.join()
    return {"slow_opened": sum(s.opened for s in slow),
            "slow_refused": sum(s.refused for s in slow),
            "slow_closed": sum(s.closed for s in slow), "slow_all_closed": closed_all,
            "healthz": dict(probes), "healthz_max_ms": round(worst_ms, 1),
            "auth": dict(sorted(codes.items())),
            "auth_5xx": sum(n for code, n in codes.items() if code >= 500 or code < 0)}
