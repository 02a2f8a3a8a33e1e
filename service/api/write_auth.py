"""Write tokens as InfluxDB clients send them, for the write endpoint and its InfluxDB
companions (`/query`): `Authorization: Token T` (v2 clients, Telegraf's influxdb_v2 output),
`Bearer T`, `Basic base64(user:T)` or `?u=&p=T` (v1 clients, Telegraf's influxdb output with a
password)."""

from __future__ import annotations

import base64
import binascii
import hmac
import math

from starlette.requests import Request

from service.api.auth_failures import AuthFailures, identity
from service.api.state import Running
from service.errors import TooManyRequests, Unauthorized

TOKEN_CHALLENGE = 'Token realm="gpuhealth"'


def authorize(request: Request, st: Running, u: str | None, p: str | None,
              challenge: str = TOKEN_CHALLENGE, charge: bool = True) -> None:
    """Raise Unauthorized (401, `challenge` as its WWW-Authenticate) unless the request carries
    a configured write token (any is fine when none is configured); `u` and `p` are the v1
    query parameters. A credential locked out for its failures, or one not yet seen passing
    from an address locked out for guessing, is answered 429 unchecked; `charge=False` looks
    without charging a failure (a first look whose refusal is answered, and charged, later)."""
    tokens = [t.get_secret_value().encode() for t in st.settings.ingest.tokens]
    if not tokens:
        return
    header = request.headers.get("authorization", "")
    scheme, _, cred = header.partition(" ")
    given: str | None = None
    failures = _failures(request)
    address = request.client.host if request.client else "?"
    if scheme.lower() in ("token", "bearer"):
        given = cred.strip()
    elif scheme.lower() == "basic":
        try:
            given = base64.b64decode(cred.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            _refuse_if_locked(failures, identity(header), address)
            if failures is not None and charge:
                failures.failed(identity(header), address)
            raise Unauthorized("malformed Basic authorization header",
                               challenge=challenge) from None
    elif p is not None:
        given = p
    if not given:  # a sender without a token is misconfigured, not guessing: not charged
        raise Unauthorized("authorization required: send 'Authorization: Token <token>'",
                           challenge=challenge)
    ident = identity(given)
    _refuse_if_locked(failures, ident, address)
    # Constant-time comparison against every token, so timing tells nothing.
    if not any(hmac.compare_digest(given.encode(), t) for t in tokens):
        if failures is not None and charge:
            failures.failed(ident, address)
        raise Unauthorized("invalid token", challenge=challenge)
    if failures is not None:
        failures.passed(ident)


def _failures(request: Request) -> AuthFailures | None:
    app = request.scope.get("app")
    auth = getattr(app.state, "gpuhealth_auth", None) if app is not None else None
    got = getattr(auth, "failures", None)
    return got if isinstance(got, AuthFailures) else None


def _refuse_if_locked(failures: AuthFailures | None, ident: str, address: str) -> None:
    wait = 0.0 if failures is None else failures.refusal(ident, address, guessable=True)
    if wait > 0:
        retry = max(1, math.ceil(wait))
        raise TooManyRequests(f"too many failed authentications: retry in {retry} s",
                              retry_after=retry)
