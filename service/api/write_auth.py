"""Write tokens as InfluxDB clients send them, for the write endpoint and its InfluxDB
companions (`/query`): `Authorization: Token T` (v2 clients, Telegraf's influxdb_v2 output),
`Bearer T`, `Basic base64(user:T)` or `?u=&p=T` (v1 clients, Telegraf's influxdb output with a
password)."""

from __future__ import annotations

import base64
import binascii
import hmac

from fastapi import Request

from service.api.state import Running
from service.errors import Unauthorized

TOKEN_CHALLENGE = 'Token realm="gpuhealth"'


def authorize(request: Request, st: Running, u: str | None, p: str | None,
              challenge: str = TOKEN_CHALLENGE) -> None:
    """Raise Unauthorized (401, `challenge` as its WWW-Authenticate) unless the request carries
    a configured write token (any is fine when none is configured); `u` and `p` are the v1
    query parameters."""
    tokens = [t.get_secret_value().encode() for t in st.settings.ingest.tokens]
    if not tokens:
        return
    header = request.headers.get("authorization", "")
    scheme, _, cred = header.partition(" ")
    given: str | None = None
    if scheme.lower() in ("token", "bearer"):
        given = cred.strip()
    elif scheme.lower() == "basic":
        try:
            given = base64.b64decode(cred.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            raise Unauthorized("malformed Basic authorization header",
                               challenge=challenge) from None
    elif p is not None:
        given = p
    if not given:
        raise Unauthorized("authorization required: send 'Authorization: Token <token>'",
                           challenge=challenge)
    # Constant-time comparison against every token, so timing tells nothing.
    if not any(hmac.compare_digest(given.encode(), t) for t in tokens):
        raise Unauthorized("invalid token", challenge=challenge)
