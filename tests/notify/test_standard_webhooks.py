"""Our webhook signatures against the Standard Webhooks reference library (`standardwebhooks`,
pinned in requirements-dev.txt): what the notification webhook and the remediation webhook hook
send to a real loopback HTTP server verifies with `Webhook(secret).verify`, and a wrong secret,
a stale timestamp or a changed body does not. A `whsec_` secret is the spec's base64 key; an
older raw secret is its UTF-8 bytes (the library takes those as bytes)."""

from __future__ import annotations

import base64
import json
import os
import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from service.notify import signing
from service.notify.receivers import WebhookConfig, WebhookReceiver, build_receiver
from service.notify.receivers import webhook as receiver_module
from service.remediation.hooks import build_hook
from service.remediation.hooks import webhook as hook_module
from service.remediation.hooks.base import ActionRequest
from tests.notify.receivers.samples import deliver, message
from tests.notify.receivers.servers import HttpRecorder, Reply, Request

KEY = os.urandom(32)
WHSEC = "whsec_" + base64.b64encode(KEY).decode()
OTHER = "whsec_" + base64.b64encode(os.urandom(32)).decode()
RAW = "an-older-raw-secret-0123"


def _notify(secret: str) -> Request:
    with HttpRecorder() as srv:
        (d,) = deliver(lambda: WebhookReceiver("hook", WebhookConfig.model_validate(
            {"url": srv.url + "/hook", "secret": secret})), message())
    assert d.ok, d.detail
    (req,) = srv.requests
    return req


def _drain(secret: str) -> Request:
    with HttpRecorder(default=Reply(202)) as srv:
        hook = build_hook("webhook", {"url": srv.url + "/drain", "secret": secret})
        result = hook.execute(ActionRequest(
            action_id="act-3", node="gpu-2.example.com", alert_id=11, fingerprint="fp11",
            summary="ECC storm on gpu 5", requested_at=1_800_000_000.5))
    assert result.ok, result.detail
    (req,) = srv.requests
    return req


SENDERS = {"notify": _notify, "hook": _drain}


@pytest.mark.parametrize("send", SENDERS.values(), ids=SENDERS.keys())
def test_the_reference_library_verifies_a_whsec_signature(send: Any) -> None:
    req = send(WHSEC)
    assert Webhook(WHSEC).verify(req.body, req.headers) == json.loads(req.body)
    assert "." not in req.headers["webhook-id"]  # the spec: ids hold no full stop
    assert req.headers["webhook-signature"].startswith("v1,")
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(OTHER).verify(req.body, req.headers)
    tampered = req.body.replace(b'"', b" \"", 1)
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(WHSEC).verify(tampered, req.headers)
    # And our own verifier agrees with the library on the key.
    assert signing.verify(KEY, req.headers, req.body, time.time()) is None


@pytest.mark.parametrize("send", SENDERS.values(), ids=SENDERS.keys())
def test_a_raw_secret_keeps_its_meaning_its_bytes_are_the_key(send: Any) -> None:
    req = send(RAW)
    Webhook(RAW.encode()).verify(req.body, req.headers)
    # Given as a string the library base64-decodes it: another key, which is why the docs say
    # to pass a raw secret as bytes, or move to a whsec_ secret.
    with pytest.raises(WebhookVerificationError):
        Webhook(RAW).verify(req.body, req.headers)


@pytest.mark.parametrize(("send", "module"), [(_notify, receiver_module), (_drain, hook_module)],
                         ids=SENDERS.keys())
def test_a_stale_timestamp_fails(send: Any, module: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Signed six minutes ago (the module's clock is moved back): past the library's five."""
    monkeypatch.setattr(module, "time", SimpleNamespace(time=lambda: time.time() - 360,
                                                        monotonic=time.monotonic))
    req = send(WHSEC)
    assert int(req.headers["webhook-timestamp"]) < time.time() - 300
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(WHSEC).verify(req.body, req.headers)


def test_our_verifier_accepts_what_the_library_signs() -> None:
    now = datetime.now(UTC)
    body = '{"a":1}'
    sig = Webhook(WHSEC).sign("msg_1", now, body)
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(int(now.timestamp())),
               "webhook-signature": sig}
    assert signing.verify(signing.key(WHSEC), headers, body.encode(), time.time()) is None
    assert signing.verify(signing.key(OTHER), headers, body.encode(), time.time()) is not None


def test_key_decodes_whsec_with_or_without_padding() -> None:
    assert signing.key(WHSEC) == KEY
    raw = os.urandom(25)  # 25 bytes: base64 with one '=' of padding
    text = base64.b64encode(raw).decode()
    assert text.endswith("=")
    assert signing.key("whsec_" + text) == signing.key("whsec_" + text.rstrip("=")) == raw
    assert signing.key(RAW) == RAW.encode()


@pytest.mark.parametrize(("secret", "why"), [
    ("whsec_" + base64.b64encode(bytes(range(16))).decode(), "24 to 64 random bytes"),
    ("whsec_" + base64.b64encode(bytes(range(65))).decode(), "24 to 64 random bytes"),
    ("whsec_not*base64*at*all*0123456789abc", "standard base64"),
], ids=["16-bytes", "65-bytes", "not-base64"])
def test_a_bad_whsec_secret_is_refused_at_load_without_showing_it(secret: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as got:
        build_receiver("hook", "webhook", {"url": "http://127.0.0.1:1/x", "secret": secret})
    assert secret[6:] not in str(got.value)
    with pytest.raises(ValueError, match=why) as got:
        build_hook("webhook", {"url": "http://127.0.0.1:1/x", "secret": secret})
    assert secret[6:] not in str(got.value)


def test_a_webhook_id_with_a_full_stop_is_refused() -> None:
    with pytest.raises(ValueError, match=r"holds a '\.'"):
        signing.sign(KEY, "act-3.drain", time.time(), b"{}")
