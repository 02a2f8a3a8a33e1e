"""Failed authentications cost the client that fails: past a burst, a credential that keeps
failing is answered 429 with Retry-After (its budget refills with time), and an address that
keeps presenting new wrong write tokens is answered 429 for any write token not seen passing.
A valid API token, a write token already at work and a read without a token pass whatever
others at the same address do; the limiter's tables stay bounded."""

from __future__ import annotations

from fastapi.testclient import TestClient
from pydantic import SecretStr

from service.api.app import create_app
from service.api.ratelimit import RateLimiter
from service.settings import Settings
from tests.support.fleet import T0, ManualClock


class WallClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _limited(settings: Settings, tokens: tuple[str, ...] = ()) -> Settings:
    return settings.model_copy(update={
        "api": settings.api.model_copy(update={"auth_failures_per_min": 6.0,
                                               "auth_failures_burst": 3}),
        "ingest": settings.ingest.model_copy(
            update={"tokens": [SecretStr(t) for t in tokens]})})


def test_a_failing_token_is_limited_and_its_neighbours_are_not(settings: Settings) -> None:
    wall = WallClock(T0)
    app = create_app(_limited(settings), clock=ManualClock(T0), schedule=False, wall_clock=wall)
    with TestClient(app) as client:
        _, good = app.state.gpuhealth_auth.tokens.create("ops", "admin", T0)
        bad = {"Authorization": "Bearer ghk_nope_guess"}
        codes = [client.post("/v1/breaker/reset", headers=bad).status_code for _ in range(5)]
        assert codes == [401, 401, 401, 429, 429]
        assert int(client.get("/v1/alerts", headers=bad).headers["Retry-After"]) >= 1
        # the same address, meanwhile: a valid token, a read without one, another credential
        ok = {"Authorization": f"Bearer {good}"}
        assert client.post("/v1/breaker/reset", headers=ok).status_code == 200
        assert client.get("/v1/alerts").status_code == 200
        other = {"Authorization": "Bearer ghk_000000000000_" + "B" * 43}
        assert client.get("/v1/alerts", headers=other).status_code == 401
        malformed = {"Authorization": "Basic x"}
        assert [client.get("/v1/alerts", headers=malformed).status_code
                for _ in range(4)] == [401, 401, 401, 429]
        wall.now += 10  # 6 a minute: one more try after 10 s
        assert client.post("/v1/breaker/reset", headers=bad).status_code == 401
        assert client.post("/v1/breaker/reset", headers=bad).status_code == 429


def test_a_stale_write_token_locks_out_only_itself(settings: Settings) -> None:
    app = create_app(_limited(settings, tokens=("agent-token", "other-token")),
                     clock=ManualClock(T0), schedule=False, wall_clock=WallClock(T0))
    line = f"gpu,host=n1,gpu=0 gpu_temp=50 {int(T0 * 1e9)}"
    with TestClient(app) as client:
        stale = {"Authorization": "Token old-token"}
        codes = [client.post("/write", content=line, headers=stale).status_code
                 for _ in range(6)]
        assert codes == [401, 401, 401, 429, 429, 429]
        for token in ("agent-token", "other-token"):  # never seen before, from that address
            r = client.post("/write", content=line, headers={"Authorization": f"Token {token}"})
            assert r.status_code == 204, r.text


def test_guessing_write_tokens_holds_only_tokens_not_seen_passing(settings: Settings) -> None:
    app = create_app(_limited(settings, tokens=("agent-token", "other-token")),
                     clock=ManualClock(T0), schedule=False, wall_clock=WallClock(T0))
    line = f"gpu,host=n1,gpu=0 gpu_temp=50 {int(T0 * 1e9)}"
    with TestClient(app) as client:
        agent = {"Authorization": "Token agent-token"}
        assert client.post("/write", content=line, headers=agent).status_code == 204
        codes = [client.post("/write", content=line,
                             headers={"Authorization": f"Token guess-{i}"}).status_code
                 for i in range(5)]
        assert codes == [401, 401, 401, 429, 429]
        # A right guess now would be answered like a wrong one: no oracle for the guesser...
        guess = client.post("/write", content=line, headers={"Authorization": "Token other-token"})
        assert guess.status_code == 429
        # ...while the agent already at work goes on, and so do v1 clients' passwords.
        assert client.post("/write", content=line, headers=agent).status_code == 204
        assert client.post("/write?u=x&p=agent-token", content=line).status_code == 204


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
