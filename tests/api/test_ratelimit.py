"""Rate limits on mutating routes: a token bucket per token, 429 with Retry-After past the
burst, refilled as the injected clock moves; reads are not limited."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI, Response
from fastapi.testclient import TestClient

from service.api import problems
from service.api.auth import ApiAuth
from service.api.guards import IdempotentOperate, Operator
from service.api.ratelimit import RateLimiter
from service.settings import ApiSettings
from tests.api.test_auth import bearer, make_app
from tests.support.fleet import T0, ManualClock

PER_MIN = 6.0  # one request every 10 s
BURST = 3


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def auth(state_target: str, clock: ManualClock) -> Iterator[ApiAuth]:
    settings = ApiSettings(rate_limit_per_min=PER_MIN, rate_limit_burst=BURST)
    a = ApiAuth.open(state_target, settings, clock=clock)
    yield a
    a.close()


@pytest.fixture
def client(auth: ApiAuth) -> Iterator[TestClient]:
    with TestClient(make_app(auth)) as c:
        yield c


def test_past_the_burst_a_token_gets_429_until_the_bucket_refills(
        client: TestClient, auth: ApiAuth, clock: ManualClock) -> None:
    secret = auth.tokens.create("script", "operate", T0)[1]
    for _ in range(BURST):
        assert client.post("/operate", headers=bearer(secret)).status_code == 200
    r = client.post("/operate", headers=bearer(secret))
    assert r.status_code == 429
    assert r.headers["retry-after"] == "10"
    assert secret not in r.text
    clock.now += 4
    r = client.post("/operate", headers=bearer(secret))
    assert r.status_code == 429 and r.headers["retry-after"] == "6"
    clock.now += 6
    assert client.post("/operate", headers=bearer(secret)).status_code == 200
    assert client.post("/operate", headers=bearer(secret)).status_code == 429
    clock.now += 3600  # a long pause refills to the burst, no further
    codes = [client.post("/operate", headers=bearer(secret)).status_code
             for _ in range(BURST + 1)]
    assert codes == [200] * BURST + [429]


def test_each_token_has_its_own_bucket_and_reads_are_not_limited(
        client: TestClient, auth: ApiAuth) -> None:
    a = auth.tokens.create("a", "admin", T0)[1]
    b = auth.tokens.create("b", "operate", T0)[1]
    for _ in range(BURST):
        client.post("/admin", headers=bearer(a))
    assert client.post("/operate", headers=bearer(a)).status_code == 429
    assert client.post("/operate", headers=bearer(b)).status_code == 200
    for _ in range(2 * BURST):
        assert client.get("/read", headers=bearer(a)).status_code == 200


def test_refused_requests_are_not_charged(client: TestClient, auth: ApiAuth) -> None:
    secret = auth.tokens.create("viewer", "read", T0)[1]
    for _ in range(2 * BURST):
        assert client.post("/operate", headers=bearer(secret)).status_code == 403
        assert client.post("/operate").status_code == 401


def test_auth_rate_limit_and_idempotency_charge_a_request_once(auth: ApiAuth) -> None:
    app = FastAPI()
    problems.install(app)  # errors as problem details, as create_app does
    app.state.gpuhealth_auth = auth

    @app.post("/both")
    async def both(who: Operator, idem: IdempotentOperate) -> Response:
        return await idem.run(lambda: {"who": who.name})

    secret = auth.tokens.create("ops", "operate", T0)[1]
    with TestClient(app) as c:
        codes = [c.post("/both", headers=bearer(secret)).status_code for _ in range(BURST + 1)]
    assert codes == [200] * BURST + [429]


def test_the_bucket_arithmetic() -> None:
    clock = ManualClock(100.0)
    limiter = RateLimiter(per_min=30, burst=2, clock=clock)  # one every 2 s
    assert limiter.acquire("k") == 0 and limiter.acquire("k") == 0
    assert limiter.acquire("k") == pytest.approx(2.0)
    clock.now += 0.5
    assert limiter.acquire("k") == pytest.approx(1.5)
    clock.now -= 50  # a clock stepped back neither refills nor drains
    assert limiter.acquire("k") == pytest.approx(1.5)
    clock.now += 1.5
    assert limiter.acquire("k") == 0
    assert limiter.acquire("other") == 0
    with pytest.raises(ValueError):
        RateLimiter(per_min=0, burst=1)
