"""Hostile requests for the relay (`gpuhealth agent relay`, collectors.agent.relay_http), for
bench.fuzz's relay class (issue 29, defect 8): each a raw HTTP/1.1 exchange over a socket, with
the statuses the relay may answer it. `actions(rng, token)` yields them without end, mixed;
`send(action, port)` performs one on loopback and says what came back.

A status of None means "the relay closed the connection without an answer" (a head or body
that never arrived in time, a connection evicted to make room): always acceptable for a slow
class, never for the others."""

from __future__ import annotations

import gzip
import random
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

T_NS = 1_700_000_000 * 10**9


@dataclass(frozen=True, slots=True)
class Action:
    kind: str
    head: bytes  # the request line and headers, CRLF CRLF included
    body: bytes = b""
    send_body: bool = True  # False: the head only (a refusal must come without the body)
    pause_s: float = 0.0  # between pieces of `head + body` (a slow client)
    pieces: int = 1
    expect: frozenset[int | None] = frozenset({204})


def _head(path: str, headers: dict[str, str], method: str = "POST") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: relay", *(f"{k}: {v}" for k, v in
                                                             headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _post(body: bytes, token: str | None, gz: bool = True, path: str = "/write",
          **extra: str) -> bytes:
    headers = {"Content-Length": str(len(body))}
    if gz:
        headers["Content-Encoding"] = "gzip"
    if token is not None:
        headers["Authorization"] = f"Token {token}"
    return _head(path, {**headers, **extra})


def _lines(n: int, host: str = "fz{i:05d}", gpu: str = "0") -> bytes:
    return "".join(f"gpu,host={host.format(i=i)},gpu={gpu.format(i=i)} gpu_temp=40 {T_NS}\n"
                   for i in range(n)).encode()


def actions(rng: random.Random, token: str) -> Iterator[Action]:
    """Hostile exchanges, each class about as often as the others."""
    bomb = gzip.compress(b"\0" * 30_000_000, compresslevel=6)  # past the 25 MB bound
    flood_node = gzip.compress(_lines(50_000, host="evil", gpu="{i}"))
    flood_nodes = gzip.compress(_lines(50_000))
    small = gzip.compress(_lines(8, host=f"fzslow{rng.randrange(10**6):06d}", gpu="{i}"))
    makers = [
        # authentication answered from the head, the body never read
        lambda: Action("no-token-25mb", _head("/write", {"Content-Length": "25000000"}),
                       send_body=False, expect=frozenset({401})),
        lambda: Action("wrong-token-25mb", _post(b"x" * 25_000_000, "wrong", gz=False),
                       send_body=False, expect=frozenset({401})),
        lambda: Action("declared-too-large", _post(b"x" * 26_000_000, token, gz=False),
                       send_body=False, expect=frozenset({413})),
        # request framing
        lambda: Action("cl-and-te", _head("/write", {
            "Authorization": f"Token {token}", "Content-Length": "5",
            "Transfer-Encoding": "chunked"}), b"0\r\n\r\n", expect=frozenset({400})),
        lambda: Action("two-lengths", _head("/write", {
            "Authorization": f"Token {token}", "Content-Length": "1",
            "content-length": "2"}), b"x", expect=frozenset({400})),
        lambda: Action("bad-chunk", _head("/write", {
            "Authorization": f"Token {token}", "Transfer-Encoding": "chunked"}),
            b"zz\r\nabc\r\n0\r\n\r\n", expect=frozenset({400})),
        lambda: Action("huge-head", _head("/write", {"X-Pad": "a" * 100_000}),
                       send_body=False, expect=frozenset({431, None})),
        lambda: Action("method", _head("/write", {}, method="PATCH"), send_body=False,
                       expect=frozenset({405})),
        lambda: Action("bad-encoding", _post(b"x", token, gz=False, **{
            "Content-Encoding": "br"}), b"x", expect=frozenset({415})),
        lambda: Action("bad-query", _post(b"x", token, gz=False, path="/write?precision=yr"),
                       b"x", expect=frozenset({422})),
        lambda: Action("gzip-bomb", _post(bomb, token), bomb, expect=frozenset({413})),
        lambda: Action("arrow-garbage", _post(b"\xff" * 64, token, gz=False, **{
            "Content-Type": "application/vnd.apache.arrow.stream"}), b"\xff" * 64,
            expect=frozenset({400})),
        # names: refused past the roster's bounds per push (the good ones kept)
        lambda: Action("names-one-node", _post(flood_node, token), flood_node,
                       expect=frozenset({400})),
        lambda: Action("names-many-nodes", _post(flood_nodes, token), flood_nodes,
                       expect=frozenset({400})),
        # slow clients: answered late or closed, never a thread held for long
        lambda: Action("slow-head", _post(small, token), small, pause_s=rng.uniform(0.5, 2),
                       pieces=4, expect=frozenset({204, None})),
        lambda: Action("stalled-head", b"POST /write HTTP/1.1\r\nHost: relay\r\n",
                       send_body=False, expect=frozenset({None})),
    ]
    while True:
        yield rng.choice(makers)()


def send(a: Action, port: int, host: str = "127.0.0.1", timeout_s: float = 30.0
         ) -> int | None:
    """Perform one exchange; the status answered, or None when the relay closed the
    connection without one (or did not answer within `timeout_s`)."""
    data = a.head + (a.body if a.send_body else b"")
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        try:
            step = max(1, len(data) // a.pieces)
            for at in range(0, len(data), step):
                s.sendall(data[at:at + step])
                if a.pause_s:
                    time.sleep(a.pause_s)
        except OSError:
            pass  # refused early: the answer may be waiting
        try:
            got = s.recv(64)
        except OSError:
            return None
    if not got.startswith(b"HTTP/1.1 "):
        return None
    return int(got[9:12])
