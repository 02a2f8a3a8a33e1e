"""PagerDuty Events v2 against a real HTTP server on loopback."""

from __future__ import annotations

import time
from email.utils import formatdate

from service.notify.message import Delivery, Message
from service.notify.receivers import PagerDutyConfig, PagerDutyReceiver
from tests.notify.receivers.samples import alert, deliver, message, resolved
from tests.notify.receivers.servers import HttpRecorder, Reply, free_port

KEY = "R0UT1NGKEY0123456789abcdefABCDEF"
ACCEPTED = Reply(202, {"status": "success", "message": "Event processed",
                       "dedup_key": "from-pd"})


def receiver(url: str, timeout_s: float = 2.0) -> PagerDutyReceiver:
    return PagerDutyReceiver("pd", PagerDutyConfig.model_validate(
        {"routing_key": KEY, "url": url, "timeout_s": timeout_s}))


def send_all(url: str, *msgs: Message, timeout_s: float = 2.0) -> list[Delivery]:
    return deliver(lambda: receiver(url, timeout_s), *msgs)


def test_trigger_then_resolve_share_the_group_dedup_key() -> None:
    first = message(alert("gpu3"), alert("gpu5", level=2, risk=0.7))
    other = message(alert("gpu1"), group="route-1/node-8", node="node-8")
    with HttpRecorder([ACCEPTED], default=Reply(202, {"status": "success"})) as srv:
        got = send_all(srv.url, first, other, resolved(first))
    assert [d.ok for d in got] == [True, True, True]
    assert got[0].key == "from-pd"  # PagerDuty's answer wins
    assert got[1].key == other.dedup_key  # ours when the answer has none
    assert all(r.path == "/v2/enqueue" and r.method == "POST" for r in srv.requests)
    assert all(r.headers["content-type"] == "application/json" for r in srv.requests)
    trig, trig_other, res = (r.json() for r in srv.requests)

    assert trig["event_action"] == "trigger" and res["event_action"] == "resolve"
    assert trig["dedup_key"] == res["dedup_key"] == first.dedup_key
    assert trig_other["dedup_key"] != trig["dedup_key"]
    assert res == {"routing_key": KEY, "event_action": "resolve",
                   "dedup_key": first.dedup_key}

    assert trig["routing_key"] == KEY and trig["client"] == "gpuhealth"
    p = trig["payload"]
    assert p["severity"] == "critical" and p["source"] == "node-7"
    assert p["component"] == "gpu3, gpu5" and p["group"] == "c1"
    assert p["class"] == "GpuFailureRisk"
    assert p["timestamp"] == "2023-11-14T22:13:20.000+00:00"
    assert len(p["summary"]) <= 1024 and "ECC errors rising" in p["summary"]
    alerts = p["custom_details"]["alerts"]
    assert [a["entity"] for a in alerts] == ["gpu3", "gpu5"]  # strongest first
    assert alerts[0]["risk"] == 0.93 and alerts[0]["explanation"][0]["signal"] == "ecc_sbe_rate"
    assert trig["links"][0] == {"href": "http://gpuhealth.test/alerts/gpu3",
                                "text": "ECC errors rising"}
    assert trig["client_url"] == "http://gpuhealth.test"


def test_severity_follows_the_level_and_summary_is_capped() -> None:
    warn = message(alert(level=2, summary="x" * 3000))
    info = message(alert(level=1))
    with HttpRecorder(default=ACCEPTED) as srv:
        send_all(srv.url, warn, info)
    a, b = (r.json()["payload"] for r in srv.requests)
    assert (a["severity"], b["severity"]) == ("warning", "info")
    assert len(a["summary"]) == 1024 and a["summary"].endswith("...")


def test_retry_only_on_429_5xx_and_network_errors() -> None:
    later = formatdate(time.time() + 120, usegmt=True)
    script = [Reply(429, {"message": "slow down"}, {"Retry-After": "30"}),
              Reply(429, {}, {"Retry-After": later}),
              Reply(500, "oops"), Reply(503),
              Reply(400, {"status": "invalid event", "message": "Event object is invalid",
                          "errors": ["Length of 'routing_key' is incorrect"]}),
              Reply(403, {"message": "forbidden"}), ACCEPTED]
    m = message()
    with HttpRecorder(script) as srv:
        got = send_all(srv.url, *[m] * len(script))
    limited, dated, e500, e503, bad, forbidden, ok = got
    assert limited == Delivery(ok=False, retry=True, detail="HTTP 429: slow down",
                               retry_after_s=30.0)
    assert dated.retry and dated.retry_after_s is not None and 100 < dated.retry_after_s <= 120
    assert e500.retry and e500.detail == "HTTP 500: oops" and e500.retry_after_s is None
    assert e503.retry and not e503.ok
    assert not bad.retry and not bad.ok
    assert bad.detail == ("HTTP 400: Event object is invalid: "
                          "Length of 'routing_key' is incorrect")
    assert not forbidden.retry and forbidden.detail == "HTTP 403: forbidden"
    assert ok.ok
    assert all(KEY not in d.detail for d in got)


def test_timeout_and_connection_refused_are_retried() -> None:
    with HttpRecorder([Reply(202, hang_s=5.0)]) as srv:
        start = time.monotonic()
        (hung,) = send_all(srv.url, message(), timeout_s=0.3)
        assert time.monotonic() - start < 2.0
    assert hung == Delivery(ok=False, retry=True, detail="timed out")
    (refused,) = send_all(f"http://127.0.0.1:{free_port()}", message())
    assert not refused.ok and refused.retry and refused.detail.startswith("network error")


def test_a_secret_echoed_by_the_far_end_is_redacted() -> None:
    with HttpRecorder([Reply(400, {"message": f"bad key {KEY}"})]) as srv:
        (d,) = send_all(srv.url, message())
    assert d.detail == "HTTP 400: bad key ***"
