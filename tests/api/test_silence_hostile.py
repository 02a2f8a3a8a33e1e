"""Hostile silences against the real service (issue 29, defect 1 and the silence 500s of
defect 10): `serve` as a subprocess on loopback with ten firing alerts. A silence whose regex
backtracks catastrophically under Python's `re` (`(.*.*.*)*X`) once froze the scoring tick
with the GIL held: /healthz and DELETE timed out, SIGTERM went unheard, and since the silence
is stored the restart froze again. Matchers are RE2 now: the service keeps answering (each
request below gives up after a few seconds, which is how the freeze showed), the silence is
matched, stops on SIGTERM and starts again with it. Silences stored by an older release that
today's rules refuse load as invalid and mute nothing; too many matchers, NaN durations and
non-ASCII digits are refused with problem details, never 500."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from service.api.auth import TokenStore
from service.notify.matchers import MAX_MATCHERS
from service.settings import load
from tests.notify.receivers.servers import free_port

REPO = Path(__file__).resolve().parents[2]
NODES = [f"n{i:03d}" for i in range(1, 11)]
REQUEST_TIMEOUT_S = 5.0  # a frozen service shows as a timeout here
CATASTROPHIC = "alertname=~(.*.*.*)*X"  # exponential backtracking under Python's re


class Service:
    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "service": {"host": "127.0.0.1", "port": self.port, "collect_interval_s": 1,
                        "score_interval_s": 1},
            "storage": {"data_dir": str(root / "var")},
            "detectors": {"model": {"path": "none"}},
            "notify": {"route": {"receiver": "record", "group_by": ["node"],
                                 "group_wait_s": 0},
                       "verdict_link_secret": "silence-test-secret-0123456789"},
            "api": {"rate_limit_per_min": 6000, "rate_limit_burst": 1000},
        }
        self.config = root / "gpuhealth.yaml"
        self.config.write_text(yaml.safe_dump(config))
        self.db = Path(load(self.config).storage.state_target)
        self.log = root / "service.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.client = httpx.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S)
        self.headers: dict[str, str] = {}

    def token(self) -> None:
        store = TokenStore(self.db)
        try:
            secret = store.create("oncall", "operate", time.time())[1]
        finally:
            store.close()
        self.headers = {"Authorization": f"Bearer {secret}"}

    def start(self) -> None:
        argv = [sys.executable, "-m", "service.commands.cli", "serve", "--config",
                str(self.config)]
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(argv, cwd=REPO, stdout=fh, stderr=fh,
                                         env={**os.environ, "PYTHONPATH": str(REPO)},
                                         start_new_session=True)
        wait_for(lambda: self.get("/healthz").status_code == 200, self)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.client.get(path, headers=self.headers, **kw)

    def call(self, method: str, path: str, status: int, **kw: Any) -> Any:
        r = self.client.request(method, path, headers=self.headers, **kw)
        assert r.status_code == status, r.text
        return r.json()

    def stop(self) -> None:
        """SIGTERM, as systemd stops it; a service that does not exit fails the test."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("SIGTERM did not stop the service") from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def groups(self) -> dict[str, dict[str, str]]:
        """Muted alerts (fingerprint: why) by the node of their group."""
        got = self.get("/v1/groups").json()["groups"]
        return {g["labels"].get("node", ""): g["muted"] for g in got}


def wait_for(cond: Callable[[], bool], svc: Service, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert svc.proc is not None and svc.proc.poll() is None, svc.log.read_text()[-3000:]
        try:
            if cond():
                return
        except httpx.ConnectError:  # not listening yet; a read that times out is a freeze
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting; service log:\n{svc.log.read_text()[-3000:]}")


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Service]:
    s = Service(tmp_path)
    s.token()
    try:
        yield s
    finally:
        s.kill()
        s.client.close()


def _fire(svc: Service) -> None:
    """A hard fault (Xid 79, fallen off the bus) on one GPU of each of the ten nodes."""
    body = "".join(f"xid,host={n},gpu=0 code=79i\n" for n in NODES)
    r = svc.client.post("/write", content=body)
    assert r.status_code == 204, r.text
    wait_for(lambda: {a["node"] for a in svc.get("/v1/alerts", params={"state": "firing"})
                      .json()["alerts"]} >= set(NODES), svc)


def _store_old_silences(db: Path, now: float) -> tuple[str, str]:
    """Two silences for n001 as an older release stored them: one with a regex only Python's
    re takes (lookahead), one with 10,000 matchers. Both would have muted n001."""
    ids = (uuid.uuid4().hex, uuid.uuid4().hex)
    matchers = (["alertname=~(?=.).*", "node=n001"],
                ["node=n001", *(f"entity!=x{i}" for i in range(9_999))])
    with sqlite3.connect(db) as conn:
        for sid, m in zip(ids, matchers, strict=True):
            conn.execute("INSERT INTO silences (id, matchers, author, comment, created_at, "
                         "starts_at, ends_at, expired_by) VALUES (?,?,?,?,?,?,?,NULL)",
                         (sid, json.dumps(m), "old", "stored before", now, now, now + 3600))
    conn.close()
    return ids


@pytest.mark.slow
def test_a_catastrophic_regex_silence_neither_freezes_nor_survives_as_a_freeze(
        svc: Service) -> None:
    svc.start()
    _fire(svc)
    never = svc.call("POST", "/v1/silences", 201, json={
        "matchers": [CATASTROPHIC], "comment": "hostile", "duration_s": 3600})
    # Matched on every alert too (succeeding), with the node choosing one: n003 is muted by it.
    mine = svc.call("POST", "/v1/silences", 201, json={
        "matchers": ["alertname=~(.*.*.*)*[a-z]", "node=n003"], "comment": "rack work",
        "duration_s": 3600})
    wait_for(lambda: bool(svc.groups().get("n003")), svc)
    muted = svc.groups()
    assert set(muted["n003"].values()) == {f"silenced by {mine['id']}"}
    assert not any(muted[n] for n in NODES if n != "n003")
    assert svc.get("/healthz").status_code == 200
    gone = svc.call("DELETE", f"/v1/silences/{never['id']}", 200)
    assert gone["state"] == "expired" and gone["invalid"] is None
    again = svc.call("POST", "/v1/silences", 201, json={
        "matchers": [CATASTROPHIC, "node=~(n0.*.*.*)*9"], "comment": "hostile again",
        "duration_s": 3600})
    svc.stop()

    # A restart with the hostile silence stored, and two an older release stored that today's
    # rules refuse.
    lookahead, many = _store_old_silences(svc.db, time.time())
    svc.start()
    listed = {s["id"]: s for s in svc.get("/v1/silences", params={"limit": 100})
              .json()["silences"]}
    assert listed[again["id"]]["invalid"] is None and listed[again["id"]]["state"] == "active"
    assert "RE2" in listed[lookahead]["invalid"]
    assert "10000 matchers" in listed[many]["invalid"]
    assert len(listed[many]["matchers"]) == MAX_MATCHERS  # shown in part
    _fire(svc)
    wait_for(lambda: bool(svc.groups().get("n003")), svc)
    muted = svc.groups()
    assert set(muted["n003"].values()) == {f"silenced by {mine['id']}"}  # not by n001's old one
    assert not muted.get("n001")
    for sid in (lookahead, many):
        assert svc.call("DELETE", f"/v1/silences/{sid}", 200)["state"] == "expired"
    assert svc.get("/healthz").status_code == 200
    svc.stop()


@pytest.mark.slow
def test_hostile_silence_bodies_are_refused_with_problem_details(svc: Service) -> None:
    svc.start()

    def refused(body: str | dict[str, Any], status: int = 422) -> str:
        kw: dict[str, Any] = {"json": body} if isinstance(body, dict) else {
            "content": body.encode(), "headers": {**svc.headers,
                                                  "Content-Type": "application/json"}}
        if "headers" in kw:
            r = svc.client.post("/v1/silences", **kw)
        else:
            r = svc.client.post("/v1/silences", headers=svc.headers, **kw)
        assert r.status_code == status, (body, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        return r.text

    base = '{"matchers": ["node=n001"], "comment": "x", '
    for tail in ('"duration_s": NaN}', '"duration_s": -Infinity}', '"duration_s": 1e400}',
                 '"ends_at": NaN}', '"starts_at": NaN, "duration_s": 60}',
                 '"ends_at": "\u00b2"}', '"ends_at": "2030-01-01T00:00:0\u00b2Z"}',
                 '"ends_at": "\u0661\u0667\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660"}',
                 '"duration_s": "\uff11\uff10"}'):
        refused(base + tail)
    for matchers, says in (
            (["node=n001", *(f"entity=e{i}" for i in range(MAX_MATCHERS))], "at most 64"),
            ([f"node=n{i:05d}" for i in range(10_000)], "at most 64"),
            (["alertname=~(Gpu)\\1"], "RE2"), (["alertname=~Gpu(?=Xid)"], "RE2"),
            (["node=n001", "level>=nan"], "non-number"),
            (["node=n001", "level>=\u00b2"], "non-number"),
            (["node=~" + "a" * 5000], "longer than"),
            (["node=~\\p{L}{200}"], "regex")):
        assert says in refused({"matchers": matchers, "comment": "x", "duration_s": 60})
    ok = svc.call("POST", "/v1/silences", 201, json={
        "matchers": ["node=n001", *(f"entity!=e{i}" for i in range(MAX_MATCHERS - 1))],
        "comment": "the most matchers a silence takes", "duration_s": 60})
    assert len(ok["matchers"]) == MAX_MATCHERS
    # A verdict link's expiry in other digits: refused as a bad link (was a 500).
    r = svc.client.get("/verdict/1", params={"exp": "\u00b2", "sig": "x"})
    assert r.status_code == 403, r.text
    svc.stop()
