"""The alertmanager receiver against a recording HTTP server: the postable-alerts body, endsAt
from an injected clock, a level change resolving the superseded label set, and bad answers
(400, 500, a timeout, one Alertmanager of two down): a clear error and nothing lost."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from service.notify.message import Message
from service.notify.receivers import build_receiver
from service.notify.receivers.alertmanager import AlertmanagerConfig, AlertmanagerReceiver
from tests.notify.receivers.samples import T0, alert, message, resolved, run
from tests.notify.receivers.servers import HttpRecorder, Reply

NOW = T0 + 120.0  # the receiver's clock: Alertmanager's wall time in production


def receiver(*urls: str, **cfg: Any) -> AlertmanagerReceiver:
    return AlertmanagerReceiver("am", AlertmanagerConfig.model_validate(
        {"urls": list(urls)} | cfg), clock=lambda: NOW)


def send(r: AlertmanagerReceiver, *msgs: Message) -> list[Any]:
    async def go() -> list[Any]:
        try:
            return [await r.notify(m) for m in msgs]
        finally:
            await r.aclose()
    return run(go())


def bodies(srv: HttpRecorder) -> list[list[dict[str, Any]]]:
    return [req.json() for req in srv.requests if req.method == "POST"]


def test_postable_alerts_with_our_labels_fingerprint_and_annotations() -> None:
    window = "failure expected in 1-3 days"
    firing = alert("gpu3", risk=0.93, signal="ecc", flapping="true")
    firing = replace(firing, annotations={**firing.annotations, "predicted_window": window})
    gone = alert("gpu1", status="resolved", ends_at=T0 + 30)
    with HttpRecorder() as srv:
        (d,) = send(receiver(srv.url + "/"), message(firing, gone))
    assert d.ok and "2 alert(s)" in d.detail
    (req,) = srv.requests
    assert req.path == "/api/v2/alerts" and req.headers["content-type"] == "application/json"
    fire, res = req.json()
    assert fire["labels"] == {"alertname": "GpuFailureRisk", "level": "3", "node": "node-7",
                              "entity": "gpu3", "cluster": "c1", "scope": "gpu",
                              "fingerprint": "fp-node-7-gpu3"}
    # Volatile labels would make a new Alertmanager alert on every change: annotations.
    assert fire["annotations"] == {"summary": "ECC errors rising",
                                   "description": "gpu3 on node-7 may fail",
                                   "predicted_window": window, "risk": "0.93",
                                   "signal": "ecc", "flapping": "true"}
    assert fire["startsAt"] == "2023-11-14T22:13:20.000Z"
    assert fire["endsAt"] == "2023-11-14T22:20:20.000Z"  # NOW + the 300 s resolve timeout
    assert fire["generatorURL"] == "http://gpuhealth.test/alerts/gpu3"
    assert res["endsAt"] == "2023-11-14T22:13:50.000Z"  # when it resolved
    assert res["labels"]["fingerprint"] == "fp-node-7-gpu1"


def test_every_alertmanager_gets_the_post_and_headers() -> None:
    with HttpRecorder() as a, HttpRecorder() as b:
        (d,) = send(receiver(a.url, b.url, headers={"Authorization": "Basic eDp5"}), message())
    assert d.ok
    assert bodies(a) == bodies(b) and len(bodies(a)) == 1
    assert a.requests[0].headers["authorization"] == "Basic eDp5"


def test_a_level_change_resolves_the_superseded_label_set() -> None:
    first = message(alert("gpu3", level=2))
    up = message(alert("gpu3", level=3), reason="update")
    with HttpRecorder() as srv:
        send(receiver(srv.url), first, up, resolved(up))
    _, changed, ended = bodies(srv)
    assert [(x["labels"]["level"], x["endsAt"]) for x in changed] == [
        ("3", "2023-11-14T22:20:20.000Z"),  # the new set, firing
        ("2", "2023-11-14T22:15:20.000Z")]  # the old set, resolved now
    assert [x["labels"]["level"] for x in ended] == ["3"]  # nothing left to supersede


def test_bad_answers_are_clear_errors_and_lose_nothing() -> None:
    first = message(alert("gpu3", level=2))
    up = message(alert("gpu3", level=3), reason="update")
    script = [Reply(200),
              Reply(400, '"start time must be before end time"'),
              Reply(500, "boom"),
              Reply(200, hang_s=5.0),
              Reply(200)]
    with HttpRecorder(script) as srv:
        ok, bad, err, hung, again = send(receiver(srv.url, timeout_s=0.3),
                                         first, up, up, up, up)
    assert ok.ok and again.ok
    assert (bad.ok, bad.retry) == (False, False)
    assert bad.detail == f'{srv.url}: HTTP 400: "start time must be before end time"'
    assert (err.ok, err.retry, err.detail) == (False, True, f"{srv.url}: HTTP 500: boom")
    assert (hung.ok, hung.retry, hung.detail) == (False, True, f"{srv.url}: timed out")
    # Each failed try posted the same thing; so did the one that got through: the superseded
    # level-2 set is still resolved, nothing the failures carried was dropped.
    posted = bodies(srv)[1:]
    assert len(posted) == 4 and all(b == posted[0] for b in posted)
    assert [x["labels"]["level"] for x in posted[-1]] == ["3", "2"]


def test_one_alertmanager_down_fails_the_delivery_and_names_it() -> None:
    with HttpRecorder() as up, HttpRecorder(default=Reply(503, "not ready")) as down:
        (d,) = send(receiver(up.url, down.url), message())
    assert not d.ok and d.retry
    assert d.detail == f"{down.url}: HTTP 503: not ready"
    assert len(bodies(up)) == 1  # the healthy one still got it


@pytest.mark.parametrize(("cfg", "why"), [
    ({"urls": []}, "urls"),
    ({"urls": ["ftp://am:9093"]}, "urls.0"),
    ({"urls": ["http://am:9093"], "resolve_timeout_s": 60, "refresh_interval_s": 45},
     "refresh_interval_s (45) must be at most half of resolve_timeout_s (60)"),
    ({"urls": ["http://am:9093"], "resend": 10}, "resend"),
    ({"urls": ["http://am:9093"], "headers": {"Content-Type": "x"}}, "Content-Type"),
])
def test_bad_settings_fail_at_load(cfg: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match=r"receiver 'am' \(alertmanager\)") as e:
        build_receiver("am", "alertmanager", cfg)
    assert why in str(e.value)


def test_read_back_failure_keeps_delivery_ok_and_status_empty() -> None:
    """The read-back is best effort: an Alertmanager that refuses the GET (the recorder
    serves POST only: 501) costs a log line, not a delivery."""
    with HttpRecorder() as srv:
        r = receiver(srv.url)
        (d,) = send(r, message(reason="refresh"))
    assert d.ok and r.upstream("fp-node-7-gpu3") == []


def test_a_late_refresh_does_not_fire_again_what_a_newer_resolve_ended() -> None:
    """A refresh held up by retries lands after the resolve of one of its alerts: that alert
    is left out (a newer refresh, after it fired again, has it back); a refresh left empty
    posts nothing."""
    late = message(alert("gpu3"), alert("gpu5"), at=T0 + 60, reason="refresh")
    end = resolved(message(alert("gpu3"), at=T0 + 65))  # at T0 + 365: newer than both
    newer = message(alert("gpu3"), at=T0 + 400, reason="refresh")
    only = message(alert("gpu3"), at=T0 + 60, reason="refresh")
    with HttpRecorder() as srv:
        got = send(receiver(srv.url, read_back=False), end, late, only, newer)
    assert all(d.ok for d in got)
    ended, refreshed, again = bodies(srv)  # the empty one posted nothing
    assert [x["labels"]["entity"] for x in ended] == ["gpu3"]
    assert [x["labels"]["entity"] for x in refreshed] == ["gpu5"]
    assert [x["labels"]["entity"] for x in again] == ["gpu3"]
    assert got[2].detail.startswith("0 alert(s)")


def test_a_boards_labels_go_to_alertmanager_as_annotations() -> None:
    """A GPU's board may be said after its alert opened (its NVLink a minute after the GPU,
    dcgm-exporter before nvidia-smi's serial): as labels it would split the alert in two in
    Alertmanager, so UUID, serial, modelName and pci_bus_id travel as annotations there."""
    board = {"UUID": "GPU-5b1e7c2a-93d4-4f0e-a1b2-0c3d4e5f6a70", "serial": "1654922031230",
             "modelName": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:12:00.0"}
    with HttpRecorder() as srv:
        send(receiver(srv.url), message(alert("gpu3")), message(alert("gpu3", **board)))
    before, after = (b[0] for b in bodies(srv))
    assert before["labels"] == after["labels"]  # one alert in Alertmanager, not two
    assert {k: after["annotations"][k] for k in board} == board
