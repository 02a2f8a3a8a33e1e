"""Webhook signatures in the Standard Webhooks scheme: HMAC-SHA256 over `id.timestamp.body`,
sent as `webhook-id`, `webhook-timestamp` and `webhook-signature: v1,<base64>`. The timestamp
is signed so a captured request cannot be replayed after the tolerance has passed."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

TOLERANCE_S = 300.0


def signature(secret: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def sign(secret: bytes, msg_id: str, timestamp: float, body: bytes) -> dict[str, str]:
    """The headers to send with `body`."""
    ts = int(timestamp)
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts),
            "webhook-signature": signature(secret, msg_id, ts, body)}


def verify(secret: bytes, headers: Mapping[str, str], body: bytes, now: float,
           tolerance_s: float = TOLERANCE_S) -> str | None:
    """None when the request is authentic and fresh, else why not. `headers` must be
    case-insensitive or lower-case."""
    msg_id = headers.get("webhook-id")
    ts_text = headers.get("webhook-timestamp")
    sent = headers.get("webhook-signature")
    if not msg_id or not ts_text or not sent:
        return "missing webhook-id, webhook-timestamp or webhook-signature"
    try:
        ts = int(ts_text)
    except ValueError:
        return f"bad webhook-timestamp {ts_text!r}"
    if abs(now - ts) > tolerance_s:
        return f"timestamp {ts} is more than {tolerance_s:.0f} s from now"
    want = signature(secret, msg_id, ts, body)
    # Several space-separated signatures may be sent during a secret rotation.
    if any(hmac.compare_digest(want, s) for s in sent.split()):
        return None
    return "signature does not match"
