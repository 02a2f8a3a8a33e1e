"""Issue 29, defect 8: the relay on real loopback sockets against hostile clients. A request
without the token is answered 401 from its head, its 25 MB body never read; 2,000 connections
that never finish a request neither take a thread each nor keep an agent out; one agent naming
50,000 names does not swell the bodies of the rest of its rack."""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.agent.push import Pusher
from collectors.agent.relay import SPOOL_SUFFIX, Relay
from collectors.agent.relay_batch import read_arrow
from collectors.agent.relay_http import RelayServer
from collectors.agent.spool import Spool
from collectors.catalog import Scope
from collectors.schema import batch_to_lines
from tests.collectors.agent.relay_service import free_port
from tests.support.fleet import T0, Fleet

pytest.importorskip("pyarrow")
TOKEN = "hostile-test-token"


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[tuple[Relay, RelayServer]]:
    # The service is away: every body stays in the spool, where the test reads it.
    spool = Spool(tmp_path / "spool", 1 << 30, suffix=SPOOL_SUFFIX)
    r = Relay(spool, Pusher(f"http://127.0.0.1:{free_port()}/write"), tokens=[TOKEN],
              wall=lambda: T0)
    server = RelayServer(r, "127.0.0.1", 0)
    server.start()
    yield r, server
    server.shutdown()
    server.server_close()


def _node(node: str, k: int = 0) -> bytes:
    text = "".join(ln + "\n" for ln in batch_to_lines(Fleet({node: 8}).batch(T0 + 5 * k)))
    return gzip.compress(text.encode())


def _push(server: RelayServer, body: bytes) -> int | None:
    got = Pusher(f"http://127.0.0.1:{server.port}/write", token=TOKEN, arrow=False,
                 timeout_s=60).push(body)
    return got.status


def test_a_body_without_the_token_is_refused_from_its_head_unread(
        relay: tuple[Relay, RelayServer]) -> None:
    r, server = relay
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"POST /write HTTP/1.1\r\nHost: relay\r\nContent-Length: 25000000\r\n"
                  b"Authorization: Token wrong\r\n\r\n" + b"x" * 65_536)
        answer = b""
        while chunk := s.recv(65_536):  # the relay answers and closes: no body awaited
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
    assert b"WWW-Authenticate" in answer
    assert server.stats.body_bytes_read == 0
    # The same from an ordinary client sending the whole 25 MB.
    import httpx

    got = httpx.post(f"http://127.0.0.1:{server.port}/write", content=b"y" * 25_000_000,
                     timeout=60)
    assert got.status_code == 401
    assert server.stats.body_bytes_read == 0 and r.stats.refused == 2


@pytest.mark.slow
def test_slow_connections_neither_take_threads_nor_keep_an_agent_out(
        relay: tuple[Relay, RelayServer]) -> None:
    r, server = relay
    slow: list[socket.socket] = []
    try:
        for _ in range(2_000):  # a request head begun and never finished
            s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            s.sendall(b"POST /write HTTP/1.1\r\nHost: relay\r\n")
            slow.append(s)
        threads = threading.active_count()
        assert _push(server, _node("n001")) == 204  # a valid agent is answered
        assert threads < 64, f"{threads} threads for 2,000 slow connections"
        assert server.stats.connections <= server.max_connections
        # Past the cap each slow connection was closed: evicted, or timed out first when
        # opening 2,000 took longer than the head deadline (a loaded machine).
        closed = server.stats.connections_evicted + server.stats.timeouts
        assert closed >= 2_000 - server.max_connections
        assert r.stats.pushes == 1
    finally:
        for s in slow:
            s.close()


def _gpu_names(spool: Spool) -> list[int]:
    """Per spooled body, the names its GPU table lists."""
    return [len(read_arrow(body).batch.frames[Scope.GPU].entities)
            for _, body in spool.first(1_000)]


@pytest.mark.slow
def test_one_agent_naming_50000_names_does_not_swell_the_other_bodies(
        relay: tuple[Relay, RelayServer]) -> None:
    r, server = relay
    rack = [f"n{i:03d}" for i in range(30)]

    def round_(k: int) -> None:
        for n in rack:
            assert _push(server, _node(n, k)) == 204
        r.flush()

    round_(0)
    round_(1)
    # One push of 50,000 GPUs of one node, and one of 50,000 nodes: refused past the bounds.
    one_node = "".join(f"gpu,host=evil,gpu={i} gpu_temp=40 {int(T0 * 1e9)}\n"
                       for i in range(50_000))
    many = "".join(f"gpu,host=ev{i:05d},gpu=0 gpu_temp=40 {int(T0 * 1e9)}\n"
                   for i in range(50_000))
    for text in (one_node, many):
        assert _push(server, gzip.compress(text.encode())) == 400
    r.flush()
    round_(2)
    round_(3)
    sizes = _gpu_names(r.spool)
    assert sizes[0] == sizes[1] == len(rack) * 8
    assert sizes[3] == sizes[4] == len(rack) * 8, sizes  # the rack's bodies: as before
    limits = r.roster.limits  # the flood's own body: only what the bounds let through
    assert sizes[2] <= len(rack) * 8 + limits.names_per_node + limits.nodes_per_push
    assert r.roster.shared(Scope.GPU) == len(rack) * 8
