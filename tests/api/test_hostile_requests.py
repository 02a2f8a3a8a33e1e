"""Requests that answered 500 (issue 29, defect 10) answer 4xx through the real app: ids, cursor
keys and GPU indices past a store's 64-bit integers, NaN and Infinity in JSON bodies; and
cursors are signed with the fleet's key, so one cannot be made by hand (bench.fuzz_api sends
these classes in bulk)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from bench.fuzz_api import hostile_requests
from service.api import cursor_key
from service.api.app import create_app
from service.api.paging import encode
from service.settings import Settings
from tests.support.fleet import STEP, T0, Fleet, FleetCollector, ManualClock

HUGE = ["99999999999999999999", "-99999999999999999999", str(10**30), str(2**63)]


class Svc:
    def __init__(self, client: TestClient, headers: dict[str, str], state: Path | str) -> None:
        self.client, self.headers, self.state = client, headers, state

    def call(self, method: str, url: str, body: Any = None) -> Any:
        content = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        return self.client.request(method, url, content=content, headers={
            **self.headers, "Content-Type": "application/json"})


@pytest.fixture
def svc(settings: Settings) -> Iterator[Svc]:
    fleet, clock = Fleet({"n001": 4, "n002": 4}), ManualClock(T0)
    app = create_app(settings, clock=clock, schedule=False,
                     collectors=[FleetCollector(fleet, clock)])
    with TestClient(app) as client:
        st = app.state.gpuhealth
        token = app.state.gpuhealth_auth.tokens.create("fuzz", "admin", clock())[1]
        for _ in range(2):
            st.scheduler.collect_once("fleet")
            st.scheduler.score_once()
            clock.now += STEP
            fleet.set("n001:gpu2", "ecc_dbe_volatile", 1)
        yield Svc(client, {"Authorization": f"Bearer {token}"},
                  settings.storage.state_target)


@pytest.mark.slow
@pytest.mark.parametrize("n", HUGE)
def test_ids_past_64_bits_are_422_on_every_alert_route(svc: Svc, n: str) -> None:
    for method, url, body in [
            ("GET", f"/v1/alerts/{n}", None), ("GET", f"/v1/alerts/{n}/verdicts", None),
            ("POST", f"/v1/alerts/{n}/ack", {"comment": "x"}),
            ("POST", f"/v1/alerts/{n}/verdict", {"verdict": "unknown"}),
            ("GET", f"/verdict/{n}", None), ("POST", f"/verdict/{n}", "exp=1&sig=x")]:
        r = svc.call(method, url, body)
        assert r.status_code == 422, (method, url, r.text)
        assert r.json()["type"] == "/problems/request-not-valid"
    assert svc.call("GET", "/v1/alerts/1").status_code == 200  # an id in range still works


@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["n001:gpu" + n for n in HUGE] + ["n001:gpu1e400", "n1:g:pu"])
def test_a_gpu_index_no_gpu_has_is_404(svc: Svc, gpu: str) -> None:
    r = svc.call("GET", f"/v1/gpus/{gpu}")
    assert r.status_code == 404 and "not a GPU key" in r.json()["detail"], r.text


@pytest.mark.slow
@pytest.mark.parametrize(("url", "body"), [
    ("/v1/alerts/1/verdict", '{"verdict": "failed", "mode": "M1_hbm", "failed_at": NaN}'),
    ("/v1/alerts/1/verdict", '{"verdict": "failed", "mode": "M1_hbm", "failed_at": Infinity}'),
    ("/v1/alerts/1/ack", '{"comment": NaN}'),
    ("/v1/silences", '{"matchers": ["node=n001"], "comment": "m", "duration_s": NaN}'),
    ("/v1/silences", '{"matchers": ["node=n001"], "comment": "m", "duration_s": -Infinity}'),
])
def test_non_finite_numbers_in_a_body_are_422(svc: Svc, url: str, body: str) -> None:
    r = svc.call("POST", url, body)
    assert r.status_code == 422, r.text
    assert r.json()["type"].startswith("/problems/")


def _unkeyed(listing: str, key: list[Any]) -> str:
    """A cursor as the service made them before: an sha256 digest anyone can compute."""
    payload = json.dumps([listing, key], separators=(",", ":")).encode()
    raw = hashlib.sha256(payload).digest()[:8] + payload
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_cursors_cannot_be_forged(svc: Svc) -> None:
    real = svc.call("GET", "/v1/nodes?limit=1").json()["next_cursor"]
    assert real is not None and svc.call("GET", f"/v1/nodes?cursor={real}").status_code == 200
    raw = base64.urlsafe_b64decode(real + "=" * (-len(real) % 4))
    listing, key = json.loads(raw[raw.index(b'["'):])
    forged = [_unkeyed(listing, key), encode(listing, key, secret=b"guess" * 8)]
    for cursor in forged:
        r = svc.call("GET", f"/v1/nodes?cursor={cursor}")
        assert r.status_code == 400 and r.json()["type"] == "/problems/cursor-not-valid", r.text


@pytest.mark.slow
@pytest.mark.parametrize(("url", "key"), [
    ("/v1/alerts", [1.0, 10**20]), ("/v1/alerts", [1.0, -(2**63) - 1]),
    ("/v1/labels", [1.0, 10**20]), ("/v1/silences", [1e400, "x"]),
    ("/v1/nodes", [float("nan"), "n001"]),
])
def test_a_signed_cursor_with_a_key_out_of_range_is_400(svc: Svc, url: str,
                                                        key: list[Any]) -> None:
    """Even a cursor signed with the fleet's key (a shard of an older release) never takes a
    number past a store's range into a query."""
    secret = cursor_key.load(svc.state)
    listing = {"/v1/nodes": "nodes:risk:desc"}.get(url, url.rsplit("/", 1)[1])
    r = svc.call("GET", f"{url}?cursor={encode(listing, key, secret=secret)}")
    assert r.status_code == 400 and r.json()["type"] == "/problems/cursor-not-valid", r.text


def test_every_replica_on_one_state_signs_with_one_key(settings: Settings) -> None:
    """A cursor one service gave is taken by another on the same shared state (a shard a
    merged page's cursor is handed to, or the same service after a restart)."""
    fleet, clock = Fleet({f"n{i:03d}": 1 for i in range(5)}), ManualClock(T0)

    def app() -> Any:
        return create_app(settings, clock=clock, schedule=False,
                          collectors=[FleetCollector(fleet, clock)])

    first = app()
    with TestClient(first) as a:
        first.state.gpuhealth.scheduler.collect_once("fleet")
        cursor = a.get("/v1/nodes?limit=2").json()["next_cursor"]
        with TestClient(app()) as b:
            b.app.state.gpuhealth.scheduler.collect_once("fleet")  # type: ignore[attr-defined]
            r = b.get(f"/v1/nodes?limit=2&cursor={cursor}")
            assert r.status_code == 200, r.text
            assert [n["node"] for n in r.json()["nodes"]] == ["n002", "n003"]


@pytest.mark.slow
def test_the_fuzz_generator_finds_no_500(svc: Svc) -> None:
    """bench.fuzz_api's hostile requests, a few of each class, against this service."""
    seen: set[str] = set()
    for req in hostile_requests(seed=7, count=300):
        r = svc.call(req.method, req.path, req.body)
        assert r.status_code < 500, (req, r.status_code, r.text[:300])
        seen.add(req.kind)
    assert len(seen) >= 6
