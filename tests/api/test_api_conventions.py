"""The REST API's conventions through the real app: RFC 3339 timestamps (epoch seconds kept
only in time-series point arrays and the InfluxDB paths), one limit + cursor pagination on
every list, and an OpenAPI document that matches what the API answers (and the snapshot
committed under docs/)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, routing
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from bench import soak_verdict
from service.api import openapi, openapi_snapshot
from service.api.app import create_app
from service.api.state import Running
from service.api.timefmt import parse_instant, rfc3339
from service.errors import PROBLEM_JSON
from service.notify.receivers import webhook
from service.settings import Settings
from tests.support.fleet import STEP, T0, Fleet, FleetCollector, ManualClock
from tests.support.openapi_check import errors, response_schema

REPO = Path(__file__).resolve().parents[2]
NODES = {f"n{i:03d}": 2 for i in range(1, 8)}


@dataclass
class Svc:
    client: TestClient
    st: Running
    fleet: Fleet
    clock: ManualClock
    token: str
    doc: dict[str, Any]
    app: FastAPI

    def round(self) -> None:
        self.st.scheduler.collect_once("fleet")
        self.st.scheduler.score_once()
        self.clock.now += STEP

    def get(self, url: str, status: int = 200) -> Any:
        r = self.client.get(url, headers={"Authorization": f"Bearer {self.token}"})
        assert r.status_code == status, r.text
        return r.json()


@pytest.fixture
def svc(settings: Settings) -> Iterator[Svc]:
    s = settings.model_copy(update={"remediation": type(settings.remediation)(
        mode="approve", hook="command", hook_config={"drain": ["true"], "release": ["true"]},
        breaker_max_fraction=1.0)})
    fleet, clock = Fleet(NODES), ManualClock(T0)
    app = create_app(s, clock=clock, schedule=False, collectors=[FleetCollector(fleet, clock)])
    with TestClient(app) as client:
        token = app.state.gpuhealth_auth.tokens.create("op", "operate", clock())[1]
        svc = Svc(client, app.state.gpuhealth, fleet, clock, token,
                  client.get("/openapi.json").json(), app)
        svc.round()
        for node in ("n002", "n004", "n005"):  # three hard faults: three alerts
            fleet.set(f"{node}:gpu1", "ecc_dbe_volatile", 1)
        svc.round()
        yield svc


def walk(svc: Svc, url: str, items: str, limit: int) -> list[Any]:
    """Every item of a listing, page by page."""
    found: list[Any] = []
    sep = "&" if "?" in url else "?"
    body = svc.get(f"{url}{sep}limit={limit}")
    while True:
        assert body["limit"] == limit and len(body[items]) <= limit
        found += body[items]
        if body["next_cursor"] is None:
            return found
        assert len(body[items]) == limit  # only a full page has a next one
        body = svc.get(f"{url}{sep}limit={limit}&cursor={body['next_cursor']}")


# ---- timestamps -------------------------------------------------------------------------

def test_rfc3339_round_trips_and_parses_both_forms() -> None:
    assert rfc3339(T0) == "2023-11-14T22:00:00.000Z"
    assert rfc3339(T0 + 0.1234) == "2023-11-14T22:00:00.123Z"
    assert parse_instant("2023-11-14T22:00:00.123Z") == pytest.approx(T0 + 0.123)
    assert parse_instant("2023-11-15T00:00:00+02:00") == T0 and parse_instant(str(T0)) == T0
    for bad, why in (("yesterday", "neither"), ("2023-11-14T22:00:00", "no time zone"),
                     ("-5", "after 1970"), ("nan", "after 1970")):
        with pytest.raises(ValueError, match=why):
            parse_instant(bad)


def test_resource_timestamps_are_rfc3339_series_points_epoch(svc: Svc) -> None:
    alert = svc.get("/v1/alerts")["alerts"][0]
    assert alert["started_at"] == rfc3339(T0 + STEP) and alert["resolved_at"] is None
    assert svc.get(f"/v1/alerts/{alert['id']}")["history"][0]["at"] == rfc3339(T0 + STEP)
    metric = svc.get("/v1/gpus/n002:gpu1")["metrics"][0]
    assert metric["ts"] == rfc3339(T0 + STEP)
    assert svc.get("/v1/fleet")["at"] == rfc3339(T0 + STEP)
    hist = svc.get(f"/v1/gpus/n002:gpu1/metrics?metric=gpu_temp&from={rfc3339(T0)}"
                   f"&to={T0 + 2 * STEP}&step={STEP}")
    assert (hist["start"], hist["end"]) == (rfc3339(T0), rfc3339(T0 + 2 * STEP))
    assert hist["series"][0]["times"] == [T0, T0 + STEP]  # point arrays: epoch seconds
    action = svc.get("/v1/actions")["actions"][0]
    assert parse_instant(action["requested_at"]) == T0 + STEP
    assert action["deadline"] is None or parse_instant(action["deadline"]) > T0


def test_a_silence_takes_rfc3339_or_epoch_and_answers_rfc3339(svc: Svc) -> None:
    auth = {"Authorization": f"Bearer {svc.token}"}
    ends = rfc3339(svc.clock.now + 3600)
    for ends_at in (ends, svc.clock.now + 3600):
        r = svc.client.post("/v1/silences", headers=auth, json={
            "matchers": ["node=n002"], "comment": "swap", "ends_at": ends_at})
        assert r.status_code == 201, r.text
        assert r.json()["ends_at"] == ends
        assert r.json()["starts_at"] == rfc3339(svc.clock.now)
    r = svc.client.post("/v1/silences", headers=auth, json={
        "matchers": ["node=n002"], "comment": "swap", "ends_at": "tomorrow"})
    assert r.status_code == 422 and "neither epoch seconds nor RFC 3339" in r.text


# ---- pagination -------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("query", ["", "?sort=risk&order=asc", "?sort=node",
                                   "?sort=node&order=desc", "?sort=alerts"])
def test_nodes_page_through_every_ordering(svc: Svc, query: str) -> None:
    whole = [n["node"] for n in svc.get(f"/v1/nodes{query}")["nodes"]]
    assert sorted(whole) == sorted(NODES)
    for limit in (1, 2, 3, 7):
        assert [n["node"] for n in walk(svc, f"/v1/nodes{query}", "nodes", limit)] == whole


def test_every_list_pages_with_a_cursor(svc: Svc) -> None:
    for url, items, key in (("/v1/alerts", "alerts", "id"), ("/v1/fleet", "nodes", "node"),
                            ("/v1/actions", "actions", "id"), ("/v1/groups", "groups",
                                                               "group_key")):
        whole = [x[key] for x in svc.get(url)[items]]
        assert len(whole) >= 2, url
        assert [x[key] for x in walk(svc, url, items, 1)] == whole, url
    for _ in range(3):
        svc.client.post("/v1/silences", headers={"Authorization": f"Bearer {svc.token}"},
                        json={"matchers": ["node=n001"], "comment": "c", "duration_s": 60})
    whole = [x["id"] for x in svc.get("/v1/silences")["silences"]]
    assert len(whole) == 3 and [x["id"] for x in walk(svc, "/v1/silences", "silences", 2)] \
        == whole


def test_a_cursor_is_stable_when_items_arrive_meanwhile(svc: Svc) -> None:
    before = [a["id"] for a in svc.get("/v1/alerts")["alerts"]]
    first = svc.get("/v1/alerts?limit=2")
    svc.fleet.set("n007:gpu0", "ecc_dbe_volatile", 1)  # a newer alert lands before page 2
    svc.round()
    assert len(svc.get("/v1/alerts")["alerts"]) == len(before) + 1
    rest = svc.get(f"/v1/alerts?limit=100&cursor={first['next_cursor']}")["alerts"]
    # Neither repeated nor skipped: an offset would have handed page 1's last item again.
    assert [a["id"] for a in first["alerts"] + rest] == before


def test_bad_cursors_offset_and_limits_get_clear_problems(svc: Svc) -> None:
    cursor = svc.get("/v1/nodes?limit=1")["next_cursor"]
    raw = bytearray(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    raw[-3] ^= 1
    tampered = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    cases = [(f"/v1/nodes?cursor={tampered}", "altered"),
             ("/v1/nodes?cursor=%21%21", "not one this service gave"),
             (f"/v1/alerts?cursor={cursor}", "another listing"),
             (f"/v1/nodes?sort=node&cursor={cursor}", "another listing"),
             ("/v1/nodes?cursor=" + "A" * 40, "altered")]
    for url, why in cases:
        r = svc.client.get(url)
        assert r.status_code == 400 and r.headers["content-type"] == PROBLEM_JSON, r.text
        assert r.json()["type"] == "/problems/cursor-not-valid" and why in r.json()["detail"]
    r = svc.client.get("/v1/alerts?offset=10")
    assert r.status_code == 400 and r.json()["type"] == "/problems/offset-retired"
    assert "next_cursor" in r.json()["detail"]
    for url in ("/v1/alerts?limit=1001", "/v1/nodes?limit=0", "/v1/fleet?limit=5000"):
        r = svc.client.get(url)
        assert r.status_code == 422 and "limit" in r.json()["detail"], r.text


# ---- the OpenAPI document ---------------------------------------------------------------

def test_every_route_is_documented_with_its_methods(svc: Svc) -> None:
    documented = {(p, m) for p, item in svc.doc["paths"].items() for m in item}
    served, hidden = set(), set()
    for ctx in routing.iter_route_contexts(svc.app.routes):  # through included routers
        route = ctx.original_route
        methods = {m.lower() for m in ctx.methods or ()}
        if isinstance(route, APIRoute) and route.include_in_schema:
            served |= {(ctx.path, m) for m in methods}
        else:
            hidden.add(ctx.path)
    assert served == documented
    assert len(served) > 30
    # Only the console, the docs pages, their assets, the document itself and the page behind
    # a message's signed verdict link (an HTML form for people, not an API) are unlisted.
    assert hidden == {"/openapi.json", "/", "/console", "/docs", "/console/assets",
                      "/docs/assets", "/verdict/{alert_id}"}


@pytest.mark.slow
@pytest.mark.parametrize(("url", "path", "status"), [
    ("/v1/alerts?limit=2", "/v1/alerts", 200),
    ("/v1/gpus/n002:gpu1", "/v1/gpus/{gpu}", 200),
    ("/v1/nodes?limit=2&cursor=", "/v1/nodes", 200),
    ("/v1/fleet", "/v1/fleet", 200),
    ("/v1/nodes/n002", "/v1/nodes/{node}", 200),
    ("/v1/gpus/n002:gpu1/risk", "/v1/gpus/{gpu}/risk", 200),
    ("/v1/gpus/n999:gpu0", "/v1/gpus/{gpu}", 404),
    ("/v1/nodes?cursor=bogus", "/v1/nodes", 400),
    ("/v1/alerts/999", "/v1/alerts/{alert_id}", 404),
])
def test_live_answers_validate_against_the_document(svc: Svc, url: str, path: str,
                                                    status: int) -> None:
    if url.endswith("cursor="):  # the second page, as a client would ask for it
        url += svc.get("/v1/nodes?limit=2")["next_cursor"]
    r = svc.client.get(url, headers={"Authorization": f"Bearer {svc.token}"})
    assert r.status_code == status, r.text
    media, schema = response_schema(svc.doc, path, "get", status)  # declared, or KeyError
    assert r.headers["content-type"] == media
    assert errors(svc.doc, schema, r.json()) == []


def test_the_validator_finds_differences(svc: Svc) -> None:
    _, schema = response_schema(svc.doc, "/v1/alerts", "get", 200)
    body = svc.get("/v1/alerts")
    body["alerts"][0]["started_at"] = T0  # an epoch where the document says date-time
    body["alerts"][0]["surprise"] = 1
    del body["next_cursor"]
    found = errors(svc.doc, schema, body)
    assert any("started_at" in e for e in found) and any("surprise" in e for e in found)
    assert any("next_cursor" in e for e in found)


def test_problem_answers_are_declared_where_routes_give_them(svc: Svc) -> None:
    for path, item in svc.doc["paths"].items():
        for method, op in item.items():
            for status, resp in op["responses"].items():
                if int(status) < 400 or path in ("/write", "/v1/write", "/api/v2/write",
                                                 "/query", "/readyz"):
                    continue
                assert list(resp["content"]) == [PROBLEM_JSON], (method, path, status)
            if any(p["name"] == "cursor" for p in op.get("parameters", [])):
                assert "400" in op["responses"], (method, path)
            if "{" in path and method == "get":
                assert "404" in op["responses"], (method, path)
            # Runbooks are the shipped docs, opened from a page by a person without a token.
            if path.startswith("/v1/") and method == "get" and path != "/v1/collectors" \
                    and not path.startswith("/v1/runbooks"):
                assert {"401", "403", "429"} <= set(op["responses"]), (method, path)
    assert "HTTPValidationError" not in svc.doc["components"]["schemas"]


def test_the_committed_snapshot_matches_the_live_document(svc: Svc) -> None:
    snapshot = REPO / openapi.SNAPSHOT
    live = json.dumps(svc.doc, indent=2, sort_keys=True) + "\n"
    assert live == openapi.render(svc.app)
    assert snapshot.read_text() == live, (
        f"{openapi.SNAPSHOT} differs from the API the code serves: if the change is meant, "
        f"regenerate it with `{openapi.REGENERATE}` and commit it with the change")


def test_the_regenerate_command_writes_the_snapshot(tmp_path: Path) -> None:
    out = tmp_path / "openapi.json"
    assert openapi_snapshot.main([str(out)]) == 0
    assert out.read_text() == (REPO / openapi.SNAPSHOT).read_text()


def test_the_soak_verdict_client_pages_and_reads_times_back(svc: Svc) -> None:
    api = soak_verdict.Api("")
    api.client.close()
    api.client = svc.client  # the app itself (a TestClient is an httpx.Client)
    whole = svc.get("/v1/alerts?limit=1000")["alerts"]
    found = api.alerts()
    assert [a["id"] for a in found] == [a["id"] for a in whole]
    assert found[0]["started_at"] == T0 + STEP and found[0]["resolved_at"] is None
    assert api.history(found[0]["id"])[0]["at"] == T0 + STEP


@pytest.mark.parametrize("ts", [T0 + 0.8006, T0 + 0.9996, T0 + 0.0004, T0 + 59.9995, 1.5e9 + 0.125])
def test_an_instant_reads_the_same_in_the_api_and_in_a_receivers_message(ts: float) -> None:
    """An alert's `started_at` in the API and its `startsAt` in a webhook or Alertmanager
    message are one string (nearest millisecond), and reading it back gives that string again:
    an operator (or the soak) matches alerts across the two by it."""
    shown = rfc3339(ts)
    assert shown == webhook.rfc3339(ts)
    assert rfc3339(parse_instant(shown)) == shown
