"""Idempotency-Key on mutating routes, as the IETF draft has it: a repeat replays the kept
response without running the handler, a different request with the key is 422, one while the
first still runs is 409, malformed keys are 400, keys are per token and expire."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated

import pytest
from fastapi import Depends, FastAPI, Response
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from service.api import problems
from service.api.auth import ApiAuth
from service.api.guards import IdempotentOperate, idempotent
from service.api.idempotency import (
    IN_FLIGHT_MAX_S,
    REPLAYED,
    Begin,
    Idempotency,
    IdempotencyStore,
    Stored,
    fingerprint,
    parse_key,
)
from service.settings import ApiSettings
from tests.support.fleet import T0, ManualClock

TTL = 3600.0


class Handler:
    """A route's work: counts its runs, and can be held mid-run or made to fail."""

    def __init__(self) -> None:
        self.runs = 0
        self.started = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.fail = False

    def __call__(self, body: dict[str, str]) -> dict[str, object]:
        self.runs += 1
        self.started.set()
        assert self.release.wait(10)
        if self.fail:
            raise RuntimeError("the backend is down")
        return {"id": self.runs, **body}


def make_app(auth: ApiAuth, h: Handler) -> FastAPI:
    app = FastAPI()
    problems.install(app)  # errors as problem details, as create_app does
    app.state.gpuhealth_auth = auth

    @app.post("/silences", status_code=201)
    async def create(body: dict[str, str], idem: IdempotentOperate) -> Response:
        return await idem.run(lambda: h(body), status_code=201)

    @app.post("/other", status_code=201)
    async def other(body: dict[str, str], idem: IdempotentOperate) -> Response:
        return await idem.run(lambda: h(body), status_code=201)

    @app.post("/strict")
    async def strict(
            idem: Annotated[Idempotency, Depends(idempotent("operate", required=True))],
    ) -> Response:
        async def work() -> dict[str, int]:
            h.runs += 1
            return {"runs": h.runs}

        return await idem.run(work)

    @app.post("/located")
    async def located(idem: IdempotentOperate) -> Response:
        def work() -> Response:
            h.runs += 1
            return JSONResponse({"runs": h.runs}, status_code=202, headers={"Location": "/x/1"})

        return await idem.run(work)

    @app.post("/flaky")
    async def flaky(idem: IdempotentOperate) -> Response:
        def work() -> Response:
            h.runs += 1
            return JSONResponse({"error": "try later"}, status_code=503)

        return await idem.run(work)

    @app.delete("/silences/1", status_code=204)
    async def expire(idem: IdempotentOperate) -> Response:
        def work() -> None:
            h.runs += 1

        return await idem.run(work, status_code=204)

    return app


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def auth(state_target: str, clock: ManualClock) -> Iterator[ApiAuth]:
    a = ApiAuth.open(state_target, ApiSettings(idempotency_ttl_s=TTL,
                                                      rate_limit_burst=1000), clock=clock)
    yield a
    a.close()


@pytest.fixture
def handler() -> Handler:
    return Handler()


@pytest.fixture
def client(auth: ApiAuth, handler: Handler) -> Iterator[TestClient]:
    with TestClient(make_app(auth, handler)) as c:
        yield c


@pytest.fixture
def token(auth: ApiAuth) -> str:
    return auth.tokens.create("oncall", "operate", T0)[1]


def hdrs(token: str, key: str | None = None) -> dict[str, str]:
    out = {"Authorization": f"Bearer {token}"}
    if key is not None:
        out["Idempotency-Key"] = key
    return out


def test_a_repeat_replays_the_first_response_without_running_again(
        client: TestClient, handler: Handler, token: str) -> None:
    first = client.post("/silences", json={"comment": "maint"}, headers=hdrs(token, "k-1"))
    assert first.status_code == 201 and first.json() == {"id": 1, "comment": "maint"}
    assert REPLAYED.lower() not in first.headers
    again = client.post("/silences", json={"comment": "maint"}, headers=hdrs(token, "k-1"))
    assert again.status_code == 201
    assert again.content == first.content
    assert again.headers["content-type"] == "application/json"
    assert again.headers[REPLAYED] == "true"
    assert handler.runs == 1
    # The draft's structured-field form, quoted, is the same key.
    quoted = client.post("/silences", json={"comment": "maint"}, headers=hdrs(token, '"k-1"'))
    assert quoted.json() == first.json() and handler.runs == 1


def test_requests_without_a_key_just_run(client: TestClient, handler: Handler,
                                         token: str) -> None:
    for n in (1, 2):
        r = client.post("/silences", json={"comment": "x"}, headers=hdrs(token))
        assert r.status_code == 201 and r.json()["id"] == n
    assert handler.runs == 2


def test_a_key_reused_for_a_different_request_is_422(client: TestClient, handler: Handler,
                                                     token: str) -> None:
    assert client.post("/silences", json={"comment": "a"},
                       headers=hdrs(token, "k")).status_code == 201
    r = client.post("/silences", json={"comment": "b"}, headers=hdrs(token, "k"))
    assert r.status_code == 422 and "different request" in r.json()["detail"]
    assert client.post("/other", json={"comment": "a"},
                       headers=hdrs(token, "k")).status_code == 422
    assert handler.runs == 1


def test_a_repeat_while_the_first_runs_is_409(client: TestClient, handler: Handler,
                                              token: str) -> None:
    handler.release.clear()
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(client.post, "/silences", json={"comment": "slow"},
                            headers=hdrs(token, "k"))
        assert handler.started.wait(10)  # the first request is inside its handler, held
        r = client.post("/silences", json={"comment": "slow"}, headers=hdrs(token, "k"))
        assert r.status_code == 409 and "in progress" in r.json()["detail"]
        handler.release.set()
        assert first.result(10).status_code == 201
    r = client.post("/silences", json={"comment": "slow"}, headers=hdrs(token, "k"))
    assert r.status_code == 201 and r.headers[REPLAYED] == "true"
    assert handler.runs == 1


@pytest.mark.parametrize("key", ["", "   ", '""', "x" * 256])
def test_a_malformed_key_is_400(client: TestClient, handler: Handler, token: str,
                                key: str) -> None:
    r = client.post("/silences", json={"comment": "x"}, headers=hdrs(token, key))
    assert r.status_code == 400 and "Idempotency-Key" in r.json()["detail"]
    assert handler.runs == 0


def test_key_parsing() -> None:
    assert parse_key([]) is None
    assert parse_key(["x" * 255]) == "x" * 255
    assert parse_key(['"a\\"b"']) == 'a"b'
    for bad in (["a", "b"], ["caf\u00e9"], ["a\tb"]):
        with pytest.raises(ValueError):
            parse_key(bad)


def test_a_route_may_require_a_key(client: TestClient, handler: Handler, token: str) -> None:
    r = client.post("/strict", headers=hdrs(token))
    assert r.status_code == 400 and "needs an Idempotency-Key" in r.json()["detail"]
    assert client.post("/strict", headers=hdrs(token, "s")).json() == {"runs": 1}
    assert client.post("/strict", headers=hdrs(token, "s")).json() == {"runs": 1}
    assert handler.runs == 1


def test_keys_are_per_token(client: TestClient, auth: ApiAuth, handler: Handler,
                            token: str) -> None:
    other = auth.tokens.create("someone else", "admin", T0)[1]
    a = client.post("/silences", json={"comment": "x"}, headers=hdrs(token, "shared"))
    b = client.post("/silences", json={"comment": "x"}, headers=hdrs(other, "shared"))
    assert a.json()["id"] == 1 and b.json()["id"] == 2
    assert REPLAYED.lower() not in b.headers


def test_keys_expire_after_the_ttl(client: TestClient, clock: ManualClock, handler: Handler,
                                   token: str) -> None:
    client.post("/silences", json={"comment": "a"}, headers=hdrs(token, "k"))
    clock.now = T0 + TTL - 1
    assert client.post("/silences", json={"comment": "b"},
                       headers=hdrs(token, "k")).status_code == 422
    clock.now = T0 + TTL
    r = client.post("/silences", json={"comment": "b"}, headers=hdrs(token, "k"))
    assert r.status_code == 201 and r.json() == {"id": 2, "comment": "b"}


def test_a_failed_request_releases_its_key(client: TestClient, handler: Handler,
                                           token: str) -> None:
    handler.fail = True
    with pytest.raises(RuntimeError, match="backend"):
        client.post("/silences", json={"comment": "x"}, headers=hdrs(token, "k"))
    handler.fail = False
    r = client.post("/silences", json={"comment": "x"}, headers=hdrs(token, "k"))
    assert r.status_code == 201 and REPLAYED.lower() not in r.headers
    assert handler.runs == 2
    # A 5xx answer is not kept either: the retry runs.
    assert client.post("/flaky", headers=hdrs(token, "f")).status_code == 503
    assert client.post("/flaky", headers=hdrs(token, "f")).status_code == 503
    assert handler.runs == 4


def test_a_response_the_route_built_is_replayed_with_its_headers(
        client: TestClient, handler: Handler, token: str) -> None:
    first = client.post("/located", headers=hdrs(token, "l"))
    again = client.post("/located", headers=hdrs(token, "l"))
    assert first.status_code == again.status_code == 202
    assert again.headers["location"] == "/x/1" and again.json() == {"runs": 1}
    gone = client.delete("/silences/1", headers=hdrs(token, "d"))
    assert gone.status_code == 204 and gone.content == b""
    again = client.delete("/silences/1", headers=hdrs(token, "d"))
    assert again.status_code == 204 and again.headers[REPLAYED] == "true"
    assert handler.runs == 2


def test_a_restart_forgets_requests_in_flight_but_keeps_finished_ones(state_target: str) -> None:
    fp = fingerprint("POST", "/silences", "", b"{}")
    store = IdempotencyStore(state_target, TTL)
    assert store.begin("tok", "running", fp, T0) is Begin.STARTED
    assert store.begin("tok", "running", fp, T0) is Begin.IN_PROGRESS
    assert store.begin("tok", "done", fp, T0) is Begin.STARTED
    store.finish("tok", "done", Stored(201, [("content-type", "application/json")], b"{}"))
    store.close()
    if not state_target.startswith("postgresql://"):
        store = IdempotencyStore(state_target, TTL)  # alone on its file: nothing in flight
    else:
        # Shared by replicas, a request in flight may be another replica's: it is kept ...
        store = IdempotencyStore(state_target, TTL, now=T0 + 1)
        assert store.begin("tok", "running", fp, T0 + 1) is Begin.IN_PROGRESS
        store.close()
        # ... until it has run far longer than any request: then it was cut off.
        store = IdempotencyStore(state_target, TTL, now=T0 + IN_FLIGHT_MAX_S + 1)
    assert store.begin("tok", "running", fp, T0 + 1) is Begin.STARTED
    assert store.begin("tok", "done", fp, T0 + 1) == Stored(
        201, [("content-type", "application/json")], b"{}")
    store.close()


def test_the_fingerprint_covers_method_target_and_body() -> None:
    base = fingerprint("POST", "/a", "", b"{}")
    assert base == fingerprint("post", "/a", "", b"{}")
    others = {fingerprint("PUT", "/a", "", b"{}"), fingerprint("POST", "/b", "", b"{}"),
              fingerprint("POST", "/a", "x=1", b"{}"), fingerprint("POST", "/a", "", b"[]")}
    assert base not in others and len(others) == 4
    # The same JSON, serialised otherwise, is the same request; other content is not.
    body = fingerprint("POST", "/a", "", b'{"a": 1, "b": [1, 2]}')
    assert body == fingerprint("POST", "/a", "", b'{ "b":[1,2],\n "a":1 }')
    assert body != fingerprint("POST", "/a", "", b'{"a": 2, "b": [1, 2]}')
    assert fingerprint("POST", "/a", "", b"not json") != fingerprint("POST", "/a", "", b"not  json")
