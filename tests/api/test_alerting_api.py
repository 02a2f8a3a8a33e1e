"""The alerting and remediation endpoints through the real app: scoped tokens on every
mutating route, acknowledgements, silences, actions awaiting approval, the breaker."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.state import Running
from service.settings import Settings
from tests.support.fleet import STEP, T0, Fleet, FleetCollector, ManualClock


@dataclass
class Svc:
    client: TestClient
    st: Running
    fleet: Fleet
    clock: ManualClock
    tokens: dict[str, str]

    def round(self) -> None:
        self.st.scheduler.collect_once("fleet")
        self.st.scheduler.score_once()
        self.clock.now += STEP

    def call(self, method: str, url: str, scope: str | None = "operate", status: int = 200,
             **kw: Any) -> Any:
        headers = dict(kw.pop("headers", {}))
        if scope is not None:
            headers["Authorization"] = f"Bearer {self.tokens[scope]}"
        r = self.client.request(method, url, headers=headers, **kw)
        assert r.status_code == status, r.text
        return r.json()


@contextmanager
def running(s: Settings) -> Iterator[Svc]:
    """The app on a two-node fleet whose n001:gpu2 has a double-bit ECC error (a hard fault:
    level 3, corroborated), with a token per scope and a revoked one."""
    fleet, clock = Fleet({"n001": 4, "n002": 4}), ManualClock(T0)
    app = create_app(s, clock=clock, schedule=False, collectors=[FleetCollector(fleet, clock)])
    with TestClient(app) as client:
        auth = app.state.gpuhealth_auth
        tokens = {scope: auth.tokens.create(scope, scope, clock())[1]
                  for scope in ("read", "operate", "admin")}
        gone, revoked = auth.tokens.create("gone", "admin", clock())
        auth.tokens.revoke(gone.id, clock())
        tokens["revoked"] = revoked
        svc = Svc(client, app.state.gpuhealth, fleet, clock, tokens)
        svc.round()
        fleet.set("n001:gpu2", "ecc_dbe_volatile", 1)
        svc.round()
        yield svc


@pytest.fixture
def svc(settings: Settings) -> Iterator[Svc]:
    s = settings.model_copy(update={"remediation": type(settings.remediation)(
        mode="approve", hook="command", hook_config={"drain": ["true"], "release": ["true"]},
        breaker_max_fraction=1.0)})
    with running(s) as svc:
        yield svc


MUTATING = [
    ("POST", "/v1/alerts/1/ack", {"comment": "looking"}, "operate"),
    ("POST", "/v1/alerts/1/verdict", {"verdict": "false_alarm"}, "operate"),
    ("POST", "/v1/silences", {"matchers": ["node=n001"], "comment": "maintenance",
                              "duration_s": 3600}, "operate"),
    ("DELETE", "/v1/silences/nope", None, "operate"),
    ("POST", "/v1/actions/nope/approve", None, "operate"),
    ("POST", "/v1/actions/nope/abort", None, "operate"),
    ("POST", "/v1/nodes/n001/release", None, "operate"),
    ("POST", "/v1/breaker/reset", None, "admin"),
    ("POST", "/v1/models/challenger", {"path": "/nowhere"}, "admin"),
    ("DELETE", "/v1/models/challenger", None, "admin"),
    ("POST", "/v1/models/promote", {}, "admin"),
    ("POST", "/v1/models/rollback", {}, "admin"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("method", "url", "body", "needs"), MUTATING,
                         ids=[f"{m} {u}" for m, u, _, _ in MUTATING])
def test_every_mutating_route_refuses_bad_tokens(svc: Svc, method: str, url: str,
                                                 body: dict[str, Any] | None, needs: str) -> None:
    kw: dict[str, Any] = {"json": body} if body is not None else {}
    svc.call(method, url, None, 401, **kw)
    svc.call(method, url, None, 401, headers={"Authorization": "Bearer ghk_0_wrong"}, **kw)
    svc.call(method, url, "revoked", 401, **kw)
    svc.call(method, url, "read", 403, **kw)
    if needs == "admin":
        svc.call(method, url, "operate", 403, **kw)


def test_ack_is_idempotent_and_recorded(svc: Svc) -> None:
    (alert,) = [a for a in svc.call("GET", "/v1/alerts", None)["alerts"]
                if a["entity"] == "n001:gpu2"]
    url = f"/v1/alerts/{alert['id']}/ack"
    key = {"Idempotency-Key": "ack-1"}
    first = svc.call("POST", url, json={"comment": "on it"}, headers=key)
    again = svc.client.post(url, json={"comment": "on it"},
                            headers={**key, "Authorization": f"Bearer {svc.tokens['operate']}"})
    assert again.json() == first and again.headers.get("Idempotent-Replayed") == "true"
    assert first["acked_by"] == "operate" and first["ack_comment"] == "on it"
    svc.call("POST", url, json={"comment": "different"}, headers=key, status=422)
    svc.call("POST", "/v1/alerts/999/ack", json={"comment": "x"}, status=404)


def test_silences_mute_and_expire(svc: Svc) -> None:
    made = svc.call("POST", "/v1/silences", json={
        "matchers": ["node=n002"], "comment": "rack work", "duration_s": 600}, status=201)
    assert made["author"] == "operate" and made["state"] == "active"
    listed = svc.call("GET", "/v1/silences", "read")["silences"]
    assert [s["id"] for s in listed] == [made["id"]]
    svc.call("POST", "/v1/silences", json={"matchers": ["node!=x"], "comment": "all",
                                          "duration_s": 60}, status=422)
    svc.call("POST", "/v1/silences", json={"matchers": ["node=n1"], "comment": "long",
                                          "duration_s": 30 * 86400}, status=422)
    gone = svc.call("DELETE", f"/v1/silences/{made['id']}")
    assert gone["state"] == "expired" and gone["expired_by"] == "operate"


def test_a_level_3_action_awaits_approval_and_runs(svc: Svc) -> None:
    actions = svc.call("GET", "/v1/actions", "read")["actions"]
    (a,) = [x for x in actions if x["node"] == "n001"]
    assert a["state"] == "awaiting_approval"
    done = svc.call("POST", f"/v1/actions/{a['id']}/approve")
    assert done["state"] in ("planned", "executing", "succeeded")
    ctl = svc.st.pipeline.remediation.controller  # type: ignore[union-attr]
    svc.round()
    assert ctl.wait(10)
    svc.round()
    got = svc.call("GET", f"/v1/actions/{a['id']}", "read")
    assert got["state"] == "succeeded", got
    assert any(e["event"] for e in got["audit"])
    svc.call("POST", f"/v1/actions/{a['id']}/approve", status=409)


def test_breaker_reset_needs_admin(svc: Svc) -> None:
    ctl = svc.st.pipeline.remediation.controller  # type: ignore[union-attr]
    ctl.breaker.trip("test storm", svc.clock())
    assert svc.call("GET", "/v1/breaker", "read")["state"] != "closed"
    svc.call("POST", "/v1/breaker/reset", "operate", 403)
    after = svc.call("POST", "/v1/breaker/reset", "admin")
    assert after["state"] == "closed"


def test_groups_show_the_node_group(svc: Svc) -> None:
    groups = svc.call("GET", "/v1/groups", "read")["groups"]
    assert any(g["labels"].get("node") == "n001" for g in groups)


def test_reads_need_a_token_only_when_configured(settings: Settings) -> None:
    s = settings.model_copy(update={"api": type(settings.api)(read_requires_token=True)})
    clock = ManualClock(T0)
    app = create_app(s, clock=clock, schedule=False)
    with TestClient(app) as client:
        token = app.state.gpuhealth_auth.tokens.create("viewer", "read", clock())[1]
        assert client.get("/healthz").status_code == 200  # probes stay open
        for url in ("/v1/nodes", "/v1/alerts", "/v1/silences", "/v1/gpus/n1:gpu0/metrics",
                    "/metrics"):
            assert client.get(url).status_code == 401, url
        for url in ("/v1/alerts", "/metrics"):
            ok = client.get(url, headers={"Authorization": f"Bearer {token}"})
            assert ok.status_code == 200, url


class JumpingClock:
    """A replay's data clock at --speed 0: an hour of data time passes between two calls."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 3600
        return self.now


def test_a_replay_clock_never_governs_tokens_or_rate_limits(settings: Settings) -> None:
    import time

    s = settings.model_copy(update={"api": settings.api.model_copy(
        update={"rate_limit_per_min": 60, "rate_limit_burst": 5})})
    # The trace is from the past: its time is years before the token expired in wall time.
    app = create_app(s, clock=JumpingClock(T0), schedule=False)
    with TestClient(app) as client:
        auth = app.state.gpuhealth_auth
        wall = time.time()
        _, expired = auth.tokens.create("old", "admin", wall - 7200, expires_at=wall - 3600)
        _, admin = auth.tokens.create("ops", "admin", wall)
        r = client.post("/v1/breaker/reset", headers={"Authorization": f"Bearer {expired}"})
        assert r.status_code == 401, r.text
        codes = [client.post("/v1/breaker/reset",
                             headers={"Authorization": f"Bearer {admin}"}).status_code
                 for _ in range(12)]
        assert codes[:5] == [200] * 5 and 429 in codes  # the burst, then the limit holds


def test_alerts_carry_labels_alertname_and_a_stable_fingerprint(svc: Svc) -> None:
    from service.stages.alert_identity import identity_fingerprint

    (alert,) = [a for a in svc.call("GET", "/v1/alerts", None)["alerts"]
                if a["entity"] == "n001:gpu2"]
    assert alert["alertname"] == alert["labels"]["alertname"] == "GpuFailureRisk"
    assert alert["labels"]["severity"] == "critical" and alert["labels"]["gpu"] == "2"
    assert alert["fingerprint"] == identity_fingerprint(alert["labels"])
    assert alert["alertmanager"] == []  # no alertmanager receiver configured
    one = svc.call("GET", f"/v1/alerts/{alert['id']}", None)
    assert (one["fingerprint"], one["labels"]) == (alert["fingerprint"], alert["labels"])


def test_signals_carry_their_values_in_words(svc: Svc) -> None:
    alerts = svc.call("GET", "/v1/alerts?node=n001", "read")["alerts"]
    [dbe] = [s for a in alerts for s in a["explanation"] if s["rule"] == "dbe"]
    assert (dbe["value"], dbe["value_text"], dbe["threshold_text"]) == (1.0, "1 error", "1 error")
    gpu = svc.call("GET", "/v1/gpus/n001:gpu2", "read")
    assert {s["rule"]: s["value_text"] for s in gpu["explanation"]}["dbe"] == "1 error"
