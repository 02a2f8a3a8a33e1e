"""Signed, expiring verdict links: a message about an alert carries a link with which the
on-call engineer who read it gives a verdict (service.stages.verdicts) without an API token.
The link is `{external_url}/verdict/{alert_id}?exp=...&sig=...`; the signature is HMAC-SHA256
over the alert and the expiry with the `notify.verdict_link_secret`, so a link answers for its
own alert only, until it expires, and changing the secret revokes every link given out.
Opening it shows the alert and asks; only the form's POST records anything, so a mail
scanner that fetches links gives no verdict."""

from __future__ import annotations

import base64
import hashlib
import hmac
import math

DOMAIN = b"gpuhealth-verdict-link.v1"  # this key signs nothing else


class VerdictLinks:
    def __init__(self, secret: bytes, external_url: str, ttl_s: float) -> None:
        if len(secret) < 16:
            raise ValueError("a verdict link secret needs at least 16 bytes")
        self._secret = secret
        self.base = external_url.rstrip("/")
        self.ttl_s = ttl_s

    def sign(self, alert_id: int, expires: int) -> str:
        mac = hmac.new(self._secret, b"%s.%d.%d" % (DOMAIN, alert_id, expires), hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def expiry(self, now: float) -> int:
        """Links made within the same half-TTL share their expiry (so a cached message part
        stays valid for at least half the TTL), rounded up to the next half-TTL boundary."""
        half = self.ttl_s / 2
        return int((math.floor(now / half) + 2) * half)

    def url(self, alert_id: int, now: float) -> str:
        exp = self.expiry(now)
        return f"{self.base}/verdict/{alert_id}?exp={exp}&sig={self.sign(alert_id, exp)}"

    def check(self, alert_id: int, exp: str | None, sig: str | None, now: float) -> str | None:
        """None when the link is authentic and unexpired, else why not."""
        if not exp or not sig:
            return "the link lacks its exp or sig"
        if not (exp.isascii() and exp.isdigit()) or len(exp) > 12:  # `²` is a digit too
            return "the link's expiry is not a time"
        if not hmac.compare_digest(self.sign(alert_id, int(exp)).encode(), sig.encode()):
            return "the link's signature does not match (altered, or the secret has changed)"
        if int(exp) < now:
            return "the link has expired"
        return None
