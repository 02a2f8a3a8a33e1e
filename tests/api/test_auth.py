"""Scoped bearer tokens: the store (hashed at rest, revocation, expiry, last use) and the route
dependencies, through a small app wired the way the service's routes are."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.api import problems
from service.api.auth import ApiAuth, Reader, TokenStore
from service.api.guards import Admin, IdempotentOperate, Operator
from service.api.principals import Permission, Principal
from service.settings import ApiSettings
from tests.support.fleet import T0, ManualClock


def make_app(auth: ApiAuth | None) -> FastAPI:
    """A read route, an operate and an admin route, and an idempotent operate route that
    counts its runs (app.state.runs)."""
    app = FastAPI()
    problems.install(app)  # errors as problem details, as create_app does
    app.state.gpuhealth_auth = auth
    app.state.runs = 0

    def who(p: Principal) -> dict[str, str]:
        return {"id": p.token_id, "name": p.name, "scope": str(p.scope)}

    @app.get("/read")
    async def read(p: Reader) -> dict[str, str]:
        return who(p)

    @app.post("/operate")
    async def operate(p: Operator) -> dict[str, str]:
        return who(p)

    @app.post("/admin")
    async def admin(p: Admin) -> dict[str, str]:
        return who(p)

    @app.post("/items", status_code=201)
    async def items(body: dict[str, int], idem: IdempotentOperate) -> object:
        def create() -> dict[str, int]:
            app.state.runs += 1
            return {"n": app.state.runs, **body}

        return await idem.run(create, status_code=201)

    return app


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def auth(state_target: str, clock: ManualClock) -> Iterator[ApiAuth]:
    a = ApiAuth.open(state_target, ApiSettings(), clock=clock)
    yield a
    a.close()


@pytest.fixture
def client(auth: ApiAuth) -> Iterator[TestClient]:
    with TestClient(make_app(auth)) as c:
        yield c


def test_scopes_are_ordered_levels() -> None:
    assert Permission.READ < Permission.OPERATE < Permission.ADMIN
    assert Permission.parse("Operate") is Permission.OPERATE and str(Permission.ADMIN) == "admin"
    with pytest.raises(ValueError, match="unknown scope 'root'"):
        Permission.parse("root")


def test_a_mutating_route_refuses_a_request_without_a_token(client: TestClient) -> None:
    r = client.post("/operate")
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", [
    "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Token ghk_0123456789ab_x", "Bearer a b",
    "Bearerghk_0123456789ab_x", "Bearer ghk_0123456789ab_\u00e9",
])
def test_a_malformed_authorization_header_is_refused_without_echoing_it(
        client: TestClient, header: str) -> None:
    r = client.post("/operate", headers={b"Authorization": header.encode()})
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert "0123456789ab" not in r.text and "dXNlcjpwYXNz" not in r.text


def test_unknown_and_wrong_tokens_are_refused_without_echoing_them(
        client: TestClient, auth: ApiAuth) -> None:
    _, secret = auth.tokens.create("ci", "operate", T0)
    wrong = secret[:-4] + ("AAAA" if not secret.endswith("AAAA") else "BBBB")
    unknown = "ghk_ffffffffffff_" + secret.split("_", 2)[2]
    for presented in (wrong, unknown, "not-a-token", secret[: len(secret) // 2]):
        r = client.post("/operate", headers=bearer(presented))
        assert r.status_code == 401, presented
        assert 'error="invalid_token"' in r.headers["www-authenticate"]
        assert presented not in r.text


def test_a_token_of_a_lower_scope_is_forbidden(client: TestClient, auth: ApiAuth) -> None:
    _, read = auth.tokens.create("dashboard", Permission.READ, T0)
    _, operate = auth.tokens.create("oncall", Permission.OPERATE, T0)
    for path, secret, needs in (("/operate", read, "operate"), ("/admin", read, "admin"),
                                ("/admin", operate, "admin"), ("/items", read, "operate")):
        r = client.post(path, headers=bearer(secret), json={})
        assert r.status_code == 403, (path, r.text)
        assert f'scope="{needs}"' in r.headers["www-authenticate"]
        assert secret not in r.text


def test_each_scope_passes_its_routes_and_the_lower_ones(client: TestClient,
                                                         auth: ApiAuth) -> None:
    secrets = {s: auth.tokens.create(f"{s}-token", s, T0)[1] for s in Permission}
    allowed = {"/read": Permission.READ, "/operate": Permission.OPERATE, "/admin": Permission.ADMIN}
    for path, needs in allowed.items():
        for scope, secret in secrets.items():
            method = client.get if path == "/read" else client.post
            r = method(path, headers=bearer(secret))
            assert r.status_code == (200 if scope >= needs else 403), (path, scope)
            if r.status_code == 200:
                assert r.json()["name"] == f"{scope}-token"
                assert r.json()["scope"] == str(scope)


def test_a_revoked_token_is_refused_at_once(client: TestClient, auth: ApiAuth,
                                            clock: ManualClock) -> None:
    token, secret = auth.tokens.create("oncall", "admin", T0)
    assert client.post("/operate", headers=bearer(secret)).status_code == 200
    clock.now += 10
    revoked = auth.tokens.revoke(token.id, clock.now)
    assert revoked is not None and revoked.revoked_at == clock.now
    r = client.post("/operate", headers=bearer(secret))
    assert r.status_code == 401
    assert auth.tokens.revoke(token.id, clock.now + 5) == revoked  # the first time stays
    assert auth.tokens.revoke("000000000000", clock.now) is None


def test_a_token_works_until_it_expires(client: TestClient, auth: ApiAuth,
                                        clock: ManualClock) -> None:
    _, secret = auth.tokens.create("temp", "operate", T0, expires_at=T0 + 3600)
    clock.now = T0 + 3599
    assert client.post("/operate", headers=bearer(secret)).status_code == 200
    clock.now = T0 + 3600
    assert client.post("/operate", headers=bearer(secret)).status_code == 401
    with pytest.raises(ValueError, match="future"):
        auth.tokens.create("late", "read", T0, expires_at=T0)


def test_reads_are_open_by_default_but_a_sent_token_is_still_checked(
        client: TestClient) -> None:
    r = client.get("/read")
    assert r.status_code == 200 and r.json() == {"id": "", "name": "anonymous",
                                                 "scope": "read"}
    assert client.get("/read", headers=bearer("ghk_ffffffffffff_nope")).status_code == 401


def test_reads_need_a_token_when_settings_say_so(tmp_path: Path) -> None:
    auth = ApiAuth.open(tmp_path / "api.db", ApiSettings(read_requires_token=True))
    try:
        _, secret = auth.tokens.create("grafana", "read", T0)
        with TestClient(make_app(auth)) as c:
            assert c.get("/read").status_code == 401
            assert c.get("/read", headers=bearer(secret)).status_code == 200
    finally:
        auth.close()


def test_without_api_auth_on_the_app_guarded_routes_fail_closed() -> None:
    with TestClient(make_app(None)) as c:
        assert c.post("/operate").status_code == 503
        assert c.get("/read").status_code == 503


def test_tokens_are_stored_hashed(tmp_path: Path) -> None:
    path = tmp_path / "tokens.db"
    store = TokenStore(path)
    token, secret = store.create("ci", "operate", T0)
    store.close()
    assert secret.startswith(f"ghk_{token.id}_")
    raw = secret.split("_", 2)[2]
    assert len(raw) >= 43  # 32 random bytes, base64url
    # Every file SQLite wrote (the WAL included) lacks the secret; the table has its SHA-256.
    blobs = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert raw.encode() not in blobs and secret.encode() not in blobs
    with sqlite3.connect(path) as db:
        (stored,) = db.execute("SELECT secret_sha256 FROM api_tokens").fetchone()
    assert stored == hashlib.sha256(raw.encode()).hexdigest()


def test_list_shows_no_secrets_and_tracks_last_use(state_target: str) -> None:
    store = TokenStore(state_target)
    token, secret = store.create("ci", "operate", T0)
    assert store.list() == [token] and token.last_used_at is None
    assert "secret" not in " ".join(token.as_dict())
    assert store.authenticate(secret, T0 + 5) == Principal(token.id, "ci", Permission.OPERATE)
    assert store.list()[0].last_used_at == T0 + 5
    store.authenticate(secret, T0 + 10)  # within the resolution: not rewritten
    assert store.list()[0].last_used_at == T0 + 5
    store.authenticate(secret, T0 + 100)
    assert store.list()[0].last_used_at == T0 + 100
    store.authenticate(secret + "x", T0 + 500)  # a wrong token is no use
    assert store.list()[0].last_used_at == T0 + 100
    store.close()


def test_a_token_store_refuses_bad_input(state_target: str) -> None:
    store = TokenStore(state_target)
    with pytest.raises(ValueError, match="unknown scope"):
        store.create("ci", "superuser", T0)
    with pytest.raises(ValueError, match="name"):
        store.create("  ", "read", T0)
    assert store.list() == []
    store.close()


def test_replicas_share_tokens_and_a_revoke_is_seen_at_once(state_target: str) -> None:
    """Two replicas on one shared state: a token made on one works on the other, and a
    revoke on either refuses it on both."""
    one, two = TokenStore(state_target), TokenStore(state_target)
    token, secret = one.create("ci", "operate", T0)
    assert two.authenticate(secret, T0 + 1) == Principal(token.id, "ci", Permission.OPERATE)
    assert one.get(token.id) == two.get(token.id) and one.list()[0].last_used_at == T0 + 1
    revoked = two.revoke(token.id, T0 + 2)
    assert revoked is not None and revoked.revoked_at == T0 + 2
    assert one.authenticate(secret, T0 + 3) is None
    one.close()
    two.close()
