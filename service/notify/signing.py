"""Webhook signatures in the Standard Webhooks scheme (github.com/standard-webhooks/
standard-webhooks, spec/standard-webhooks.md): HMAC-SHA256 over `id.timestamp.body`, sent as
`webhook-id`, `webhook-timestamp` and `webhook-signature: v1,<base64>`. The timestamp is signed
so a captured request cannot be replayed after the tolerance has passed.

Secrets: the spec's serialization is `whsec_` followed by the base64 of a random key of 24 to 64
bytes, and the HMAC key is the decoded bytes; that is what the reference libraries take
(`standardwebhooks.Webhook("whsec_...")`). A secret without the prefix is an older gpuhealth
secret and keeps its meaning: its UTF-8 bytes, as written, are the key, so receivers set up
for it keep verifying (with the reference library: `Webhook(secret.encode())`, bytes are used
as the key unchanged)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from typing import Annotated

from pydantic import AfterValidator, Field, SecretStr

TOLERANCE_S = 300.0  # the reference libraries' five minutes
SECRET_PREFIX = "whsec_"
MIN_KEY_BYTES, MAX_KEY_BYTES = 24, 64  # the spec: at least 192 bits, at most 512


def key(secret: str) -> bytes:
    """The HMAC key `secret` stands for (see the module's docstring). ValueError for a `whsec_`
    secret that is not the base64 of 24 to 64 bytes; the message never quotes the secret."""
    if not secret.startswith(SECRET_PREFIX):
        return secret.encode()
    text = secret[len(SECRET_PREFIX):]
    try:
        # Padding may be left off (the reference libraries accept both).
        raw = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"a {SECRET_PREFIX} secret must be followed by standard base64 "
                         "(A-Z a-z 0-9 + /); its value is not shown") from None
    if not MIN_KEY_BYTES <= len(raw) <= MAX_KEY_BYTES:
        raise ValueError(f"a {SECRET_PREFIX} secret must encode {MIN_KEY_BYTES} to "
                         f"{MAX_KEY_BYTES} random bytes (Standard Webhooks), this one "
                         f"encodes {len(raw)}")
    return raw


def _valid(v: SecretStr) -> SecretStr:
    key(v.get_secret_value())
    return v


# A signing secret in settings: `whsec_<base64>` or an older raw secret of 16+ characters.
SigningSecret = Annotated[SecretStr, Field(min_length=16), AfterValidator(_valid)]


def signature(secret: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """`secret` is the HMAC key (key() of the configured secret)."""
    mac = hmac.new(secret, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def sign(secret: bytes, msg_id: str, timestamp: float, body: bytes) -> dict[str, str]:
    """The headers to send with `body`. The spec asks for ids without a full stop (the signed
    content is delimited by them)."""
    if "." in msg_id:
        raise ValueError(f"webhook-id {msg_id!r} holds a '.'")
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
