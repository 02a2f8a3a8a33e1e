"""The node agent: the on-disk spool, and delivery to the real service on loopback across a
service outage (every sample arrives exactly once, in order)."""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import uvicorn

from collectors.agent.loop import Agent
from collectors.agent.push import Outcome, Pusher
from collectors.agent.spool import Spool
from collectors.base import CollectorStatus
from collectors.catalog import Scope
from collectors.frames import Batch
from service.api.app import create_app
from service.history.samples_read import samples
from service.settings import Settings
from tests.pipeline.builders import T0, Rounds


class RoundsCollector:
    """Hand-built rounds of a 2-node fleet, one per collect(), 5 s apart."""

    name = "rounds"

    def __init__(self) -> None:
        self.status = CollectorStatus()
        self.rounds = Rounds(nodes=2, gpus=2, links=1, ports=1)
        self.k = 0

    def collect(self) -> Batch:
        b = self.rounds.batch(T0 + 5 * self.k)
        self.k += 1
        return b


class Service:
    """The real service on loopback; `clock` is the time it ingests at (a fixed point in the
    test traces by default, the wall clock for a replay moved to now)."""

    def __init__(self, data_dir: Path, port: int,
                 clock: Callable[[], float] = lambda: T0 + 100_000) -> None:
        settings = Settings(storage={"data_dir": data_dir})  # type: ignore[arg-type]
        app = create_app(settings, clock=clock, schedule=False)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Service:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.server.started
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_spool_is_bounded_drops_oldest_and_survives_a_restart(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", max_bytes=2000)
    for i in range(50):
        spool.append(f"gpu,host=n1,gpu=0 gpu_temp={i} {i}\n" * 20)
    assert spool.stats.dropped_segments > 0 and spool.stats.bytes <= 2000
    first = spool.oldest()
    assert first is not None
    again = Spool(tmp_path / "spool", max_bytes=2000)
    assert again.oldest() == first
    assert again.append("x\n") > first[0]


@pytest.mark.slow
def test_every_sample_arrives_exactly_once_in_order_across_an_outage(tmp_path: Path) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/write"
    clock = Clock()
    source = RoundsCollector()
    agent = Agent([source], Spool(tmp_path / "spool"), Pusher(url, timeout_s=2), clock=clock)
    with Service(tmp_path / "svc", port):
        for _ in range(10):
            agent.collect_round()
            assert agent.flush() == 1
    for _ in range(10):  # the service is down: rounds pile up in the spool
        agent.collect_round()
        agent.flush()
        clock.t += 5
    assert agent.stats.push_failures >= 1 and agent.spool.stats.segments == 10
    with Service(tmp_path / "svc", port):
        for _ in range(5):
            clock.t += 60  # past any backoff
            agent.collect_round()
            agent.flush()
    assert agent.spool.stats.segments == 0 and agent.stats.segments_sent == 25
    db = sqlite3.connect(tmp_path / "svc" / "gpuhealth.db")
    # Rows are written change-only: the store's reader rebuilds every sample.
    keys = sorted(r[0] for r in db.execute("SELECT entity FROM gpu_entities"))
    assert keys == ["n0:gpu0", "n0:gpu1", "n1:gpu0", "n1:gpu1"]
    assert db.execute("SELECT COUNT(*) FROM gpu_late").fetchone() == (0,)  # all in order
    for key in keys:
        got = samples(db, Scope.GPU, key, key.split(":")[0], T0, T0 + 3600, ["gpu_temp"])
        assert [ts for ts, _ in got] == [T0 + 5 * k for k in range(25)]


def test_a_partial_write_is_not_resent_and_a_refused_token_is_retried(tmp_path: Path) -> None:
    port = _free_port()
    with Service(tmp_path / "svc", port):
        pusher = Pusher(f"http://127.0.0.1:{port}/write")
        import gzip

        bad = gzip.compress(b"gpu,host=n1,gpu=0 gpu_temp=50 1\nnot line protocol\n")
        assert pusher.push(bad).outcome is Outcome.SENT
        wrong = Pusher(f"http://127.0.0.1:{port}/nope")
        assert wrong.push(bad).outcome is Outcome.RETRY


@pytest.mark.parametrize("status,outcome", [(503, Outcome.RETRY), (413, Outcome.DROP)])
def test_outcomes_of_server_answers(tmp_path: Path, status: int, outcome: Outcome) -> None:
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        res = Pusher(f"http://127.0.0.1:{srv.server_address[1]}/write").push(b"x")
        assert res.outcome is outcome and res.status == status
    finally:
        srv.shutdown()


@pytest.mark.slow
def test_two_targets_each_get_every_round_whatever_the_other_does(tmp_path: Path) -> None:
    """An HA pair's two replicas: each has a spool of its own, so while one is down the other
    still gets every round at once, and the one that comes back gets its backlog, in order,
    exactly once."""
    pa, pb = _free_port(), _free_port()
    clock = Clock()
    agent = Agent([RoundsCollector()], Spool(tmp_path / "spool"),
                  Pusher(f"http://127.0.0.1:{pa}/write", timeout_s=2), clock=clock,
                  also=[(Spool(tmp_path / "spool-2"),
                         Pusher(f"http://127.0.0.1:{pb}/write", timeout_s=2))])
    with Service(tmp_path / "a", pa):  # b is down throughout
        for _ in range(6):
            agent.collect_round()
            agent.flush()
            clock.t += 5
        assert agent.targets[0].spool.stats.segments == 0  # a took every round at once
        assert agent.targets[1].spool.stats.segments == 6  # b's wait in b's own spool
    with Service(tmp_path / "a", pa), Service(tmp_path / "b", pb):
        for _ in range(4):
            clock.t += 60  # past any backoff
            agent.collect_round()
            agent.flush()
    assert [t.spool.stats.segments for t in agent.targets] == [0, 0]
    assert agent.stats.segments_sent == 20 and agent.stats.push_failures >= 1
    for name in ("a", "b"):
        db = sqlite3.connect(tmp_path / name / "gpuhealth.db")
        got = samples(db, Scope.GPU, "n0:gpu0", "n0", T0, T0 + 3600, ["gpu_temp"])
        assert [ts for ts, _ in got] == [T0 + 5 * k for k in range(10)], name
        assert db.execute("SELECT COUNT(*) FROM gpu_late").fetchone() == (0,)
