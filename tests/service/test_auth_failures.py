"""Guessing tokens costs the guesser: past a burst of failed authentications, a client address
is answered 429 with Retry-After before any token is checked, and its budget refills with
time; other addresses and the limiter's table stay unaffected and bounded."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.ratelimit import RateLimiter
from service.settings import Settings
from tests.service.fleet import T0, ManualClock


class WallClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_failed_authentications_are_rate_limited_per_address(settings: Settings) -> None:
    s = settings.model_copy(update={"api": settings.api.model_copy(
        update={"auth_failures_per_min": 6.0, "auth_failures_burst": 3})})
    wall = WallClock(T0)
    app = create_app(s, clock=ManualClock(T0), schedule=False, wall_clock=wall)
    with TestClient(app) as client:
        _, good = app.state.gpuhealth_auth.tokens.create("ops", "admin", T0)
        bad = {"Authorization": "Bearer ghk_nope_guess"}
        codes = [client.post("/v1/breaker/reset", headers=bad).status_code for _ in range(5)]
        assert codes == [401, 401, 401, 429, 429]
        # while limited, even a right token from that address waits: nothing is checked
        ok = {"Authorization": f"Bearer {good}"}
        limited = client.post("/v1/breaker/reset", headers=ok)
        assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
        wall.now += 10  # 6 a minute: one more try after 10 s
        assert client.post("/v1/breaker/reset", headers=ok).status_code == 200


def test_the_address_table_is_bounded() -> None:
    clock = WallClock(0.0)
    lim = RateLimiter(60, 1, clock, max_keys=3)
    for i in range(10):
        clock.now += 1
        lim.acquire(f"10.0.0.{i}")
    assert len(lim._buckets) == 3 and "10.0.0.9" in lim._buckets


def test_authentication_comes_before_body_validation(settings: Settings) -> None:
    app = create_app(settings, clock=ManualClock(T0), schedule=False)
    with TestClient(app) as client:
        _, token = app.state.gpuhealth_auth.tokens.create("ops", "operate", T0)
        junk = {"content": b"{not json", "headers": {"Content-Type": "application/json"}}
        assert client.post("/v1/silences", **junk).status_code == 401  # type: ignore[arg-type]
        bad = {"Authorization": "Bearer ghk_nope_guess", "Content-Type": "application/json"}
        assert client.post("/v1/silences", content=b"{not json", headers=bad).status_code == 401
        good = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        r = client.post("/v1/silences", content=b"{not json", headers=good)
        assert r.status_code == 422 and "json" in r.text.lower()
