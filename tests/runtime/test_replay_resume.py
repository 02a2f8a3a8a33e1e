"""`serve --replay` after a restart (issue 14, item 7): it resumes where it stopped instead of
replaying the trace from its start (which re-paged every failure in it), and a page in flight
when the service was killed is sent again under the same webhook-id, so the far end can drop
the duplicate. Real processes, killed with SIGKILL, and a real HTTP receiver on loopback."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from collectors.replay import ReplaySource
from collectors.trace import TraceReader, TraceWriter
from service.runtime.replay_progress import ReplayProgress
from service.tick import TickResult
from tests.notify.receivers.servers import HttpRecorder, Reply, free_port
from tests.support.fleet import STEP, T0, Fleet

REPO = Path(__file__).resolve().parents[2]
ROUNDS = 80
FIRST, SECOND = 4, 60  # rounds at which n001:gpu3, then n002:gpu1, report a double-bit error
RESET = 44  # n001:gpu3 is reset: its page resolves (a replay from the start would page again)


def _trace(path: Path) -> Path:
    fleet = Fleet({"n001": 8, "n002": 8}, links=1, ports=1)
    with TraceWriter(path) as w:
        for k in range(ROUNDS):
            if k == FIRST:
                fleet.set("n001:gpu3", "ecc_dbe_volatile", 1)
            if k == RESET:
                fleet.set("n001:gpu3", "ecc_dbe_volatile", 0)
            if k == SECOND:
                fleet.set("n002:gpu1", "ecc_dbe_volatile", 1)
            w.write(fleet.batch(T0 + k * STEP))
    return path


def test_skip_through_drops_the_rounds_already_scored(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "trace")
    src = ReplaySource(trace, speed=0, skip_through=T0 + 9 * STEP)
    first = src.collect()
    assert src.rounds_skipped == 10
    assert float(first.frames[next(iter(first.frames))].ts[0]) == T0 + 10 * STEP


def _tick(at: float) -> TickResult:
    return TickResult(at=at, duration_s=0.0, risk=None)  # type: ignore[arg-type]


def test_progress_is_kept_per_trace_and_forgotten_when_the_trace_changes(
        tmp_path: Path, state_target: str) -> None:
    trace = _trace(tmp_path / "trace")
    db = state_target
    wall = iter(range(100))
    p = ReplayProgress(db, TraceReader(trace), wall=lambda: float(next(wall)))
    assert p.resume_at() is None
    p.observe(_tick(T0 + 20))
    p.observe(_tick(float("nan")))  # a tick before any data is no progress
    p.close()
    again = ReplayProgress(db, TraceReader(trace))
    assert again.resume_at() == T0 + 20
    again.close()
    f = next(trace.iterdir())
    f.write_bytes(f.read_bytes() + b"\n")
    changed = ReplayProgress(db, TraceReader(trace))
    assert changed.resume_at() is None
    changed.close()


# ---- real processes ----------------------------------------------------------------------------

class Service:
    def __init__(self, root: Path, trace: Path, receiver: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db = root / "var" / "gpuhealth.db"
        config = {
            "service": {"host": "127.0.0.1", "port": self.port},
            "storage": {"data_dir": str(root / "var")},
            "detectors": {"model": {"path": "none"}},
            "alerts": {"resolve_for_s": 10, "dwell_s": [0, 10, 10]},
            "notify": {
                "receivers": [{"name": "pager", "type": "webhook",
                               "config": {"url": f"{receiver}/notify",
                                          "secret": "resume-test-secret-0123456789"}}],
                "route": {"receiver": "record", "group_by": ["node"], "group_wait_s": 0,
                          "group_interval_s": STEP, "repeat_interval_s": 86400,
                          "routes": [{"matchers": ["level>=3"], "receiver": "pager"}]},
            },
        }
        self.config = root / "gpuhealth.yaml"
        self.config.write_text(yaml.safe_dump(config))
        self.argv = [sys.executable, "-m", "service.commands.cli", "serve", "--config",
                     str(self.config), "--replay", str(trace), "--speed", "40"]
        self.log = root / "service.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(self.argv, cwd=REPO, stdout=fh, stderr=fh,
                                         env={**os.environ, "PYTHONPATH": str(REPO)},
                                         start_new_session=True)

    def ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"service not up:\n{self.log.read_text()}")

    def replay_done(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = httpx.get(f"{self.url}/readyz", timeout=2).json()
            if got["collectors"]["replay"]["exhausted"]:
                return
            time.sleep(0.1)
        raise AssertionError(f"replay not done:\n{self.log.read_text()}")

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill9()


def _wait(cond: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(cond) and cond():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.fixture
def receiver() -> Iterator[HttpRecorder]:
    # The first page is taken and never answered: the service dies with it in flight.
    with HttpRecorder([Reply(200, hang_s=120)]) as srv:
        yield srv


def _pages(rec: HttpRecorder) -> list[tuple[str, str, list[str]]]:
    """(webhook-id, status, entities) of every message received."""
    out = []
    for r in rec.requests:
        body = r.json()
        out.append((r.headers["webhook-id"], body["status"],
                    sorted(a["labels"]["entity"] for a in body["alerts"])))
    return out


@pytest.mark.slow
def test_a_killed_replay_resumes_and_resends_its_page_in_flight_under_the_same_id(
        tmp_path: Path, receiver: HttpRecorder) -> None:
    trace = _trace(tmp_path / "trace")
    svc = Service(tmp_path, trace, receiver.url)
    try:
        svc.start()
        svc.ready()
        _wait(lambda: len(receiver.requests) >= 1)
        time.sleep(1.5)  # the replay goes on past it (and saves where it got to)
        svc.kill9()  # the first page was taken, never answered
        [(first_id, status, first_alerts)] = _pages(receiver)
        assert (status, first_alerts) == ("firing", ["n001:gpu3"])
        with sqlite3.connect(svc.db) as db:
            [(at,)] = db.execute("SELECT at FROM replay_progress").fetchall()
        assert T0 + FIRST * STEP <= at < T0 + RESET * STEP

        svc.start()  # the same command
        svc.ready()
        svc.replay_done()
        _wait(lambda: any("n002:gpu1" in a for _, _, a in _pages(receiver)))
        time.sleep(2 * STEP / 40 + 0.5)  # a few more ticks: nothing else may be sent
        pages = _pages(receiver)
        again = [(i, st) for i, st, a in pages[1:] if a == ["n001:gpu3"]]
        # Once more under the same id, then its resolve.
        assert again[0] == (first_id, "firing") and [st for _, st in again[1:]] == ["resolved"]
        assert [a for _, st, a in pages if st == "firing"].count(["n002:gpu1"]) == 1
        log = svc.log.read_text()
        assert "resuming the replay" in log

        svc.stop()
        n = len(receiver.requests)
        svc.start()  # once more after the trace ended: nothing is replayed or re-paged
        svc.ready()
        svc.replay_done()
        time.sleep(1.0)
        assert len(receiver.requests) == n
        alerts = httpx.get(f"{svc.url}/v1/alerts?level=3").json()["alerts"]
        assert sorted(a["entity"] for a in alerts) == ["n001:gpu3", "n002:gpu1"]
    finally:
        svc.stop()
