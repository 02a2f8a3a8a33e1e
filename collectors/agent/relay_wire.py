"""What the relay (collectors.agent.relay) reads and answers on the wire, as the service's write
endpoint reads and answers it (service.api.write, write_lean, write_auth, inflate, problems):
the paths and their query parameters, write tokens as InfluxDB clients send them, bounded gzip
inflation, and error bodies in InfluxDB's shape with the problem-detail members beside it.

Kept apart from the service on purpose: collectors never import the service, and a relay runs
on a rack host with the agent's dependencies only. tests/collectors/agent/test_relay.py holds
the relay's answers to the service's for the same requests.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any
from urllib.parse import parse_qsl

from collectors.compat import dataclass
from collectors.frames import Rejection
from collectors.gzip_body import GzipNotValid, GzipTooLarge, Inflated
from collectors.gzip_body import inflate as _inflate

PATHS = {  # per write path, the query parameters the service declares
    "/write": frozenset({"db", "precision", "strict", "u", "p"}),
    "/v1/write": frozenset({"db", "precision", "strict", "u", "p"}),
    "/api/v2/write": frozenset({"org", "bucket", "precision", "strict", "u", "p"}),
}
PRECISIONS = frozenset({"ns", "n", "us", "u", "ms", "s", "m", "h"})
_BOOL = {"true": True, "1": True, "yes": True, "on": True, "t": True, "y": True,
         "false": False, "0": False, "no": False, "off": False, "f": False, "n": False}
CHALLENGE = 'Token realm="gpuhealth"'
# What a refused write's body says beside the problem members: nothing was written.
NOTHING_WRITTEN: dict[str, Any] = {"accepted": 0, "rejected": 0, "rejections": [],
                                   "truncated": False}


@dataclass
class Refusal(Exception):
    """A request answered with an error: status, problem type and what to say."""

    status: int
    slug: str
    title: str
    detail: str
    headers: dict[str, str] = field(default_factory=dict)
    extensions: dict[str, Any] = field(default_factory=dict)

    def body(self, instance: str) -> dict[str, Any]:
        """InfluxDB's `error` member, then the problem detail (RFC 9457) and its extensions."""
        return {"error": self.detail, **NOTHING_WRITTEN, **self.extensions,
                "type": "/problems/" + self.slug, "title": self.title, "status": self.status,
                "detail": self.detail, "instance": instance}


def bad_request(detail: str, slug: str = "bad-request", title: str = "Bad request") -> Refusal:
    return Refusal(400, slug, title, detail)


def too_large(detail: str) -> Refusal:
    return Refusal(413, "payload-too-large", "Request body too large", detail)


def unsupported(detail: str) -> Refusal:
    return Refusal(415, "unsupported-media-type", "Unsupported media type", detail)


def unauthorized(detail: str) -> Refusal:
    return Refusal(401, "unauthorized", "Authentication required", detail,
                   headers={"WWW-Authenticate": CHALLENGE})


def partial_write(accepted: int, rejections: Sequence[Rejection], truncated: bool,
                  shown: int = 5) -> Refusal:
    """The 400 of a write with refused lines, every valid sample kept (InfluxDB's wording)."""
    listed = "; ".join(str(r) for r in rejections[:shown])
    if len(rejections) > shown:
        listed += f"; and {len(rejections) - shown} more listed"
    n = len(rejections)
    return Refusal(400, "partial-write", "Partial write",
                   f"partial write: {accepted} samples kept, {n} refused: {listed} dropped={n}",
                   extensions={"accepted": accepted, "rejected": n, "truncated": truncated,
                               "rejections": [{"line": r.line, "reason": r.reason,
                                               "entity": r.entity, "metric": r.metric}
                                              for r in rejections]})


@dataclass(frozen=True, slots=True)
class Query:
    precision: str = "ns"
    strict: bool = False
    u: str | None = None
    p: str | None = None


def read_query(raw: str, params: frozenset[str]) -> Query:
    """The declared parameters (others ignored, as the service ignores them); a repeated or
    invalid one is refused (422), as the service's route refuses it."""
    got: dict[str, str] = {}
    for k, v in parse_qsl(raw, keep_blank_values=True):
        if k in params:
            if k in got:
                raise _not_valid(f"query parameter {k!r} given more than once")
            got[k] = v
    precision = got.get("precision", "ns")
    strict = _BOOL.get(got.get("strict", "false").lower())
    if precision not in PRECISIONS:
        raise _not_valid(f"precision {precision[:20]!r}: one of {', '.join(sorted(PRECISIONS))}")
    if strict is None:
        raise _not_valid("strict: a boolean")
    return Query(precision, strict, got.get("u"), got.get("p"))


def _not_valid(detail: str) -> Refusal:
    return Refusal(422, "request-not-valid", "Request not valid",
                   f"the request is not valid: {detail}")


def authorize(headers: Mapping[str, str], tokens: Sequence[bytes], p: str | None) -> None:
    """Refuse (401) unless the request carries one of `tokens` (any is fine when there are
    none): `Authorization: Token T`, `Bearer T`, `Basic base64(user:T)` or `?p=T`."""
    if not tokens:
        return
    scheme, _, cred = headers.get("authorization", "").partition(" ")
    given: str | None = None
    if scheme.lower() in ("token", "bearer"):
        given = cred.strip()
    elif scheme.lower() == "basic":
        try:
            given = base64.b64decode(cred.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            raise unauthorized("malformed Basic authorization header") from None
    elif p is not None:
        given = p
    if not given:
        raise unauthorized("authorization required: send 'Authorization: Token <token>'")
    # Constant-time comparison against every token, so timing tells nothing.
    if not any(hmac.compare_digest(given.encode(), t) for t in tokens):
        raise unauthorized("invalid token")


def inflate(body: bytes, *, limit: int) -> Inflated:
    """A gzip body inflated within the service's bounds (collectors.gzip_body): 413 past
    them, 400 when it is not gzip; one cut short keeps its whole lines."""
    try:
        return _inflate(body, limit=limit)
    except GzipTooLarge as exc:
        raise too_large(str(exc)) from None
    except GzipNotValid as exc:
        raise bad_request(str(exc)) from None
