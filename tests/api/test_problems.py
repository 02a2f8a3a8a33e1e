"""One error body for the whole API: every error status a route can answer is a problem detail
(RFC 9457, `application/problem+json`) with its headers kept, and the InfluxDB endpoints keep
InfluxDB's `error` member, as `application/json`, beside the same members."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.errors import PROBLEM_JSON, GpuhealthError, NotFound, TooManyRequests
from service.history.history import HistoryUnavailable, NotStored, QueryError
from service.remediation.actions import ActionConflict, ActionNotFound
from service.settings import Settings
from tests.support.fleet import T0, ManualClock

MEMBERS = {"type", "title", "status", "detail", "instance"}
LIMIT = 2000  # write body limit


@dataclass
class Api:
    client: TestClient
    tokens: dict[str, str]

    def call(self, method: str, url: str, scope: str | None = None,
             **kw: Any) -> httpx.Response:
        headers = dict(kw.pop("headers", {}))
        if scope is not None:
            headers["Authorization"] = f"Bearer {self.tokens[scope]}"
        return self.client.request(method, url, headers=headers, **kw)


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    s = settings.model_copy(update={
        "remediation": type(settings.remediation)(mode="approve", hook="command",
                                                  hook_config={"drain": ["true"],
                                                               "release": ["true"]}),
        "api": type(settings.api)(rate_limit_burst=3, rate_limit_per_min=0.001),
        "ingest": type(settings.ingest)(max_body_bytes=LIMIT, tokens=["write-secret"]),
    })
    clock = ManualClock(T0)
    app = create_app(s, clock=clock, schedule=False)
    with TestClient(app) as client:
        auth = app.state.gpuhealth_auth
        tokens = {scope: auth.tokens.create(scope, scope, clock())[1]
                  for scope in ("read", "operate", "admin")}
        yield Api(client, tokens)


def problem(r: httpx.Response, status: int, slug: str | None = None) -> dict[str, Any]:
    """The body of a problem-detail answer, its five members checked."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM_JSON
    body: dict[str, Any] = r.json()
    assert set(body) >= MEMBERS, body
    assert body["status"] == status and body["instance"] == r.request.url.path
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    if slug is not None:
        assert body["type"] == f"/problems/{slug}"
    return body


def test_400_a_bad_history_question(api: Api) -> None:
    r = api.call("GET", "/v1/gpus/n001:gpu1/metrics", params={"metric": "gpu_tmp"})
    assert problem(r, 400, "bad-history-query")["detail"].startswith("unknown metric 'gpu_tmp'")
    r = api.call("POST", "/v1/breaker/reset", "admin", headers={"Idempotency-Key": "a\tb"})
    assert "printable ASCII" in problem(r, 400, "idempotency-key-invalid")["detail"]


def test_401_keeps_its_challenge(api: Api) -> None:
    r = api.call("POST", "/v1/breaker/reset")
    problem(r, 401, "unauthorized")
    assert r.headers["www-authenticate"] == 'Bearer realm="gpuhealth"'
    r = api.call("POST", "/v1/breaker/reset", headers={"Authorization": "Bearer ghk_nope"})
    assert problem(r, 401)["detail"] == "invalid, expired or revoked token"
    assert r.headers["www-authenticate"] == 'Bearer realm="gpuhealth", error="invalid_token"'


def test_403_names_the_scope_needed(api: Api) -> None:
    r = api.call("POST", "/v1/breaker/reset", "operate")
    assert "this needs admin" in problem(r, 403, "forbidden")["detail"]
    assert 'error="insufficient_scope"' in r.headers["www-authenticate"]


def test_404_a_domain_error_and_an_unknown_route(api: Api) -> None:
    r = api.call("GET", "/v1/alerts/999")
    assert problem(r, 404, "not-found")["detail"] == "alert 999 does not exist"
    r = api.call("POST", "/v1/actions/nope/approve", "operate")
    assert problem(r, 404, "action-not-found")["detail"] == "nope"
    # Not raised by any route: Starlette's own, still in the one format.
    body = problem(api.call("GET", "/v1/no-such-route"), 404)
    assert body["type"] == "about:blank" and body["title"] == "Not Found"


def test_405_keeps_its_allow_header(api: Api) -> None:
    r = api.call("PUT", "/v1/alerts")
    assert problem(r, 405)["type"] == "about:blank"
    assert "GET" in r.headers["allow"]


def test_409_an_action_conflict(api: Api) -> None:
    r = api.call("POST", "/v1/nodes/n001/release", "operate")
    body = problem(r, 409, "action-conflict")
    assert body["detail"] == "n001 is not drained by gpuhealth; not releasing"


def test_422_a_body_fastapi_cannot_read_and_a_domain_refusal(api: Api) -> None:
    r = api.call("POST", "/v1/silences", "operate", json={"matchers": ["node=n001"]})
    body = problem(r, 422, "request-not-valid")
    assert body["title"] == "Request not valid" and "body.comment" in body["detail"]
    assert [e["loc"] for e in body["errors"]] == [["body", "comment"]]
    r = api.call("POST", "/v1/silences", "operate",
                 json={"matchers": ["node=n001"], "comment": "x"})
    assert problem(r, 422, "unprocessable")["detail"] == "give exactly one of ends_at and " \
                                                          "duration_s"


def test_422_still_answers_authentication_first(api: Api) -> None:
    # A caller without a valid token learns nothing of the body schema: 401, not 422.
    r = api.call("POST", "/v1/silences", json={"matchers": "not a list"})
    problem(r, 401, "unauthorized")
    assert r.headers["www-authenticate"].startswith("Bearer")


def test_429_keeps_retry_after_and_says_it_as_a_member(api: Api) -> None:
    seen = [api.call("POST", "/v1/breaker/reset", "admin") for _ in range(4)]  # burst: 3
    assert [r.status_code for r in seen[:3]] == [200, 200, 200]
    r = seen[-1]
    body = problem(r, 429, "rate-limited")
    assert body["retry_after"] == int(r.headers["retry-after"]) >= 1
    assert "rate limit exceeded" in body["detail"]


def test_501_history_not_kept_here(api: Api) -> None:
    r = api.call("GET", "/v1/ports/n001:mlx5_0:1/metrics?metric=ib_ber")
    assert "kept only in InfluxDB" in problem(r, 501, "not-stored")["detail"]


def test_503_before_the_service_has_started(settings: Settings) -> None:
    client = TestClient(create_app(settings, schedule=False))  # no lifespan: nothing built
    r = client.get("/v1/alerts")
    assert "not configured yet" in problem(r, 503, "unavailable")["detail"]
    r = client.get("/readyz")
    assert problem(r, 503)["detail"] == "the service is starting or stopping"


def test_domain_errors_keep_their_builtin_bases() -> None:
    # Callers that catch LookupError, RuntimeError or ValueError still catch these.
    assert issubclass(ActionNotFound, LookupError) and issubclass(ActionConflict, RuntimeError)
    assert issubclass(QueryError, ValueError)
    for cls, status in ((ActionNotFound, 404), (ActionConflict, 409), (QueryError, 400),
                        (NotStored, 501), (HistoryUnavailable, 502)):
        assert issubclass(cls, GpuhealthError) and cls.status == status


def test_extension_members_never_replace_the_defined_ones() -> None:
    got = NotFound("gone", status=200, type="x").problem("/p")
    assert (got["status"], got["type"], got["detail"]) == (404, "/problems/not-found", "gone")
    busy = TooManyRequests("slow down", retry_after=7)
    assert busy.headers == {"Retry-After": "7"} and busy.problem("/p")["retry_after"] == 7


# ---- the InfluxDB endpoints ------------------------------------------------------------------
WRITE = {"Authorization": "Token write-secret"}


def influx_error(r: httpx.Response, status: int) -> dict[str, Any]:
    """InfluxDB's shape (what Telegraf and InfluxDB clients read), the problem members beside."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"  # clients parse only this
    body: dict[str, Any] = r.json()
    assert set(body) >= MEMBERS and body["status"] == status
    assert body["error"] == body["detail"]
    return body


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/write", "/v1/write", "/api/v2/write"])
def test_a_partial_write_is_influxdbs_400(api: Api, path: str) -> None:
    lines = "gpu,host=n001,gpu=0 gpu_temp=50\nnot line protocol\n"  # the server's time
    body = influx_error(api.call("POST", path, content=lines, headers=WRITE), 400)
    assert body["error"].startswith("partial write:") and body["error"].endswith("dropped=1")
    assert body["type"] == "/problems/partial-write"
    assert (body["accepted"], body["rejected"], body["truncated"]) == (1, 1, False)
    assert [x["line"] for x in body["rejections"]] == [2]


def test_write_refusals_keep_their_status_header_and_error(api: Api) -> None:
    r = api.call("POST", "/write", content="x")
    body = influx_error(r, 401)
    assert r.headers["www-authenticate"] == 'Token realm="gpuhealth"'
    assert (body["accepted"], body["rejected"], body["rejections"]) == (0, 0, [])
    body = influx_error(api.call("POST", "/write", content="x" * (LIMIT + 1), headers=WRITE),
                        413)
    assert str(LIMIT) in body["error"] and body["type"] == "/problems/payload-too-large"
    r = api.call("POST", "/write", content="x", headers={**WRITE, "Content-Encoding": "br"})
    assert "Content-Encoding" in influx_error(r, 415)["error"]
    r = api.call("POST", "/write", params={"precision": "fortnight"}, content="x",
                 headers=WRITE)
    assert influx_error(r, 422)["errors"][0]["loc"] == ["query", "precision"]


def test_query_refusals_keep_influxdbs_headers(api: Api) -> None:
    r = api.call("POST", "/query", params={"q": "CREATE DATABASE telegraf"})
    influx_error(r, 401)
    assert r.headers["www-authenticate"] == 'Basic realm="gpuhealth"'
    assert r.headers["x-influxdb-version"].startswith("1.")
    r = api.call("GET", "/query", params={"q": "SELECT 1"}, headers=WRITE)
    assert "CREATE DATABASE" in influx_error(r, 400)["error"]
    assert r.headers["x-influxdb-build"] == "OSS"
