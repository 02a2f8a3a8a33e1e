"""Twilio-style voice calls against a real HTTP server on loopback."""

from __future__ import annotations

import base64
import xml.etree.ElementTree as ET

from service.notify.message import Delivery, Message
from service.notify.receivers import TwilioConfig, TwilioReceiver
from tests.notify.receivers.samples import alert, deliver, message, resolved
from tests.notify.receivers.servers import HttpRecorder, Reply

SID = "AC0123456789abcdef0123456789abcdef"
TOKEN = "auth-token-never-shown"
TO = ["+15550000001", "+15550000002"]
CREATED = Reply(201, {"sid": "CA1", "status": "queued"})


def receiver(url: str, timeout_s: float = 2.0) -> TwilioReceiver:
    return TwilioReceiver("phone", TwilioConfig.model_validate(
        {"account_sid": SID, "auth_token": TOKEN, "from_number": "+15559999999", "to": TO,
         "url": url, "timeout_s": timeout_s}))


def send_all(url: str, *msgs: Message, timeout_s: float = 2.0) -> list[Delivery]:
    return deliver(lambda: receiver(url, timeout_s), *msgs)


def test_one_authenticated_call_per_number_saying_the_summary_twice() -> None:
    m = message(alert("gpu3", summary="ECC <errors> & resets"))
    with HttpRecorder(default=CREATED) as srv:
        (d,) = send_all(srv.url, m)
    assert d.ok and d.detail == "2/2 call(s) placed" and d.key == "CA1,CA1"
    assert [r.path for r in srv.requests] == [f"/2010-04-01/Accounts/{SID}/Calls.json"] * 2
    basic = "Basic " + base64.b64encode(f"{SID}:{TOKEN}".encode()).decode()
    assert all(r.headers["authorization"] == basic for r in srv.requests)
    assert all(r.headers["content-type"] == "application/x-www-form-urlencoded"
               for r in srv.requests)
    forms = [r.form() for r in srv.requests]
    assert [f["To"] for f in forms] == TO
    assert all(f["From"] == "+15559999999" for f in forms)
    root = ET.fromstring(forms[0]["Twiml"])  # well-formed despite <, > and & in the label
    says = [e.text or "" for e in root.iter("Say")]
    assert root.tag == "Response" and len(says) == 2 and says[0] == says[1]
    assert "ECC <errors> & resets" in says[0] and "Level 3" in says[0]
    assert "node node-7" in says[0] and "93 percent" in says[0]


def test_a_resolve_places_no_call() -> None:
    with HttpRecorder(default=CREATED) as srv:
        (d,) = send_all(srv.url, resolved(message()))
    assert d == Delivery(ok=True, detail="no call for a resolve")
    assert srv.requests == []


def test_a_retry_only_calls_the_numbers_that_failed_transiently() -> None:
    m = message()
    with HttpRecorder([CREATED, Reply(503, {"message": "busy"}, {"Retry-After": "7"}),
                       Reply(201, {"sid": "CA2"})]) as srv:
        first, second = send_all(srv.url, m, m)
    assert not first.ok and first.retry and first.retry_after_s == 7.0
    assert first.detail == "1/2 call(s) placed; ***0002: HTTP 503: busy"
    assert second.ok and second.key == "CA1,CA2"
    assert [r.form()["To"] for r in srv.requests] == [TO[0], TO[1], TO[1]]


def test_status_mapping_like_pagerduty() -> None:
    m = message()
    bad = Reply(400, {"code": 21211, "message": "The 'To' number is not a valid phone number.",
                      "status": 400})
    with HttpRecorder([Reply(429), Reply(429)]) as srv:
        (limited,) = send_all(srv.url, m)
    with HttpRecorder([bad, bad]) as srv:
        (refused,) = send_all(srv.url, m)
    with HttpRecorder([Reply(201, hang_s=5.0), CREATED]) as srv:
        (hung,) = send_all(srv.url, m, timeout_s=0.3)
    assert limited.retry and not limited.ok
    assert not refused.retry and not refused.ok
    assert "not a valid phone number" in refused.detail
    assert hung.retry and "***0001: timed out" in hung.detail
    assert all(TOKEN not in d.detail for d in (limited, refused, hung))
