"""Signed, expiring, single-use verdict links: a message about an alert carries a link with
which the on-call engineer who read it gives a verdict (service.learning.verdicts) without an API
token. The link is `{external_url}/verdict/{alert_id}?exp=...&by=...&sig=...`; the signature is
HMAC-SHA256 over the alert, the expiry and `by`, the receiver the message went to, with the
`notify.verdict_link_secret`. So a link answers for its own alert only, until it expires; the
verdict it records is by `link:<receiver>`, which no visitor can choose; it records one verdict
(the state database keeps the links used, service.learning.verdicts); and changing the secret
revokes every link given out. Opening it shows the alert and asks; only the form's POST records
anything, so a mail scanner that fetches links gives no verdict."""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import re
from urllib.parse import quote

DOMAIN = b"gpuhealth-verdict-link.v2"  # this key signs nothing else (v2: the actor is signed)
# A receiver's name as an actor (percent-encoded in the link): printable, not too long.
ACTOR = re.compile(r"[^\x00-\x1f\x7f]{1,80}")


class VerdictLinks:
    def __init__(self, secret: bytes, external_url: str, ttl_s: float) -> None:
        if len(secret) < 16:
            raise ValueError("a verdict link secret needs at least 16 bytes")
        self._secret = secret
        self.base = external_url.rstrip("/")
        self.ttl_s = ttl_s

    def sign(self, alert_id: int, expires: int, by: str) -> str:
        mac = hmac.new(self._secret, b"%s.%d.%d.%s" % (DOMAIN, alert_id, expires, by.encode()),
                       hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def expiry(self, now: float) -> int:
        """Links made within the same half-TTL share their expiry (so a cached message part
        stays valid for at least half the TTL), rounded up to the next half-TTL boundary."""
        half = self.ttl_s / 2
        return int((math.floor(now / half) + 2) * half)

    def url(self, alert_id: int, now: float, by: str) -> str:
        """The link for a message to receiver `by` (the actor its verdict is recorded by)."""
        if not ACTOR.fullmatch(by):  # a receiver name too long or with control characters
            by = "receiver"
        exp = self.expiry(now)
        return (f"{self.base}/verdict/{alert_id}?exp={exp}&by={quote(by, safe='')}"
                f"&sig={self.sign(alert_id, exp, by)}")

    def check(self, alert_id: int, exp: str | None, by: str | None, sig: str | None,
              now: float) -> str | None:
        """None when the link is authentic and unexpired, else why not."""
        if not exp or not sig or not by:
            return "the link lacks its exp, by or sig"
        if not exp.isascii() or not exp.isdigit() or len(exp) > 12:
            return "the link's expiry is not a time"
        if not ACTOR.fullmatch(by) or not hmac.compare_digest(
                self.sign(alert_id, int(exp), by).encode(), sig.encode()):
            return "the link's signature does not match (altered, or the secret has changed)"
        if int(exp) < now:
            return "the link has expired"
        return None
