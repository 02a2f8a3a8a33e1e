"""The generic webhook against a real HTTP server on loopback; the server side checks the
Standard Webhooks signature with service.notify.signing."""

from __future__ import annotations

import time
from typing import Any

import pytest

from service.notify import signing
from service.notify.message import Delivery, Message
from service.notify.receivers import WebhookConfig, WebhookReceiver
from tests.notify.receivers.samples import alert, deliver, message, resolved
from tests.notify.receivers.servers import HttpRecorder, Reply

SECRET = "whsec-0123456789abcdef"


def send_all(url: str, *msgs: Message, **cfg: Any) -> list[Delivery]:
    return deliver(lambda: WebhookReceiver(
        "hook", WebhookConfig.model_validate({"url": url + "/hook"} | cfg)), *msgs)


def test_alertmanager_v4_payload_plus_level_risk_and_explanation() -> None:
    m = message(alert("gpu3", risk=0.93), alert("gpu5", level=2, risk=0.7),
                alert("gpu1", status="resolved", risk=0.99, ends_at=1_700_000_030.0))
    with HttpRecorder() as srv:
        (d,) = send_all(srv.url, m)
    assert d.ok and d.key.startswith("msg_")
    (req,) = srv.requests
    assert req.path == "/hook" and req.headers["content-type"] == "application/json"
    assert "webhook-signature" not in req.headers  # no secret configured
    body = req.json()
    assert body["version"] == "4" and body["groupKey"] == "route-1/node-7"
    assert body["status"] == "firing" and body["receiver"] == "oncall"
    assert body["truncatedAlerts"] == 0 and body["groupLabels"] == {"node": "node-7"}
    assert body["externalURL"] == "http://gpuhealth.test"
    assert body["commonLabels"] == {"alertname": "GpuFailureRisk", "node": "node-7",
                                    "cluster": "c1", "scope": "gpu"}
    assert body["commonAnnotations"] == {"summary": "ECC errors rising"}
    assert body["level"] == 3 and body["risk"] == 0.93  # max over firing only
    firing, _, gone = body["alerts"]
    assert firing["status"] == "firing" and firing["fingerprint"] == "fp-node-7-gpu3"
    assert firing["startsAt"] == "2023-11-14T22:13:20.000Z"
    assert firing["endsAt"] == "0001-01-01T00:00:00Z"
    assert firing["generatorURL"] == "http://gpuhealth.test/alerts/gpu3"
    assert firing["labels"]["entity"] == "gpu3" and firing["annotations"]["summary"]
    assert firing["level"] == 3 and firing["risk"] == 0.93
    assert firing["explanation"][0] == {"rule": "ecc", "signal": "ecc_sbe_rate",
                                        "value": 42.0, "threshold": 10.0, "risk": 0.91,
                                        "hard": True}
    assert gone["status"] == "resolved" and gone["endsAt"] == "2023-11-14T22:13:50.000Z"


def test_max_alerts_truncates_resolved_ones_first() -> None:
    m = message(alert("gpu1", status="resolved"), alert("gpu2"), alert("gpu3"))
    with HttpRecorder() as srv:
        send_all(srv.url, m, max_alerts=2)
    body = srv.requests[0].json()
    assert body["truncatedAlerts"] == 1
    assert [a["labels"]["entity"] for a in body["alerts"]] == ["gpu2", "gpu3"]


def test_signed_requests_verify_and_a_tampered_body_does_not() -> None:
    m = message()
    with HttpRecorder() as srv:
        first, again = send_all(srv.url, m, m, secret=SECRET,
                                headers={"Authorization": "Bearer tok"})
    a, b = srv.requests
    assert a.headers["authorization"] == "Bearer tok"
    assert signing.verify(SECRET.encode(), a.headers, a.body, time.time()) is None
    assert signing.verify(b"another-secret-0000", a.headers, a.body, time.time()) is not None
    tampered = a.body.replace(b'"firing"', b'"resolved"', 1)
    assert tampered != a.body
    assert signing.verify(SECRET.encode(), a.headers, tampered, time.time()) == (
        "signature does not match")
    # A retry of the same message keeps its id, so the far end can drop the duplicate.
    assert a.headers["webhook-id"] == b.headers["webhook-id"] == first.key == again.key


def test_resolved_group_and_different_groups() -> None:
    m = message()
    other = message(group="route-1/node-8", node="node-8")
    with HttpRecorder() as srv:
        got = send_all(srv.url, m, resolved(m), other, secret=SECRET)
    assert all(d.ok for d in got)
    fire, res, oth = (r.json() for r in srv.requests)
    assert res["status"] == "resolved" and res["risk"] == 0.0 and res["level"] == 3
    assert fire["groupKey"] == res["groupKey"] != oth["groupKey"]
    assert len({d.key for d in got}) == 3


@pytest.mark.slow
def test_status_mapping_and_timeout() -> None:
    m = message()
    script = [Reply(429, headers={"Retry-After": "12"}), Reply(502), Reply(400, "bad"),
              Reply(404), Reply(204), Reply(200, hang_s=10.0)]
    with HttpRecorder(script) as srv:
        # 2 s: the answers that come at once must not time out on a loaded machine (0.3 s did).
        got = send_all(srv.url, *[m] * len(script), timeout_s=2.0,
                       headers={"Authorization": "Bearer s3cr3t-token"})
    limited, e502, bad, missing, empty, hung = got
    assert limited.retry and limited.retry_after_s == 12.0
    assert e502.retry and not e502.ok
    assert bad == Delivery(ok=False, retry=False, detail="HTTP 400: bad")
    assert not missing.retry and not missing.ok
    assert empty.ok
    assert hung == Delivery(ok=False, retry=True, detail="timed out")


def test_the_message_id_is_the_messages_own() -> None:
    from dataclasses import replace

    from service.notify.receivers.webhook import message_id

    m = replace(message(), id="msg_abc")
    # the pipeline's id, whatever the message says: one delivery of one state
    assert message_id(m) == "msg_abc" == message_id(replace(m, at=m.at + 42.0))
    assert message_id(replace(m, id="msg_def")) == "msg_def"
    # without one (a message built elsewhere): its content and its time make it
    bare = message()
    assert message_id(bare) == message_id(message())
    assert message_id(bare) != message_id(replace(bare, at=bare.at + 42.0))
    assert message_id(bare) != message_id(message(alert(level=2)))
