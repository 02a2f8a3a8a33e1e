"""Operator verdicts and labels through the real app: a hard fault's auto label, verdicts that
replace each other and overrule auto failures, refusals with reasons, the notification log, and
the signed link from a message: it asks on GET, records only on POST, and refuses a tampered,
expired or disabled link."""

from __future__ import annotations

import logging
import re
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import uvicorn
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.state import Running
from service.notify.record import RecordReceiver
from service.settings import Settings
from tests.support.fleet import STEP, T0, Fleet, FleetCollector, ManualClock

SECRET = "s3cret-for-verdict-links-0123"


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

    def alert(self, entity: str) -> dict[str, Any]:
        (a,) = [a for a in self.call("GET", "/v1/alerts", "read")["alerts"]
                if a["entity"] == entity]
        return a


def _svc(settings: Settings, secret: str | None) -> Iterator[Svc]:
    s = settings.model_copy(update={"notify": settings.notify.model_copy(
        update={"verdict_link_secret": secret, "external_url": "http://gpuhealth.test"})})
    fleet, clock = Fleet({"n001": 4, "n002": 4}), ManualClock(T0)
    app = create_app(s, clock=clock, schedule=False, collectors=[FleetCollector(fleet, clock)])
    with TestClient(app) as client:
        auth = app.state.gpuhealth_auth
        tokens = {scope: auth.tokens.create(scope, scope, clock())[1]
                  for scope in ("read", "operate", "admin")}
        svc = Svc(client, app.state.gpuhealth, fleet, clock, tokens)
        svc.round()
        fleet.set("n001:gpu2", "ecc_dbe_volatile", 1)  # a hard fault: labelled M1 at once
        svc.round()
        svc.round()
        yield svc


@pytest.fixture
def svc(settings: Settings) -> Iterator[Svc]:
    from pydantic import SecretStr

    yield from _svc(settings, SecretStr(SECRET))  # type: ignore[arg-type]


def _labels(svc: Svc, **q: Any) -> list[tuple[str, str | None, str | None, str]]:
    rows = svc.call("GET", "/v1/labels", "read", params=q)["labels"]
    return [(r["kind"], r["mode"], r["action"], r["source"]) for r in rows]


def test_a_hard_fault_is_labelled_and_verdicts_replace_each_other(svc: Svc) -> None:
    a = svc.alert("n001:gpu2")
    assert _labels(svc) == [("failure", "M1_hbm", None, "rule:dbe")]
    (auto,) = svc.call("GET", "/v1/labels", "read")["labels"]
    assert auto["alert_id"] == a["id"] and auto["entity"] == "n001:gpu2" and auto["open"]
    assert auto["time"].endswith("Z")

    out = svc.call("POST", f"/v1/alerts/{a['id']}/verdict",
                   json={"verdict": "false_alarm", "comment": "burn-in test"})
    assert out["verdict"]["actor"] == "operate" and out["verdict"]["via"] == "api"
    assert svc.alert("n001:gpu2")["verdict"]["verdict"] == "false_alarm"
    # The operator overrules the rule: training sees a benign span, not the failure.
    assert _labels(svc, overruled="false") == [("benign", None, "false_alarm", "verdict")]

    svc.call("POST", f"/v1/alerts/{a['id']}/verdict",
             json={"verdict": "failed", "failed_at": T0 + 10, "comment": "RMA'd"})
    assert _labels(svc, overruled="false") == [("failure", "M1_hbm", None, "rule:dbe"),
                                               ("failure", "M1_hbm", None, "verdict")]
    history = svc.call("GET", f"/v1/alerts/{a['id']}/verdicts", "read")["verdicts"]
    assert [v["verdict"] for v in history] == ["false_alarm", "failed"]
    assert history[1]["mode"] == "M1_hbm"  # the auto label's mode, none given

    svc.call("POST", f"/v1/alerts/{a['id']}/verdict", json={"verdict": "unknown"})
    assert _labels(svc) == [("failure", "M1_hbm", None, "rule:dbe")]  # the rest withdrawn

    db = sqlite3.connect(svc.st.pipeline.settings.storage.sqlite_path)
    try:
        logged = db.execute("SELECT status, title FROM deliveries WHERE receiver = 'verdict' "
                            "ORDER BY rowid").fetchall()
    finally:
        db.close()
    assert [s for s, _ in logged] == ["false_alarm", "failed", "unknown"]
    assert logged[1][1] == f"Verdict on alert {a['id']} (n001:gpu2): failed (M1_hbm) by operate"


def test_verdicts_that_cannot_be_taken_say_why(svc: Svc) -> None:
    a = svc.alert("n001:gpu2")
    url = f"/v1/alerts/{a['id']}/verdict"
    svc.call("POST", "/v1/alerts/999/verdict", json={"verdict": "unknown"}, status=404)
    svc.call("POST", url, json={"verdict": "broken"}, status=422)
    err = svc.call("POST", url, json={"verdict": "maintenance", "mode": "M1_hbm"}, status=422)
    assert "failed" in err["detail"]
    err = svc.call("POST", url, json={"verdict": "failed", "failed_at": time.time() + 86400},
                   status=422)
    assert "past" in err["detail"]
    svc.call("POST", url, json={"verdict": "failed", "mode": "M9"}, status=422)
    svc.call("POST", url, json={"verdict": "unknown", "comment": "x" * 1001}, status=422)
    svc.call("POST", url, "read", json={"verdict": "unknown"}, status=403)
    svc.call("POST", url, None, json={"verdict": "unknown"}, status=401)
    assert svc.call("GET", f"/v1/alerts/{a['id']}/verdicts", "read")["verdicts"] == []


def test_a_failed_verdict_without_a_hard_failure_needs_its_mode(svc: Svc) -> None:
    svc.fleet.set("n002:gpu1", "gpu_temp", 89.0)  # thermal slowdown: an alert, no failure
    svc.fleet.set("n002:gpu1", "throttle_thermal", 1.0)
    for _ in range(40):
        svc.round()
    a = svc.alert("n002:gpu1")
    err = svc.call("POST", f"/v1/alerts/{a['id']}/verdict", json={"verdict": "failed"},
                   status=422)
    assert "needs its mode" in err["detail"]
    out = svc.call("POST", f"/v1/alerts/{a['id']}/verdict",
                   json={"verdict": "failed", "mode": "M5_thermal"})
    assert out["labels"][0]["mode"] == "M5_thermal" and out["labels"][0]["scope"] == "gpu"


def test_a_verdict_is_idempotent_under_its_key(svc: Svc) -> None:
    a = svc.alert("n001:gpu2")
    for _ in range(3):
        svc.call("POST", f"/v1/alerts/{a['id']}/verdict", json={"verdict": "maintenance"},
                 headers={"Idempotency-Key": "k-1"})
    assert len(svc.call("GET", f"/v1/alerts/{a['id']}/verdicts", "read")["verdicts"]) == 1


def _link(svc: Svc, entity: str) -> str:
    rec = svc.st.pipeline.notification.sender.receivers["record"]  # type: ignore[union-attr]
    assert isinstance(rec, RecordReceiver)
    urls = {a.annotations.get("verdict_url") for m in rec.records for a in m.alerts
            if a.labels.get("entity") == entity}
    (url,) = urls - {None}
    assert url is not None
    return url


def test_the_signed_link_asks_on_get_and_records_on_post(svc: Svc) -> None:
    a = svc.alert("n001:gpu2")
    url = _link(svc, "n001:gpu2")
    parts = urlsplit(url)
    assert url.startswith(f"http://gpuhealth.test/verdict/{a['id']}?")
    path = f"{parts.path}?{parts.query}"
    page = svc.client.get(path)
    assert page.status_code == 200 and "false alarm" in page.text
    assert "no-store" in page.headers["cache-control"]
    assert svc.call("GET", f"/v1/alerts/{a['id']}/verdicts", "read")["verdicts"] == []
    q = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert q["by"] == "record"  # made out to the receiver the message went to
    # A visitor cannot name the actor: the link's signed receiver is recorded, whatever a
    # `name` field (as earlier forms had) says.
    done = svc.client.post(parts.path, data={**q, "verdict": "false_alarm", "name": "admin"})
    assert done.status_code == 200, done.text
    (v,) = svc.call("GET", f"/v1/alerts/{a['id']}/verdicts", "read")["verdicts"]
    assert (v["verdict"], v["actor"], v["via"]) == ("false_alarm", "link:record", "link")


def test_a_link_records_one_verdict_and_names_no_other_actor(svc: Svc) -> None:
    a = svc.alert("n001:gpu2")
    parts = urlsplit(_link(svc, "n001:gpu2"))
    q = {k: v[0] for k, v in parse_qs(parts.query).items()}
    for by in ("admin", "link:admin", ""):  # another actor is another signature
        r = svc.client.post(parts.path, data={**q, "by": by, "verdict": "false_alarm"})
        assert r.status_code == 403, r.text
    first = svc.client.post(parts.path, data={**q, "verdict": "maintenance"})
    assert first.status_code == 200, first.text
    for verdict in ("false_alarm", "maintenance", "failed"):  # a replay records nothing
        r = svc.client.post(parts.path, data={**q, "verdict": verdict})
        assert r.status_code == 409 and "one verdict" in r.text, r.text
    page = svc.client.get(f"{parts.path}?{parts.query}")
    assert page.status_code == 409 and "<form" not in page.text
    verdicts = svc.call("GET", f"/v1/alerts/{a['id']}/verdicts", "read")["verdicts"]
    assert [(v["verdict"], v["actor"]) for v in verdicts] == [("maintenance", "link:record")]
    # The API still takes a new verdict (with its token's name).
    svc.call("POST", f"/v1/alerts/{a['id']}/verdict", json={"verdict": "false_alarm"})


def test_a_tampered_or_expired_link_records_nothing(svc: Svc) -> None:
    a = svc.alert("n001:gpu2")
    parts = urlsplit(_link(svc, "n001:gpu2"))
    q = {k: v[0] for k, v in parse_qs(parts.query).items()}
    other = f"/verdict/{a['id'] + 1}"  # the same signature for another alert
    assert svc.client.post(other, data={**q, "verdict": "failed"}).status_code == 403
    bad = {**q, "sig": q["sig"][:-2] + ("AA" if not q["sig"].endswith("AA") else "BB")}
    r = svc.client.post(parts.path, data={**bad, "verdict": "false_alarm"})
    assert r.status_code == 403 and "signature" in r.text
    later = {**q, "exp": str(int(q["exp"]) + 86400)}  # a longer life is a new signature
    assert svc.client.post(parts.path, data={**later, "verdict": "failed"}).status_code == 403
    r = svc.client.post(parts.path, data={**q, "verdict": "<script>"})
    assert r.status_code == 422 and "<script>" not in r.text
    assert svc.client.post(parts.path, content=b"x" * 5000).status_code == 413
    svc.clock.now = float(q["exp"]) + 1
    r = svc.client.get(f"{parts.path}?{parts.query}")
    assert r.status_code == 403 and "expired" in r.text
    assert svc.call("GET", f"/v1/alerts/{a['id']}/verdicts", "read")["verdicts"] == []


def test_without_a_secret_messages_carry_no_link_and_the_page_is_off(settings: Settings) -> None:
    for svc in _svc(settings, None):
        rec = svc.st.pipeline.notification.sender.receivers["record"]  # type: ignore[union-attr]
        assert isinstance(rec, RecordReceiver) and rec.records
        assert all("verdict_url" not in a.annotations for m in rec.records for a in m.alerts)
        r = svc.client.get("/verdict/1?exp=9999999999&sig=abc")
        assert r.status_code == 404 and "off" in r.text
        assert re.search(r"notify\.verdict_link_secret", r.text)


@pytest.mark.slow
def test_a_client_gone_mid_form_is_an_info_line_not_an_error(
        settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    """A browser that closes while sending the form: a real server, a body cut short."""
    app = create_app(settings, clock=lambda: T0, schedule=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    # On the module's own logger: a test before may have set a level on `service` (main's
    # logging set-up), which a level on the root alone would leave in force.
    caplog.set_level(logging.INFO, logger="service.api.verdicts")
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.started
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.sendall(b"POST /verdict/1 HTTP/1.1\r\nHost: gpuhealth.test\r\n"
                      b"Content-Type: application/x-www-form-urlencoded\r\n"
                      b"Content-Length: 1000\r\n\r\nexp=1&by=record&si")
            time.sleep(1.0)  # the route is reading the body when the client goes
        deadline = time.monotonic() + 30  # a loaded CI machine
        while time.monotonic() < deadline and not any(
                "disconnected" in r.getMessage() for r in caplog.records):
            time.sleep(0.05)
    finally:
        server.should_exit = True
        thread.join(timeout=20)
    gone = [r for r in caplog.records if "disconnected" in r.getMessage()]
    assert gone and all(r.levelno == logging.INFO and r.exc_info is None for r in gone)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
